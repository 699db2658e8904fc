// One SwiGLU value as every CUDA path computes it (SwiGluBf16 in swiglu.cu, the fused
// SwiGluQuantizeActFp8 in linear_w8a8.cu), so that the fused path's bf16 h is the unfused one's
// bit for bit: float32 inside, glm5_next's clamp when limit > 0 (fminf / fmaxf return the non-NaN
// operand, like std::fmin / std::fmax in the CPU twin cpu::SwiGlu).
#pragma once

#include <cuda_bf16.h>

namespace ferry::kernels::cuda {

__device__ __forceinline__ __nv_bfloat16 SwiGluOf(float g, float u, float limit) {
  if (limit > 0.0f) {
    g = fminf(g, limit);
    u = fmaxf(fminf(u, limit), -limit);
  }
  return __float2bfloat16(g / (1.0f + expf(-g)) * u);
}

}  // namespace ferry::kernels::cuda
