// CUDA kernels, callable from plain C++ (this header needs no CUDA headers). Each op states its
// contract and names its CPU twin in kernels/cpu/ops.h, the reference the harness
// (tests/kernels/cuda_harness.cc, binary ferry-kernel-check) checks it against.
//
// Conventions: pointers are device pointers; bf16 values are stored as uint16_t bit patterns
// (__nv_bfloat16 on the device); accumulation is float32; `stream` is a cudaStream_t (nullptr =
// the default stream). Launch errors come back as absl::Status; kernels run asynchronously.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ferry::kernels::cuda {

// Number of usable CUDA devices; 0 when there is no driver or device (never an error).
int DeviceCount();
// "NVIDIA H200, sm_90, 139.8 GiB" for device `index`.
absl::StatusOr<std::string> DeviceName(int index);

// y[rows, dim] = x * rsqrt(mean(x^2) + eps) * w, per row, bf16 in and out, float32 inside.
// CPU twin: cpu::RmsNorm. y may alias x. REQUIRES: dim >= 1.
absl::Status RmsNormBf16(const uint16_t* x, int64_t rows, int64_t dim, const uint16_t* w, float eps,
                         uint16_t* y, void* stream = nullptr);

// Device memory helpers for the harness and tests.
absl::StatusOr<void*> DeviceAlloc(size_t bytes);
absl::Status DeviceFree(void* p);
absl::Status CopyToDevice(void* dst, const void* src, size_t bytes);
absl::Status CopyToHost(void* dst, const void* src, size_t bytes);
absl::Status DeviceFill(void* dst, uint8_t byte, size_t bytes);
absl::Status Synchronize();

}  // namespace ferry::kernels::cuda
