// RMSNorm over bf16 rows: one block per row, float32 sums, warp shuffles then shared memory.
#include <cuda_bf16.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void RmsNormKernel(const __nv_bfloat16* __restrict__ x, int64_t dim,
                              const __nv_bfloat16* __restrict__ w, float eps, __nv_bfloat16* y) {
  PdlLaunchDependents();
  PdlWait();
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * dim;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = __bfloat162float(xr[i]);
    sum += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  __shared__ float warp_sums[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sum;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
  const float inv = rsqrtf(total / static_cast<float>(dim) + eps);
  // y may alias x: every thread has read its elements above and all reads precede the barrier.
  __nv_bfloat16* yr = y + row * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    yr[i] = __float2bfloat16(__bfloat162float(w[i]) * (__bfloat162float(xr[i]) * inv));
  }
}

}  // namespace

absl::Status RmsNormBf16(const uint16_t* x, int64_t rows, int64_t dim, const uint16_t* w, float eps,
                         uint16_t* y, void* stream) {
  if (dim < 1) return absl::InvalidArgumentError(absl::StrCat("RmsNormBf16: dim is ", dim));
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(RmsNormKernel, static_cast<unsigned>(rows), kThreads, 0,
                                             static_cast<cudaStream_t>(stream),
                                             reinterpret_cast<const __nv_bfloat16*>(x), dim,
                                             reinterpret_cast<const __nv_bfloat16*>(w), eps,
                                             reinterpret_cast<__nv_bfloat16*>(y)));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
