// A test of programmatic dependent launch's ordering: an op runs on a fresh stream right behind a
// kernel that lets dependents start at once and writes its output only ~spin_ns later, so a
// dependent that reads that output before its PdlWait sees the old contents.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"

namespace ferry::harness {

// After the device is idle, on a new stream: dst[0, n) = 0, then a kernel that calls griddepcontrol.launch_dependents
// first, spins spin_ns (%globaltimer) and copies src[0, n) to dst; then op(stream) (a cudaStream_t
// as void*); waits for the stream and destroys it. op's error wins over the stream's.
absl::Status RunBehindLateCopy(int32_t* dst, const int32_t* src, int64_t n, int64_t spin_ns,
                               const std::function<absl::Status(void*)>& op);

}  // namespace ferry::harness
