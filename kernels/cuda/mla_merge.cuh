// What the two tensor-core MLA decode kernels (mla_decode_tc.cu: mma.sync; mla_decode_wg.cu:
// wgmma) share: the launch configuration of a cluster of kMlaTcCluster CTAs, and the last step of
// the merge, where CTA `rank` folds the K partials of its heads in rank order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/mla_decode_tc.h"

namespace ferry::kernels::cuda {

// A launch of `grid` CTAs of `threads` threads and `bytes` of dynamic shared memory in clusters
// of kMlaTcCluster along x. `attr` (one attribute) must outlive the launch call.
inline cudaLaunchConfig_t MlaClusterConfig(dim3 grid, int threads, int bytes, void* stream,
                                           cudaLaunchAttribute* attr) {
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kMlaTcCluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.dynamicSmemBytes = bytes;
  cfg.stream = static_cast<cudaStream_t>(stream);
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// The fold's weights: this CTA owns heads rank, rank + K, ... (kHk of them, slot hh = head / K)
// and has every CTA (or work item) c's running max recv_m [K][kHk] and running sums recv_l
// [K][kParts][kHk] (kParts partial sums a CTA, added in order) of them in shared memory; sets
// wgt [kHk][K] = exp2(m_c - max) and inv [kHk] = 1 / the weighted sum (threads hh < kHk). The
// caller's CTA barrier makes them visible.
template <int K, int kHk, int kParts>
__device__ __forceinline__ void MlaMergeWeights(const float* recv_m, const float* recv_l, float* wgt, float* inv) {
  const int tid = threadIdx.x;
  if (tid < kHk) {
    float m = -INFINITY;
#pragma unroll
    for (int c = 0; c < K; ++c) m = fmaxf(m, recv_m[c * kHk + tid]);
    float l = 0.0f;
#pragma unroll
    for (int c = 0; c < K; ++c) {
      const float w = exp2f(recv_m[c * kHk + tid] - m);
      wgt[tid * K + c] = w;
      float lc = 0.0f;
#pragma unroll
      for (int p = 0; p < kParts; ++p) lc += recv_l[(c * kParts + p) * kHk + tid];
      l += w * lc;
    }
    inv[tid] = 1.0f / l;
  }
}

// An output value of the fold: NaN when `bad`, 0 for an empty selection, else acc / sum.
__device__ __forceinline__ __nv_bfloat16 MlaMergeOut(float acc, float inv, bool bad, int n) {
  return __float2bfloat16_rn(bad ? __int_as_float(0x7fc00000) : (n == 0 ? 0.0f : acc * inv));
}

// The fold: with the weights above, having received from every CTA c of the cluster, in its own
// shared memory, recv [K][kHk][kOStride] bf16: c's unnormalised output (exp2 domain) of each
// owned head, writes out_heads[h * 512 + d] (the row's first head of the group at out_heads)
// for owned heads h < hcount: the K partials weighted by exp2(m_c - max) and divided by the
// weighted sum, in rank order, float32 (MlaMergeOut). wgt [kHk][K] and inv [kHk] are scratch.
// Every thread of the CTA calls it (one CTA barrier).
template <int K, int kHk, int kOStride, int kParts, int kThreads>
__device__ __forceinline__ void MlaMergeFold(const __nv_bfloat16* recv, const float* recv_m, const float* recv_l,
                                             float* wgt, float* inv, bool bad, int n, int rank, int hcount,
                                             __nv_bfloat16* out_heads) {
  const int tid = threadIdx.x;
  MlaMergeWeights<K, kHk, kParts>(recv_m, recv_l, wgt, inv);
  __syncthreads();
  for (int idx = tid; idx < kHk * 64; idx += kThreads) {
    const int hh = idx >> 6, d = (idx & 63) * 8;
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
#pragma unroll
    for (int c = 0; c < K; ++c) {
      const uint4 raw = *reinterpret_cast<const uint4*>(recv + (c * kHk + hh) * kOStride + d);
      const __nv_bfloat162* v = reinterpret_cast<const __nv_bfloat162*>(&raw);
      const float w = wgt[hh * K + c];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = __bfloat1622float2(v[e]);
        acc[2 * e] += w * f.x;
        acc[2 * e + 1] += w * f.y;
      }
    }
    const int h = hh * K + rank;
    if (h < hcount) {
      __align__(16) __nv_bfloat16 v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = MlaMergeOut(acc[e], inv[hh], bad, n);
      *reinterpret_cast<uint4*>(out_heads + h * 512 + d) = *reinterpret_cast<const uint4*>(v);
    }
  }
}

}  // namespace ferry::kernels::cuda
