// Interleaved RoPE in place on strided bf16 slices: one thread a pair, float32 angle and
// cosf/sinf (no fast-math intrinsics), as cpu::RopeInterleaved computes them.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void RopeKernel(__nv_bfloat16* x, int64_t heads, int64_t row_stride, int64_t head_stride,
                           int64_t offset, int64_t half, int64_t pairs, const int64_t* __restrict__ positions,
                           const float* __restrict__ inv_freq) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = p % half;
    const int64_t rh = p / half;
    const int64_t h = rh % heads, r = rh / heads;
    __nv_bfloat16* e = x + r * row_stride + h * head_stride + offset + 2 * j;
    const float angle = static_cast<float>(positions[r]) * inv_freq[j];
    const float c = cosf(angle), s = sinf(angle);
    const float a = __bfloat162float(e[0]), b = __bfloat162float(e[1]);
    // Products rounded separately (no FMA contraction), as the CPU twin computes them.
    e[0] = __float2bfloat16(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    e[1] = __float2bfloat16(__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
  }
}

}  // namespace

absl::Status RopeInterleavedBf16(uint16_t* x, int64_t rows, int64_t heads, int64_t row_stride,
                                 int64_t head_stride, int64_t offset, int64_t dim, const int64_t* positions,
                                 const float* inv_freq, void* stream) {
  if (rows < 0 || heads < 0 || dim < 2 || dim % 2 != 0 || offset < 0 ||
      (heads > 1 && offset + dim > head_stride) || (rows > 1 && row_stride < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("RopeInterleavedBf16: rows ", rows, ", heads ", heads,
                                                   ", row_stride ", row_stride, ", head_stride ", head_stride,
                                                   ", offset ", offset, ", dim ", dim,
                                                   " (need dim even >= 2 and offset + dim <= head_stride)"));
  }
  if (rows == 0 || heads == 0) return absl::OkStatus();
  if (x == nullptr || positions == nullptr || inv_freq == nullptr) {
    return absl::InvalidArgumentError("RopeInterleavedBf16: null x, positions or inv_freq");
  }
  const int64_t half = dim / 2, pairs = rows * heads * half;
  const int64_t blocks = std::min<int64_t>((pairs + kThreads - 1) / kThreads, 65536);
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(RopeKernel, static_cast<unsigned>(blocks), kThreads, 0,
                                             static_cast<cudaStream_t>(stream), reinterpret_cast<__nv_bfloat16*>(x),
                                             heads, row_stride, head_stride, offset, half, pairs, positions, inv_freq));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
