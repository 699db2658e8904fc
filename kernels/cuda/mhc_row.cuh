// One mHC row's mixing weights on a group of lanes (MhcSinkhorn's lane-per-cell form), shared by
// the Sinkhorn kernel (mhc.cu) and the fused mHC input kernel (glue.cu), so both give the same bits.
#pragma once

namespace ferry::kernels::cuda {

// Lanes a row: S * S cells rounded up to 4, 8, 16 or 32 (S <= 5).
constexpr int SinkhornLanes(int s) { return s * s <= 4 ? 4 : s * s <= 8 ? 8 : s * s <= 16 ? 16 : 32; }

__device__ __forceinline__ float MhcSigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// The row's pre [S], post [S] and comb [S, S] from its logits mt [(2 + S) S] (MhcSinkhorn's
// contract, ops.h), computed by the G = SinkhornLanes(S) lanes first .. first + G - 1 of a warp,
// lane l = this lane's place among them; one lane a cell (spare lanes mirror the last cell), every
// sum gathered by shuffles and added in MhcSinkhornKernel's (the CPU's) order. All the group's
// lanes call it together (the whole warp must take part: full-mask shuffles); `live` false: the
// lanes compute on row 0's data and write nothing. Products the CPU rounds before an add are
// __fmul_rn so that nvcc does not fuse them into an FMA.
template <int S>
__device__ __forceinline__ void SinkhornRowLanes(const float* __restrict__ mt, const float* __restrict__ scale,
                                                 const float* __restrict__ base, float eps, int64_t iters, int l,
                                                 int first, bool live, float* __restrict__ pre,
                                                 float* __restrict__ post, float* __restrict__ comb) {
  static_assert(S * S <= 32, "a lane a cell");
  const bool cell = l < S * S;
  const int i = cell ? l / S : S - 1, k = cell ? l % S : S - 1;
  const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
  if (live && l < S) {
    pre[l] = MhcSigmoid(__fmul_rn(mt[l], s0) + base[l]) + eps;
    post[l] = 2.0f * MhcSigmoid(__fmul_rn(mt[S + l], s1) + base[S + l]);
  }
  float c = __fmul_rn(mt[2 * S + i * S + k], s2) + base[2 * S + i * S + k];
  float mx = -INFINITY;
#pragma unroll
  for (int kk = 0; kk < S; ++kk) mx = fmaxf(mx, __shfl_sync(0xffffffffu, c, first + i * S + kk));
  c = expf(c - mx);
  float sum = 0.0f;
#pragma unroll
  for (int kk = 0; kk < S; ++kk) sum += __shfl_sync(0xffffffffu, c, first + i * S + kk);
  c = c / sum + eps;
  for (int64_t it = 0; it < (iters > 1 ? iters : 1); ++it) {
    if (it > 0) {
      float r = 0.0f;
#pragma unroll
      for (int kk = 0; kk < S; ++kk) r += __shfl_sync(0xffffffffu, c, first + i * S + kk);
      c /= r + eps;
    }
    float col = 0.0f;
#pragma unroll
    for (int ii = 0; ii < S; ++ii) col += __shfl_sync(0xffffffffu, c, first + ii * S + k);
    c /= col + eps;
  }
  if (live && cell) comb[l] = c;
}

}  // namespace ferry::kernels::cuda
