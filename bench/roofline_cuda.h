// The benchmark's own device helpers (bench/roofline_cuda.cu), callable from plain C++: the
// streaming read that measures HBM bandwidth, random fills, pinned host memory and event timing.
// Pointers are device pointers unless named host; everything runs on the default stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status.h"
#include "kernels/cuda/ops.h"

namespace ferry::bench {

// Device blocks of one measurement, freed on scope exit.
class DeviceBlocks {
 public:
  DeviceBlocks() = default;
  DeviceBlocks(const DeviceBlocks&) = delete;
  DeviceBlocks& operator=(const DeviceBlocks&) = delete;
  ~DeviceBlocks() {
    for (void* p : blocks_) (void)kernels::cuda::DeviceFree(p);
  }
  // n values of T (at least one, so that every block has an address).
  template <typename T>
  absl::StatusOr<T*> Take(int64_t n) {
    FERRY_ASSIGN_OR_RETURN(void* p, kernels::cuda::DeviceAlloc(static_cast<size_t>(n > 1 ? n : 1) * sizeof(T)));
    blocks_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  absl::StatusOr<T*> Upload(const std::vector<T>& host) {
    FERRY_ASSIGN_OR_RETURN(T * d, Take<T>(static_cast<int64_t>(host.size())));
    FERRY_RETURN_IF_ERROR(kernels::cuda::CopyToDevice(d, host.data(), host.size() * sizeof(T)));
    return d;
  }

 private:
  std::vector<void*> blocks_;
};

// Reads bytes [0, bytes) of `src` once (16-byte loads, a grid-stride loop over every
// multiprocessor) and folds what it read into *sink (one device uint32), so no load is dropped.
// REQUIRES: src 16-byte aligned, bytes a multiple of 16.
absl::Status StreamRead(const void* src, size_t bytes, uint32_t* sink);

// dst[i] = offset + scale * u(seed, i) rounded to bf16 (or kept in float32), where u is uniform
// on [-sqrt(3), sqrt(3)) (mean 0, variance 1) from a hash of (seed, i): the same values for the
// same seed, no state. Never zeros: METHOD.md saw a bf16 GEMM run 13% faster on them.
absl::Status FillRandomBf16(uint16_t* dst, int64_t n, uint64_t seed, float scale, float offset = 0.0f);
absl::Status FillRandomF32(float* dst, int64_t n, uint64_t seed, float scale, float offset = 0.0f);
// dst[i] = E4M3(scale * u(seed, i)), saturating (FP8 weights; scale <= 448 / sqrt(3) keeps them finite).
absl::Status FillRandomFp8(uint8_t* dst, int64_t n, uint64_t seed, float scale);

// One bf16 GEMM of the expert comparison (section 2d): y [rows, out] = x [rows, in] · w [out, in]^T.
struct GemmProblem {
  const uint16_t* x = nullptr;
  int64_t rows = 0;
  const uint16_t* w = nullptr;
  uint16_t* y = nullptr;
};
// All `problems` (rows > 0) in one cublasGemmGroupedBatchedEx call, one group a problem, bf16
// operands and result, float32 compute, on the default stream: a grouped GEMM whose sizes the
// host knows, the alternative to GroupedLinearBf16's side streams. `ptrs` is device scratch for
// 3 x problems.size() pointers (uploaded each call, as a model would every layer). Its own cuBLAS
// handle, made on first use.
absl::Status GroupedBatchedGemmBf16(const std::vector<GemmProblem>& problems, int64_t in, int64_t out, void** ptrs);

// Page-locked host memory (host-to-device copies from it run at the link's rate).
absl::StatusOr<void*> HostAllocPinned(size_t bytes);
void HostFreePinned(void* p);

// L2 size and multiprocessor count of the current device.
struct DeviceShape {
  int64_t l2_bytes = 0;
  int sms = 0;
};
absl::StatusOr<DeviceShape> CurrentDeviceShape();

// Times `fn` with a pair of CUDA events around each call: `warmup` untimed calls, then `reps`
// timed ones; before each timed call `between` (may be empty) runs outside the events (an L2
// flush). Returns the `reps` times in milliseconds. The first error of fn or of a CUDA call.
absl::StatusOr<std::vector<double>> TimeEvents(const std::function<absl::Status()>& fn, int warmup, int reps,
                                               const std::function<absl::Status()>& between = {});

}  // namespace ferry::bench
