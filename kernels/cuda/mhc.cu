// mHC mixing weights from the site logits (MhcSinkhorn in ops.h): the operations of
// model/blocks/mhc.cc's MhcPre in the same order, one lane a matrix cell (S <= 5: a group of lanes a
// row, each sum gathered by shuffles and added in the CPU's order) or one thread a row (S > 5). Products that the CPU rounds before an
// add are written __fmul_rn so that nvcc does not fuse them into an FMA; what remains different
// from the host is expf.
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/mhc_row.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ float Sigmoid(float x) { return MhcSigmoid(x); }

template <int S>
__global__ void __launch_bounds__(kThreads)
    MhcSinkhornKernel(const float* __restrict__ m, int64_t rows, const float* __restrict__ scale,
                      const float* __restrict__ base, float eps, int64_t iters, float* __restrict__ pre,
                      float* __restrict__ post, float* __restrict__ comb) {
  PdlLaunchDependents();
  PdlWait();
  constexpr int M = (2 + S) * S;
  const int64_t t = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (t >= rows) return;
  const float* mt = m + t * M;
  const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
#pragma unroll
  for (int j = 0; j < S; ++j) {
    pre[t * S + j] = Sigmoid(__fmul_rn(mt[j], s0) + base[j]) + eps;
    post[t * S + j] = 2.0f * Sigmoid(__fmul_rn(mt[S + j], s1) + base[S + j]);
  }
  float c[S][S];
#pragma unroll
  for (int i = 0; i < S; ++i) {
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < S; ++k) {
      c[i][k] = __fmul_rn(mt[2 * S + i * S + k], s2) + base[2 * S + i * S + k];
      mx = fmaxf(mx, c[i][k]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < S; ++k) sum += (c[i][k] = expf(c[i][k] - mx));
#pragma unroll
    for (int k = 0; k < S; ++k) c[i][k] = c[i][k] / sum + eps;
  }
  for (int64_t it = 0; it < (iters > 1 ? iters : 1); ++it) {
    if (it > 0) {  // row normalisation, then the column one (the first round is columns only)
#pragma unroll
      for (int i = 0; i < S; ++i) {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < S; ++k) s += c[i][k];
#pragma unroll
        for (int k = 0; k < S; ++k) c[i][k] /= s + eps;
      }
    }
#pragma unroll
    for (int k = 0; k < S; ++k) {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < S; ++i) s += c[i][k];
#pragma unroll
      for (int i = 0; i < S; ++i) c[i][k] /= s + eps;
    }
  }
#pragma unroll
  for (int i = 0; i < S; ++i) {
#pragma unroll
    for (int k = 0; k < S; ++k) comb[t * S * S + i * S + k] = c[i][k];
  }
}

// The lane-per-cell form (S * S <= 32): SinkhornRowLanes (mhc_row.cuh) on a group of lanes a row.
template <int S>
__global__ void __launch_bounds__(kThreads)
    MhcSinkhornLanesKernel(const float* __restrict__ m, int64_t rows, const float* __restrict__ scale,
                           const float* __restrict__ base, float eps, int64_t iters, float* __restrict__ pre,
                           float* __restrict__ post, float* __restrict__ comb) {
  PdlLaunchDependents();
  PdlWait();
  constexpr int M = (2 + S) * S, G = SinkhornLanes(S);
  const int64_t t = (blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x) / G;
  const int l = threadIdx.x % G, first = (threadIdx.x & 31) - l;
  const bool live = t < rows;
  const int64_t tt = live ? t : 0;
  SinkhornRowLanes<S>(m + tt * M, scale, base, eps, iters, l, first, live, pre + tt * S, post + tt * S,
                      comb + tt * S * S);
}

template <int S>
absl::Status Launch(const float* m, int64_t rows, const float* scale, const float* base, float eps, int64_t iters,
                    float* pre, float* post, float* comb, void* stream) {
  if constexpr (S * S <= 32) {
    constexpr int64_t kLanes = SinkhornLanes(S);
    const int64_t blocks = (rows * kLanes + kThreads - 1) / kThreads;
    FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MhcSinkhornLanesKernel<S>, static_cast<unsigned>(blocks), kThreads, 0,
                                               static_cast<cudaStream_t>(stream), m, rows, scale, base, eps, iters, pre,
                                               post, comb));
  } else {
    const int64_t blocks = (rows + kThreads - 1) / kThreads;
    FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MhcSinkhornKernel<S>, static_cast<unsigned>(blocks), kThreads, 0,
                                               static_cast<cudaStream_t>(stream), m, rows, scale, base, eps, iters, pre,
                                               post, comb));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MhcSinkhorn(const float* m, int64_t rows, int64_t streams, const float* scale, const float* base,
                         float eps, int64_t iters, float* pre, float* post, float* comb, void* stream) {
  if (rows < 0 || rows > 0x7fffffff || streams < 1 || streams > 8) {
    return absl::InvalidArgumentError(absl::StrCat("MhcSinkhorn: rows ", rows, ", streams ", streams,
                                                   " (need 0 <= rows <= 2^31 - 1, 1 <= streams <= 8)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (m == nullptr || scale == nullptr || base == nullptr || pre == nullptr || post == nullptr || comb == nullptr) {
    return absl::InvalidArgumentError("MhcSinkhorn: null m, scale, base, pre, post or comb");
  }
  switch (streams) {
    case 1: return Launch<1>(m, rows, scale, base, eps, iters, pre, post, comb, stream);
    case 2: return Launch<2>(m, rows, scale, base, eps, iters, pre, post, comb, stream);
    case 3: return Launch<3>(m, rows, scale, base, eps, iters, pre, post, comb, stream);
    case 4: return Launch<4>(m, rows, scale, base, eps, iters, pre, post, comb, stream);
    case 5: return Launch<5>(m, rows, scale, base, eps, iters, pre, post, comb, stream);
    case 6: return Launch<6>(m, rows, scale, base, eps, iters, pre, post, comb, stream);
    case 7: return Launch<7>(m, rows, scale, base, eps, iters, pre, post, comb, stream);
    default: return Launch<8>(m, rows, scale, base, eps, iters, pre, post, comb, stream);
  }
}

}  // namespace ferry::kernels::cuda
