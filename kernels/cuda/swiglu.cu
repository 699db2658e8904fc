// SwiGLU with glm5_next's optional clamp, elementwise over [rows, cols], float32 inside (the
// value: swiglu.cuh).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/swiglu.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void SwiGluKernel(const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t cols, int64_t in_stride,
                             int64_t total, float limit, __nv_bfloat16* out) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, i = e % cols;
    out[e] = SwiGluOf(__bfloat162float(gate[r * in_stride + i]), __bfloat162float(up[r * in_stride + i]), limit);
  }
}

// The same, eight values a thread by 16-byte loads and stores (cols and in_stride multiples of 8,
// the three pointers 16-byte aligned): `total8` = rows * cols / 8 chunks.
__global__ void SwiGlu8Kernel(const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t cols8, int64_t in_stride,
                              int64_t total8, float limit, __nv_bfloat16* out) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total8;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols8, at = r * in_stride + (e % cols8) * 8;
    const uint4 g8 = *reinterpret_cast<const uint4*>(gate + at), u8 = *reinterpret_cast<const uint4*>(up + at);
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&g8);
    const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&u8);
    uint4 h8;
    __nv_bfloat162* h2 = reinterpret_cast<__nv_bfloat162*>(&h8);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 g = __bfloat1622float2(g2[k]), u = __bfloat1622float2(u2[k]);
      h2[k] = __halves2bfloat162(SwiGluOf(g.x, u.x, limit), SwiGluOf(g.y, u.y, limit));
    }
    *reinterpret_cast<uint4*>(out + e * 8) = h8;
  }
}

}  // namespace

absl::Status SwiGluBf16(const uint16_t* gate, const uint16_t* up, int64_t rows, int64_t cols,
                        int64_t in_stride, float limit, uint16_t* out, void* stream) {
  if (rows < 0 || cols < 1 || in_stride < cols) {
    return absl::InvalidArgumentError(absl::StrCat("SwiGluBf16: rows ", rows, ", cols ", cols, ", in_stride ",
                                                   in_stride, " (need cols >= 1, in_stride >= cols)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (gate == nullptr || up == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("SwiGluBf16: null gate, up or out");
  }
  const int64_t total = rows * cols;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (cols % 8 == 0 && in_stride % 8 == 0 && aligned(gate) && aligned(up) && aligned(out)) {
    const int64_t blocks = std::min<int64_t>((total / 8 + kThreads - 1) / kThreads, 65536);
    FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(SwiGlu8Kernel, static_cast<unsigned>(blocks), kThreads, 0,
                                               static_cast<cudaStream_t>(stream),
                                               reinterpret_cast<const __nv_bfloat16*>(gate),
                                               reinterpret_cast<const __nv_bfloat16*>(up), cols / 8, in_stride,
                                               total / 8, limit, reinterpret_cast<__nv_bfloat16*>(out)));
    return absl::OkStatus();
  }
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 65536);
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(SwiGluKernel, static_cast<unsigned>(blocks), kThreads, 0,
                                             static_cast<cudaStream_t>(stream),
                                             reinterpret_cast<const __nv_bfloat16*>(gate),
                                             reinterpret_cast<const __nv_bfloat16*>(up), cols, in_stride, total, limit,
                                             reinterpret_cast<__nv_bfloat16*>(out)));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
