// The fold of the persistent MLA decode form (mla_decode_wg_persistent.cu): each row's partials,
// one per work item (rank c: tiles c, c + K, ... of the row), merged in rank order with the
// cluster form's merge arithmetic (mla_merge.cuh), so the two forms give the same bits.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/mla_decode_wg_workspace.cuh"
#include "kernels/cuda/mla_merge.cuh"
#include "kernels/cuda/pdl.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kFoldScalars = (4 * kK + 1) * kHk + kK;  // floats of FoldSlice's scalars

// A quarter of one slice of a (row, group)'s fold, by a CTA of 128 threads: heads c, c + K, ... of
// the group (as the cluster form's CTA c owns them), a quarter of their columns, from the `parts`
// partials of its items with tiles (ws_o / ws_ml from the group's rank-0 item on), with the
// cluster merge's arithmetic (MlaMergeWeights, then per value acc += w_c' * partial_c' in rank
// order, MlaMergeOut), into out_group (the row's first head of the group). In PartialAt's layout
// the slice is, for each warpgroup half h and column-group pair jp, the 16-byte chunks of consumer
// threads 32 v + 4 c + u (v, u < 4): heads 16 v + c and + 8, columns 256 h + 8 (2 jp + jq) + 2 u
// and + 1 (jq < 2). Thread k takes u = k % 4, v = (k / 4) % 4 and the pair (h, jp) = P / 16, P %
// 16 with P = k / 16 + 8 quarter: a warp's load reads 64 whole bytes (two sectors) at each of
// eight places. `broken` (end < begin) or an item's bad flag makes the slice NaN; n == 0 makes it
// zero. `scalars`: shared memory for m, sums, weights and flags. Every load of the workspace goes
// out in one round.
__device__ __forceinline__ void FoldSlice(float* scalars, const __nv_bfloat16* ws_o, const float* ws_ml,
                                          int c, int quarter, int parts, int n, bool broken,
                                          __nv_bfloat16* out_group, int hcount) {
  static_assert(kHk == 8 && kK == 8, "heads 16 v + c and + 8 are the slice's eight");
  float* recv_m = scalars;                  // [K][kHk]
  float* recv_l = recv_m + kK * kHk;        // [K][2][kHk]
  float* wgt = recv_l + kK * 2 * kHk;       // [kHk][K]
  float* inv = wgt + kHk * kK;              // [kHk]
  float* flag_s = inv + kHk;                // [K]: item c's bad flag
  const int t = threadIdx.x;
  const int u = t & 3, v = (t >> 2) & 3, pair = (t >> 4) + 8 * quarter, h = pair >> 4, jp = pair & 15;
  const __nv_bfloat16* src = ws_o + PartialAt(h, jp, 32 * v + 4 * c + u);
  uint4 part[kK];
#pragma unroll
  for (int cc = 0; cc < kK; ++cc) {
    if (cc < parts) part[cc] = __ldcg(reinterpret_cast<const uint4*>(src + cc * kItemOP));
  }
  if (t < kK * kHk) {  // items past `parts` had no tiles: max -inf, sums 0
    const int cc = t / kHk, hh = t % kHk, head = hh * kK + c;
    const bool has = cc < parts;
    const float* ml = ws_ml + cc * kMlP;
    recv_m[cc * kHk + hh] = has ? __ldcg(ml + head) : -INFINITY;
    recv_l[(cc * 2) * kHk + hh] = has ? __ldcg(ml + 64 + head) : 0.0f;
    recv_l[(cc * 2 + 1) * kHk + hh] = has ? __ldcg(ml + 128 + head) : 0.0f;
  } else if (t < kK * kHk + kK) {
    const int cc = t - kK * kHk;
    flag_s[cc] = cc < parts ? __ldcg(ws_ml + cc * kMlP + 192) : 0.0f;
  }
  __syncthreads();
  MlaMergeWeights<kK, kHk, 2>(recv_m, recv_l, wgt, inv);
  bool bad = broken;
#pragma unroll
  for (int cc = 0; cc < kK; ++cc) bad = bad || flag_s[cc] != 0.0f;
  __syncthreads();
  const int hh0 = 2 * v, hh1 = 2 * v + 1;  // heads 16 v + c = hh0 * K + c and + 8
  float acc0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc1[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // [2 jq + column 2 u / + 1]
#pragma unroll
  for (int cc = 0; cc < kK; ++cc) {
    if (cc >= parts) break;
    const float w0 = wgt[hh0 * kK + cc], w1 = wgt[hh1 * kK + cc];
    const uint32_t w32[4] = {part[cc].x, part[cc].y, part[cc].z, part[cc].w};
#pragma unroll
    for (int jq = 0; jq < 2; ++jq) {
      const float2 f0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w32[2 * jq]));
      const float2 f1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w32[2 * jq + 1]));
      acc0[2 * jq] += w0 * f0.x;
      acc0[2 * jq + 1] += w0 * f0.y;
      acc1[2 * jq] += w1 * f1.x;
      acc1[2 * jq + 1] += w1 * f1.y;
    }
  }
