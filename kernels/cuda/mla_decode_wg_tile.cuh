// What the two forms of the sm_90a MLA decode kernel share (mla_decode_wg.cu: the cluster form,
// whose file comment describes a tile; mla_decode_wg_persistent.cu: the persistent form): the tile
// geometry, the 128-byte swizzle, the copies of q and of a tile's cached rows into shared memory,
// and one tile of the online softmax as the cluster form computes it (WgTile; the persistent form
// splits a tile between its warpgroups by role, with the same arithmetic). Included by those two
// files, the persistent form's fold (through mla_decode_wg_workspace.cuh) and the tile bench
// (tests/kernels/bench_mla_parts.cu) alone, inside an anonymous namespace (each its own copy).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla_decode_tc.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kLatentW = 512;
constexpr int kTileW = 64;      // tokens a tile
constexpr int kHeadsW = 64;     // heads a CTA (wgmma's M)
constexpr int kThreadsW = 256;  // two warpgroups
constexpr int kK = kMlaTcCluster;
constexpr int kHk = kHeadsW / kK;           // heads a CTA merges
constexpr int kBlock = 64 * 128;            // a column block: 64 rows x 64 bf16 values

// Byte offset of 16-byte chunk c (of 8 bf16) of row r in a 128-byte-swizzled matrix of column
// blocks (wgmma.cuh).
__device__ __forceinline__ uint32_t SwzW(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * kBlock + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

__device__ __forceinline__ void NamedSync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreadsW) : "memory");
}

__device__ __forceinline__ uint32_t PackBf16W(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// q [64 heads x W] of row r, heads [h0, h0 + 64), into the swizzled layout at q_smem (rows past
// hcount zero-filled): threads first, first + 1, ... (`stride` of them; by default the CTA's two
// warpgroups) each copy their share with 16-byte cp.async.
template <int W>
__device__ __forceinline__ void CopyQW(uint32_t q_smem, const __nv_bfloat16* q_abs, const __nv_bfloat16* q_pe,
                                       int heads, int64_t r, int h0, int hcount, int first = threadIdx.x,
                                       int stride = kThreadsW) {
  constexpr int kRope = W - kLatentW, kChunks = W / 8;
  for (int i = first; i < kHeadsW * kChunks; i += stride) {
    const int h = i / kChunks, c = i % kChunks;
    const __nv_bfloat16* src = q_abs;
    int bytes = 0;
    if (h < hcount) {
      const int64_t rh = r * heads + h0 + h;
      src = c < kLatentW / 8 ? q_abs + rh * kLatentW + c * 8 : q_pe + rh * kRope + (c - kLatentW / 8) * 8;
      bytes = 16;
    }
    ptx::CpAsync16(q_smem + SwzW(h, c), src, bytes);
  }
}

// A tile's 64 token rows into the stage at `dst`: row i from arena + offs[i], zero-filled where
// offs[i] < 0 (`any` is a valid address for the zero-byte copies). Thread tid copies chunks
// tid % 8 of every column block of rows tid / 8 and tid / 8 + 32 with 16-byte cp.async.
template <int W>
__device__ __forceinline__ void CopyTileW(uint32_t dst, const int64_t* offs, const __nv_bfloat16* arena,
                                          const __nv_bfloat16* any) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = (tid >> 3) + 32 * half;
    const int64_t off = offs[row];
    const __nv_bfloat16* src = off >= 0 ? arena + off : nullptr;
#pragma unroll
    for (int b = 0; b < W / 64; ++b) {
      const int c = 8 * b + (tid & 7);
      const __nv_bfloat16* from = src != nullptr ? src + c * 8 : any;
      ptx::CpAsync16(dst + SwzW(row, c), from, src != nullptr ? 16 : 0);
    }
  }
}

// The softmax steps both forms take the same way (their bits must agree), on a wgmma accumulator
// of kJ 8-column blocks (d[4 j + e]: head row0 + 8 (e / 2), column 8 j + 2 q4 + e % 2, q4 = lane %
// 4): columns at or past `valid` become -inf, the others x * scale_log2; mx = the row maxima over
// the four lanes that share the rows.
template <int kJ>
__device__ __forceinline__ void ScaleMaskRowMax(float (&s)[4 * kJ], int valid, float scale_log2, float (&mx)[2]) {
  const int q4 = threadIdx.x & 3;
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = 8 * j + 2 * q4 + (e & 1);
      float& x = s[4 * j + e];
      x = col < valid ? x * scale_log2 : -INFINITY;
      mx[e >> 1] = fmaxf(mx[e >> 1], x);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
  }
}
// x summed over the four lanes that share a row (in this order: lane ^ 1, then lane ^ 2).
__device__ __forceinline__ float QuadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
// Byte offset of P's bf16 pair (tok, tok + 1) of head row hr in its swizzled [64 x 64] block.
__device__ __forceinline__ uint32_t PPairAt(int hr, int tok) {
  return static_cast<uint32_t>(hr * 128 + (((tok >> 3) ^ (hr & 7)) << 4) + (tok & 7) * 2);
}

