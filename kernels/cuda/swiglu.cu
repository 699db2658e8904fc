// SwiGLU with glm5_next's optional clamp, elementwise over [rows, cols], float32 inside.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"

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
    float g = __bfloat162float(gate[r * in_stride + i]);
    float u = __bfloat162float(up[r * in_stride + i]);
    if (limit > 0.0f) {  // fminf/fmaxf return the non-NaN operand, like std::fmin/fmax on the CPU
      g = fminf(g, limit);
      u = fmaxf(fminf(u, limit), -limit);
    }
    out[e] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
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
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 65536);
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(SwiGluKernel, static_cast<unsigned>(blocks), kThreads, 0,
                                             static_cast<cudaStream_t>(stream),
                                             reinterpret_cast<const __nv_bfloat16*>(gate),
                                             reinterpret_cast<const __nv_bfloat16*>(up), cols, in_stride, total, limit,
                                             reinterpret_cast<__nv_bfloat16*>(out)));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