#pragma unroll
  for (int hx = 0; hx < 2; ++hx) {
    const int hh = hx == 0 ? hh0 : hh1, head = hh * kK + c;
    if (head >= hcount) continue;
    const float* a = hx == 0 ? acc0 : acc1;
#pragma unroll
    for (int jq = 0; jq < 2; ++jq) {
      const __nv_bfloat162 val = __halves2bfloat162(MlaMergeOut(a[2 * jq], inv[hh], bad, n),
                                                     MlaMergeOut(a[2 * jq + 1], inv[hh], bad, n));
      *reinterpret_cast<__nv_bfloat162*>(out_group + head * kLatentW + 256 * h + 8 * (2 * jp + jq) + 2 * u) = val;
    }
  }
}

// The fold: one CTA of 128 threads a quarter slice (CTA b: item index s = b / 4, heads slice s % K
// of row-group s / K as the cluster form's CTA s % K owns them, quarter b % 4 of their columns),
// FoldSlice over the items' partials. Launched after the item kernel (programmatic dependent
// launch: it waits for all of it before reading the workspace).
__global__ void __launch_bounds__(128)
    MlaDecodeWgFoldKernel(const __nv_bfloat16* __restrict__ ws_o, const float* __restrict__ ws_ml,
                          const int32_t* __restrict__ sel_offsets, int64_t row0, int groups, int heads,
                          __nv_bfloat16* __restrict__ out) {
  __shared__ float scalars[kFoldScalars];
  const int64_t slice = blockIdx.x >> 2, grp = slice / kK;
  const int c = static_cast<int>(slice % kK), y = static_cast<int>(grp % groups);
  const int64_t r = row0 + grp / groups;
  // The selection was written before the item kernel began: read it before waiting for that.
  const int64_t begin = sel_offsets[r], end = sel_offsets[r + 1];
  const int n = end < begin ? 0 : static_cast<int>(end - begin);
  PdlWait();
  FoldSlice(scalars, ws_o + grp * kK * kItemOP, ws_ml + grp * kK * kMlP, c, blockIdx.x & 3,
            min(kK, (n + kTileW - 1) / kTileW), n, end < begin, out + (r * heads + y * kHeadsW) * kLatentW,
            min(kHeadsW, heads - y * kHeadsW));
}

}  // namespace

absl::Status LaunchMlaWgFold(const __nv_bfloat16* ws_o, const float* ws_ml, const int32_t* sel_offsets, int64_t row0,
                             int items, int groups, int heads, __nv_bfloat16* out, cudaStream_t stream) {
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MlaDecodeWgFoldKernel, dim3(4 * items), dim3(128), 0, stream, ws_o,
                                             ws_ml, sel_offsets, row0, groups, heads, out));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