// One tile of the online softmax, both warpgroups (the file comment's three steps): S = Q K^T
// over the stage at `kv` with q at `q_smem`, the softmax (maxima exchanged through `red`, P
// rounded to bf16 into `pbase` / `p_smem`, the same block), O = O * corr + P V. tile_tokens: the
// tile's tokens inside the row (1..64). after_scores() runs right after the first named barrier,
// when both warpgroups' products with q are done (q's shared memory may be refilled from then
// on). Ends with both warpgroups' wgmma complete; the caller's barrier frees the stage and P.
template <int W, typename AfterScores>
__device__ __forceinline__ void WgTile(uint32_t q_smem, uint32_t kv, uint32_t p_smem, unsigned char* pbase,
                                       float* red, int tile_tokens, float scale_log2, float (&o)[128],
                                       float (&m_run)[2], float (&l_run)[2], AfterScores after_scores) {
  constexpr int kSteps = W / 16;  // S: k16 steps
  const int tid = threadIdx.x, wg = tid >> 7, v = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, q4 = lane & 3;
  const int row0 = 16 * v + g;  // this thread's heads in S, P and O: row0 and row0 + 8
  // S [64 heads x 32 tokens] of this warpgroup's half of the tile.
  float sacc[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) sacc[i] = 0.0f;
  // Descriptors built once; step k adds its byte offset / 16 to the address field (shared
  // addresses stay below 2^18, so the 14-bit field never carries into the next).
  const uint64_t qd = wgmma::Desc(q_smem, 16, 1024), kd = wgmma::Desc(kv + wg * 32 * 128, 16, 1024);
  wgmma::Fence();
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
    const uint32_t step = ((k >> 2) * kBlock + (k & 3) * 32) >> 4;
    wgmma::WgmmaM64N32(sacc, qd + step, kd + step, k > 0 ? 1 : 0);
  }
  wgmma::Commit();
  wgmma::Wait<0>();
#pragma unroll
  for (int i = 0; i < 16; ++i) wgmma::Pin(sacc[i]);

  // Softmax over this warpgroup's tokens; the maxima of both warpgroups combined.
  float mx[2];
  ScaleMaskRowMax<4>(sacc, tile_tokens - 32 * wg, scale_log2, mx);  // this half's tokens inside the row
  if (q4 == 0) {
    red[wg * 64 + row0] = mx[0];
    red[wg * 64 + row0 + 8] = mx[1];
  }
  NamedSync(1);  // both halves' maxima (and both products with q done)
  after_scores();
  float corr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int hr = row0 + 8 * h;
    const float mn = fmaxf(m_run[h], fmaxf(red[hr], red[64 + hr]));
    corr[h] = exp2f(m_run[h] - mn);
    m_run[h] = mn;
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float p0 = exp2f(sacc[4 * j + 2 * h] - m_run[h]), p1 = exp2f(sacc[4 * j + 2 * h + 1] - m_run[h]);
      sum[h] += p0 + p1;
      const int hr = row0 + 8 * h, tok = 32 * wg + 8 * j + 2 * q4;
      *reinterpret_cast<uint32_t*>(pbase + PPairAt(hr, tok)) = PackBf16W(p0, p1);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sum[h] = QuadSum(sum[h]);
    l_run[h] = l_run[h] * corr[h] + sum[h];
  }
  wgmma::ProxyFence();
  NamedSync(2);  // P complete

  // O = O * corr + P V over latent columns [256 wg, +256).
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    o[4 * j] *= corr[0];
    o[4 * j + 1] *= corr[0];
    o[4 * j + 2] *= corr[1];
    o[4 * j + 3] *= corr[1];
  }
  const uint64_t pd = wgmma::Desc(p_smem, 16, 1024), vd = wgmma::Desc(kv + 4 * wg * kBlock, kBlock, 1024);
  wgmma::Fence();
#pragma unroll
  for (int k = 0; k < kTileW / 16; ++k) {
    wgmma::WgmmaM64N256T(o, pd + ((k * 32) >> 4), vd + ((k * 16 * 128) >> 4), 1);
  }
  wgmma::Commit();
  wgmma::Wait<0>();
#pragma unroll
  for (int i = 0; i < 128; ++i) wgmma::Pin(o[i]);
}

}  // namespace
}  // namespace ferry::kernels::cuda
