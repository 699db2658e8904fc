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

// A CTA of the fold: kFoldPairs column-group pairs (jp) of one warpgroup half (wg) of a (row,
// group)'s partials, every head. H200, 64 heads, end to end against the previous fold (a CTA of
// 128 threads for 8 heads x 128 columns, each warp reading 64 bytes at eight places): 2 pairs
// batch 64 75.3 -> 71.9 us, 32 42.4 -> 41.2, 16 26.2 -> 27.1, 8 22.2 -> 22.4; 1 pair 73.2 / 42.8 /
// 27.3 / 22.9; 4 pairs 72.3 / 40.8 / 27.0 / 22.3 (medians of three runs,
// bench/results/h200-mla-decode.md, session 15).
constexpr int kFoldPairs = 2;
constexpr int kFoldThreads = 128 * kFoldPairs;
constexpr int kFoldCtas = 32 / kFoldPairs;  // CTAs a (row, group)

// An L2 (.cg) load issued where it stands (volatile: not predicated on, nor moved under, the
// condition that later selects its value).
__device__ __forceinline__ uint4 LoadCg(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float LoadCg(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
  return v;
}

// The merge's scalars of every head of a (row, group), in MlaMergeWeights's layout.
struct FoldScalars {
  float m[kK][kHeadsW];     // item c's running max a head
  float l[kK][2][kHeadsW];  // its sums of tokens [0, 32) and [32, 64) of each tile, a head
  float wgt[kHeadsW][kK];
  float inv[kHeadsW];
  float flag[kK];  // item c's bad flag
};

// The fold: CTA b takes (row, group) s = b / kFoldCtas (row s / groups of the launch, head group
// s % groups) and, of its kK items' partials (ws_o / ws_ml from the group's rank-0 item on),
// warpgroup half wg = (b % kFoldCtas) / (16 / kFoldPairs) and column-group pairs jp = kFoldPairs
// ((b % kFoldCtas) % (16 / kFoldPairs)) + i, i < kFoldPairs, one a 128-thread part of the CTA.
// Thread t of a part reads the 16-byte chunk PartialAt(wg,
// jp, t) of each partial (a warp 512 contiguous bytes: the chunks the consumer thread t stored):
// heads 16 (t / 32) + (t % 32) / 4 and + 8, columns 256 wg + 8 jj + 2 (t % 4) and + 1 for jj = 2
// jp, 2 jp + 1. Per value the cluster merge's arithmetic (MlaMergeWeights over the items with
// tiles, then acc += w_c * partial_c in rank order, MlaMergeOut), so the forms agree bit for bit.
// An item's bad flag, or end < begin, makes the group NaN; n == 0 makes it zero. Launched after
// the item kernel (programmatic dependent launch: it waits for all of it, and through it for
// every kernel before, before reading anything). Every load of the workspace goes out in one
// round with the selection's offsets (the workspace has all kK items; those without tiles are
// read and not used).
__global__ void __launch_bounds__(kFoldThreads)
    MlaDecodeWgFoldKernel(const __nv_bfloat16* __restrict__ ws_o, const float* __restrict__ ws_ml,
                          const int32_t* __restrict__ sel_offsets, int64_t row0, int groups, int heads,
                          __nv_bfloat16* __restrict__ out) {
  __shared__ FoldScalars sc;
  const int64_t grp = blockIdx.x / kFoldCtas;
  const int part = static_cast<int>(blockIdx.x % kFoldCtas), tid = threadIdx.x;
  const int wg = part / (16 / kFoldPairs), jp = kFoldPairs * (part % (16 / kFoldPairs)) + (tid >> 7), t = tid & 127;
  const int y = static_cast<int>(grp % groups);
  const int64_t r = row0 + grp / groups;
  // Everything after the wait: the item kernel is itself a programmatic dependent and lets this
  // kernel start at once, so the kernel that wrote the selection may still be running here.
  PdlWait();
  const __nv_bfloat16* src = ws_o + grp * kK * kItemOP + PartialAt(wg, jp, t);
  const float* ml = ws_ml + grp * kK * kMlP;
  uint4 pv[kK];
#pragma unroll
  for (int c = 0; c < kK; ++c) pv[c] = LoadCg(reinterpret_cast<const uint4*>(src + c * kItemOP));
  constexpr int kScal = 3 * kHeadsW;  // m, then the two sums, of an item's scalars
  static_assert(kK * kScal % kFoldThreads == 0, "the scalars in whole rounds");
  float sv[kK * kScal / kFoldThreads];
#pragma unroll
  for (int i = 0; i < kK * kScal / kFoldThreads; ++i) {
    const int idx = tid + i * kFoldThreads;
    sv[i] = LoadCg(ml + (idx / kScal) * kMlP + idx % kScal);
  }
  const float fl = tid < kK ? LoadCg(ml + tid * kMlP + 192) : 0.0f;
  const int32_t begin = sel_offsets[r], end = sel_offsets[r + 1];  // loaded with the workspace
  const int n = end < begin ? 0 : static_cast<int>(end - begin);
  const int parts = min(kK, (n + kTileW - 1) / kTileW);  // items with tiles; past them max -inf, sums 0
#pragma unroll
  for (int i = 0; i < kK * kScal / kFoldThreads; ++i) {
    const int idx = tid + i * kFoldThreads, c = idx / kScal, k = idx % kScal;
    const bool has = c < parts;
    if (k < kHeadsW) {
      sc.m[c][k] = has ? sv[i] : -INFINITY;
    } else {
      sc.l[c][(k - kHeadsW) / kHeadsW][(k - kHeadsW) % kHeadsW] = has ? sv[i] : 0.0f;
    }
  }
  if (tid < kK) sc.flag[tid] = tid < parts ? fl : 0.0f;
  __syncthreads();
  MlaMergeWeights<kK, kHeadsW, 2>(&sc.m[0][0], &sc.l[0][0][0], &sc.wgt[0][0], sc.inv);
  bool bad = end < begin;
#pragma unroll
  for (int c = 0; c < kK; ++c) bad = bad || sc.flag[c] != 0.0f;
  __syncthreads();
  const int u = t & 3, head0 = 16 * (t >> 5) + ((t & 31) >> 2), head1 = head0 + 8;
  float acc0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc1[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // [2 jq + column 2 u / + 1]
#pragma unroll
  for (int c = 0; c < kK; ++c) {
    if (c >= parts) break;
    const float w0 = sc.wgt[head0][c], w1 = sc.wgt[head1][c];
    const uint32_t w32[4] = {pv[c].x, pv[c].y, pv[c].z, pv[c].w};
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
  const int hcount = min(kHeadsW, heads - y * kHeadsW);
  __nv_bfloat16* out_group = out + (r * heads + y * kHeadsW) * kLatentW;
#pragma unroll
  for (int hx = 0; hx < 2; ++hx) {
    const int head = hx == 0 ? head0 : head1;
    if (head >= hcount) continue;
    const float* a = hx == 0 ? acc0 : acc1;
#pragma unroll
    for (int jq = 0; jq < 2; ++jq) {
      const __nv_bfloat162 val = __halves2bfloat162(MlaMergeOut(a[2 * jq], sc.inv[head], bad, n),
                                                     MlaMergeOut(a[2 * jq + 1], sc.inv[head], bad, n));
      *reinterpret_cast<__nv_bfloat162*>(out_group + head * kLatentW + 256 * wg + 8 * (2 * jp + jq) + 2 * u) = val;
    }
  }
}

}  // namespace

absl::Status LaunchMlaWgFold(const __nv_bfloat16* ws_o, const float* ws_ml, const int32_t* sel_offsets, int64_t row0,
                             int items, int groups, int heads, __nv_bfloat16* out, cudaStream_t stream) {
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MlaDecodeWgFoldKernel, dim3(kFoldCtas * (items / kK)),
                                             dim3(kFoldThreads), 0, stream, ws_o, ws_ml, sel_offsets, row0, groups,
                                             heads, out));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
