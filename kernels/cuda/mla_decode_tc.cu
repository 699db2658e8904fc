// Sparse MLA decode on tensor cores: the fast path of MlaDecodeAttention (mla_decode_tc.h says
// how a row is split; ops.h has the contract).
//
// One CTA of 8 warps holds every head of its head group (HT = 32 or 64 rows of q, W = latent +
// rope columns) in shared memory and streams its tiles of 32 selected cached rows through a
// kStages-deep cp.async ring (4 at the model shapes: three tiles in flight while one is
// computed), so each cached row is read from memory once for all heads. A tile:
//   S = Q K^T   [HT x 32]: warp (head tile of 16, k-slice) with mma.sync m16n8k16 bf16, float32
//                accumulate, Q and K from swizzled shared memory by ldmatrix; the k-slices of a
//                head tile are summed in a fixed order through shared memory;
//   softmax     by the head tile's first warp: running max / sum per head (float32, exp2 with
//               log2(e) folded into the scale); P rounded to bf16 into shared memory;
//   O += P V    [HT x 512]: warp w owns latent columns [64 w, 64 w + 64) of every head (V is the
//               first 512 columns of the same tile, read by ldmatrix.trans).
// At the end CTA k of the cluster merges heads k, k + K, ...: every CTA pushes its O (rounded to
// bf16), max and sum (float32) of those heads into CTA k's shared memory, which folds them in
// rank order (log-sum-exp, float32) and writes the bf16 output.
//
// Bytes: every selected row once (W * 2 bytes), q once per CTA (from L2 after the first), the
// bf16 output once. Flops: HT * (W + 512) * 2 a selected row, on the tensor cores (mma.sync, so
// at HT = 64 the math of a CTA's 256 rows takes about as long as their loads; see
// bench/results/h200-mla-decode.md). The shared-memory layout and its address helpers are in
// mla_decode_tc_smem.cuh.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <climits>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mla_decode_tc.h"
#include "kernels/cuda/mla_decode_tc_smem.cuh"

namespace ferry::kernels::cuda {
namespace {

using ptx::CpAsync16;
using ptx::CpAsyncCommit;
using ptx::CpAsyncWait;
using ptx::Ldsm4;
using ptx::Ldsm4T;
using ptx::Mma;

namespace cg = cooperative_groups;

// grid (rows * K, head groups), cluster (K, 1, 1), kThreads threads. See the file comment.
template <int HT, int W, int K, int MH>
__global__ void __launch_bounds__(kThreads, 1)
    MlaDecodeTcKernel(const __nv_bfloat16* __restrict__ q_abs, const __nv_bfloat16* __restrict__ q_pe, int heads,
                      PagedView cache, const int32_t* __restrict__ sel, const int32_t* __restrict__ sel_offsets,
                      float scale_log2, __nv_bfloat16* __restrict__ out) {
  using L = Smem<HT, W, MH>;
  constexpr int kRope = W - kLatent;
  constexpr int kA = HT / 16;       // PV: m-blocks of 16 heads
  constexpr int kMb = MH / 16;      // S: m-blocks a warp
  constexpr int kHs = L::kSTiles;   // S: head tiles
  constexpr int kStages = L::kStages;
  constexpr int kHk = HT / K;  // heads this CTA merges
  static_assert(kHk >= 1 && kHk * 64 <= 2 * kThreads, "merge work per CTA");
  constexpr int kCopies = L::kChunks / 8;  // 16-byte copies a thread makes of a tile (8 threads a row)

  extern __shared__ __align__(128) unsigned char smem[];
  float* sred = reinterpret_cast<float*>(smem + L::kSred);
  float* corr = reinterpret_cast<float*>(smem + L::kCorr);
  int* flags = reinterpret_cast<int*>(smem + L::kFlags);
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t r = blockIdx.x / K;
  const int h0 = blockIdx.y * HT;
  const int hcount = min(HT, heads - h0);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q4 = lane & 3;

  const int64_t begin = sel_offsets[r], end = sel_offsets[r + 1];
  const int n = end < begin ? 0 : static_cast<int>(end - begin);
  const int n_tiles = (n + kTile - 1) / kTile;
  // This CTA's tiles: rank, rank + K, rank + 2K, ... of the row's n_tiles (contiguous spans a
  // CTA measured no faster).
  const int my_tiles = rank < n_tiles ? (n_tiles - rank + K - 1) / K : 0;
  if (tid == 0) {
    flags[0] = end < begin ? 1 : 0;
    flags[1] = 0;
  }
  __syncthreads();  // the flags are set before any tile load may raise them

  // Thread tid copies 16-byte chunks tid % 8, +8, ... of token row tid / 8 of each tile (eight
  // threads cover 128 contiguous bytes). The two dependent lookups of a row (its token id, then
  // its page id) run two and one tiles ahead of the copy, which itself runs kStages - 1 tiles
  // ahead of the math; a loaded id is first used an iteration after its load, so no warp waits
  // on a lookup while the tiles stream. `it` counts this CTA's tiles: its tile it is the row's
  // tile rank + it * K.
  // A token past the row's end is kPastEnd: zero-filled, not an error. A selected id below 0 is
  // read as -1 (as unaddressable, the row becomes NaN), so no selection value reads as kPastEnd.
  constexpr int kPastEnd = INT_MIN;
  const int row = tid >> 3;
  auto fetch_id = [&](int it) {
    const int64_t j = (rank + static_cast<int64_t>(it) * K) * kTile + row;
    return j < n ? max(sel[begin + j], -1) : kPastEnd;
  };
  // PagedRow in two steps: the page id (load_page, a tile ahead), then the row address and its
  // checks (copy_tile).
  auto load_page = [&](int id) {
    const int64_t index = id >> cache.page_shift;
    return id < 0 || index >= cache.table_stride ? -1 : cache.page_table[r * cache.table_stride + index];
  };
  auto copy_tile = [&](int id, int page, int s) {
    const __nv_bfloat16* src =
        id < 0 || page < 0 || page >= cache.n_pages
            ? nullptr
            : cache.arena + page * cache.page_stride + (id & ((1 << cache.page_shift) - 1)) * cache.width;
    if (id != kPastEnd && src == nullptr) flags[0] = 1;  // unaddressable: the row becomes NaN
    const uint32_t dst = sbase + L::kKv + s * L::kStage;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const int c = (tid & 7) + 8 * i;
      CpAsync16(dst + Swz(row, c, L::kRowBytes), src != nullptr ? src + c * 8 : q_abs, src != nullptr ? 16 : 0);
    }
  };

  float o[kA][8][4];
#pragma unroll
  for (int i = 0; i < kA; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][j][e] = 0.0f;

  // Prologue: q and tiles 0 .. kStages - 2, one commit group a tile (q joins tile 0's).
  if (my_tiles > 0) {
    // q rows [q_abs | q_pe] of this head group; heads past `heads` are zero.
    for (int i = tid; i < HT * L::kChunks; i += kThreads) {
      const int h = i / L::kChunks, c = i % L::kChunks;
      const __nv_bfloat16* src = q_abs;
      int bytes = 0;
      if (h < hcount) {
        const int64_t rh = r * heads + h0 + h;
        src = c < kLatent / 8 ? q_abs + rh * kLatent + c * 8 : q_pe + rh * kRope + (c - kLatent / 8) * 8;
        bytes = 16;
      }
      CpAsync16(sbase + L::kQ + Swz(h, c, L::kRowBytes), src, bytes);
    }
  }
  {
    int ids[kStages - 1];
    int pages[kStages - 1];
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) ids[s] = fetch_id(s);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) pages[s] = load_page(ids[s]);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < my_tiles) copy_tile(ids[s], pages[s], s);
      CpAsyncCommit();
    }
  }
  int id_next = fetch_id(kStages - 1);  // tile it + kStages - 1 (copied at iteration it): its token,
  int page_next = load_page(id_next);    // its page,
  int id_ahead = fetch_id(kStages);     // and tile it + kStages's token

  // Running max and sum (exp2 domain) of heads MH hs + 16 mb + g and + 8: kept by the ks == 0
  // warps.
  float m_run[kMb][2], l_run[kMb][2];
#pragma unroll
  for (int mb = 0; mb < kMb; ++mb) {
    m_run[mb][0] = m_run[mb][1] = -INFINITY;
    l_run[mb][0] = l_run[mb][1] = 0.0f;
  }
  const int hs = warp % kHs, ks = warp / kHs;
  for (int it = 0; it < my_tiles; ++it) {
    const int t = rank + it * K;
    const uint32_t kv = sbase + L::kKv + (it % kStages) * L::kStage;
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // tile it landed; every warp is done with tile it - 1 (its stage, P, kSred)
    {
      const int nt = it + kStages - 1;
      if (nt < my_tiles) copy_tile(id_next, page_next, nt % kStages);
      CpAsyncCommit();
      id_next = id_ahead;
      page_next = load_page(id_ahead);
      id_ahead = fetch_id(nt + 2);
    }

    // S = Q K^T for heads [MH hs, +MH) x the tile's 32 tokens over k-slice ks.
    float s[kMb][4][4];
#pragma unroll
    for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mb][j][e] = 0.0f;
    {
      const int krow = (lane & 7) + ((lane >> 4) << 3);
      const int k0 = ks * L::kStepsPerWarp;
#pragma unroll
      for (int kq = 0; kq < L::kStepsPerWarp; ++kq) {
        const int k = k0 + kq;
        uint32_t a[kMb][4];
#pragma unroll
        for (int mb = 0; mb < kMb; ++mb) {
          Ldsm4(a[mb], sbase + L::kQ + Swz(MH * hs + 16 * mb + (lane & 15), 2 * k + (lane >> 4), L::kRowBytes));
        }
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          uint32_t b[4];
          Ldsm4(b, kv + Swz(krow + 16 * p, 2 * k + ((lane >> 3) & 1), L::kRowBytes));
#pragma unroll
          for (int mb = 0; mb < kMb; ++mb) {
            Mma(s[mb][2 * p], a[mb], b[0], b[1]);
            Mma(s[mb][2 * p + 1], a[mb], b[2], b[3]);
          }
        }
      }
    }
    if (ks > 0) {
      float* dst = sred + ((ks - 1) * kHs + hs) * (L::kSlice / 4) + lane;
#pragma unroll
      for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) dst[((mb * 4 + j) * 4 + e) * 32] = s[mb][j][e];
    }
    __syncthreads();  // the k-slice partials are in kSred

    if (ks == 0) {
      // Sum the k-slices in order, scale into the exp2 domain, mask tokens past the row's end;
      // the online softmax of the warp's heads (a head's 32 tokens lie in one lane quad).
#pragma unroll
      for (int x = 1; x < L::kKSplit; ++x) {
        const float* src = sred + ((x - 1) * kHs + hs) * (L::kSlice / 4) + lane;
#pragma unroll
        for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
          for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mb][j][e] += src[((mb * 4 + j) * 4 + e) * 32];
      }
      __syncwarp();  // P overwrites this head tile's slice-0 partials, read just above
      const int valid = min(kTile, n - t * kTile);
#pragma unroll
      for (int mb = 0; mb < kMb; ++mb) {
        const int h_lo = MH * hs + 16 * mb + g, h_hi = h_lo + 8;
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int tok = 8 * j + 2 * q4 + (e & 1);
            s[mb][j][e] = tok < valid ? s[mb][j][e] * scale_log2 : -INFINITY;
          }
          mx0 = fmaxf(mx0, fmaxf(s[mb][j][0], s[mb][j][1]));
          mx1 = fmaxf(mx1, fmaxf(s[mb][j][2], s[mb][j][3]));
        }
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
          mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
          mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
        }
        const float mn0 = fmaxf(m_run[mb][0], mx0), mn1 = fmaxf(m_run[mb][1], mx1);
        float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float p0 = exp2f(s[mb][j][0] - mn0), p1 = exp2f(s[mb][j][1] - mn0);
          const float p2 = exp2f(s[mb][j][2] - mn1), p3 = exp2f(s[mb][j][3] - mn1);
          sum0 += p0 + p1;
          sum1 += p2 + p3;
          *reinterpret_cast<__nv_bfloat162*>(smem + L::kSred + PAddr<MH>(h_lo, j) + 4 * q4) =
              __floats2bfloat162_rn(p0, p1);
          *reinterpret_cast<__nv_bfloat162*>(smem + L::kSred + PAddr<MH>(h_hi, j) + 4 * q4) =
              __floats2bfloat162_rn(p2, p3);
        }
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
          sum0 += __shfl_xor_sync(0xffffffffu, sum0, off);
          sum1 += __shfl_xor_sync(0xffffffffu, sum1, off);
        }
        const float c0 = exp2f(m_run[mb][0] - mn0), c1 = exp2f(m_run[mb][1] - mn1);
        l_run[mb][0] = l_run[mb][0] * c0 + sum0;
        l_run[mb][1] = l_run[mb][1] * c1 + sum1;
        m_run[mb][0] = mn0;
        m_run[mb][1] = mn1;
        if (q4 == 0) {
          corr[h_lo] = c0;
          corr[h_hi] = c1;
        }
      }
    }
    __syncthreads();  // P and the rescale factors are in shared memory

    // O = O * corr + P V over latent columns [64 warp, +64).
#pragma unroll
    for (int i = 0; i < kA; ++i) {
      const float c0 = corr[16 * i + g], c1 = corr[16 * i + g + 8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        o[i][j][0] *= c0;
        o[i][j][1] *= c0;
        o[i][j][2] *= c1;
        o[i][j][3] *= c1;
      }
    }
    const int vrow = (lane & 7) + (((lane >> 3) & 1) << 3);
    const int vchunk = warp * (kDimsPerWarp / 8) + (lane >> 4);
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      uint32_t a[kA][4];
#pragma unroll
      for (int i = 0; i < kA; ++i) Ldsm4(a[i], sbase + L::kSred + PAddr<MH>(16 * i + (lane & 15), 2 * kk + (lane >> 4)));
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) {
        uint32_t b[4];
        Ldsm4T(b, kv + Swz(16 * kk + vrow, vchunk + 2 * jp, L::kRowBytes));
#pragma unroll
        for (int i = 0; i < kA; ++i) {
          Mma(o[i][2 * jp], a[i], b[0], b[1]);
          Mma(o[i][2 * jp + 1], a[i], b[2], b[3]);
        }
      }
    }
  }
  CpAsyncWait<0>();  // nothing may still land in q or the stages, which the merge reuses

  // Merge: CTA k of the cluster owns heads k, k + K, k + 2K, ... (kHk of them; striding the
  // heads spreads every warp's pushes over all K peers). Every CTA pushes its partial of those
  // heads (O unnormalised in the exp2 domain, rounded to bf16; its max and sum in float32) into
  // the owner's shared memory with remote stores that need no round trip, laid out
  // [source rank][slot][column]; after the cluster barrier each owner folds the K partials in
  // rank order from its own shared memory. The receive buffer reuses q and the K/V stages, so
  // nobody pushes before every CTA of the cluster is done with its tiles.
  __nv_bfloat16* recv = reinterpret_cast<__nv_bfloat16*>(smem + L::kQ);  // [K][kHk][kOStride]
  float* recv_m = reinterpret_cast<float*>(smem + L::kRecvM);             // [K][kHk]
  float* recv_l = reinterpret_cast<float*>(smem + L::kRecvL);             // [K][kHk]
  cluster.sync();
  const bool odd = (q4 & 1) != 0;  // after the pair swap: odd lanes hold row g + 8, even ones row g
#pragma unroll
  for (int i = 0; i < kA; ++i) {
    const int h = 16 * i + g + (odd ? 8 : 0);
    __nv_bfloat16* dst = cluster.map_shared_rank(recv, h % K) + (rank * kHk + h / K) * kOStride;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      // Lane pairs (q4, q4 ^ 1) swap halves so that each holds four adjacent columns of one row.
      const float s0 = odd ? o[i][j][0] : o[i][j][2], s1 = odd ? o[i][j][1] : o[i][j][3];
      const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
      uint2 v;
      if (odd) {
        v.x = PackBf16(r0, r1);
        v.y = PackBf16(o[i][j][2], o[i][j][3]);
      } else {
        v.x = PackBf16(o[i][j][0], o[i][j][1]);
        v.y = PackBf16(r0, r1);
      }
      const int d = warp * kDimsPerWarp + 8 * j + 2 * (q4 & 2);
      *reinterpret_cast<uint2*>(dst + d) = v;
    }
  }
  if (ks == 0 && q4 == 0) {
#pragma unroll
    for (int mb = 0; mb < kMb; ++mb) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int h = MH * hs + 16 * mb + g + 8 * half;
        const int slot = rank * kHk + h / K;
        cluster.map_shared_rank(recv_m, h % K)[slot] = m_run[mb][half];
        cluster.map_shared_rank(recv_l, h % K)[slot] = l_run[mb][half];
      }
    }
  }
  if (tid < K && flags[0] != 0) *cluster.map_shared_rank(flags + 1, tid) = 1;
  cluster.sync();

  float* wgt = reinterpret_cast<float*>(smem + L::kWgt);  // [kHk][K]: the partials' weights exp2(m_c - max)
  float* inv = reinterpret_cast<float*>(smem + L::kInv);  // [kHk]: 1 / the weighted sum
  if (tid < kHk) {
    float m = -INFINITY;
#pragma unroll
    for (int c = 0; c < K; ++c) m = fmaxf(m, recv_m[c * kHk + tid]);
    float l = 0.0f;
#pragma unroll
    for (int c = 0; c < K; ++c) {
      const float w = exp2f(recv_m[c * kHk + tid] - m);
      wgt[tid * K + c] = w;
      l += w * recv_l[c * kHk + tid];
    }
    inv[tid] = 1.0f / l;
  }
  __syncthreads();
  const bool bad = flags[1] != 0;
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
      for (int e = 0; e < 8; ++e) {
        v[e] = __float2bfloat16_rn(bad ? __int_as_float(0x7fc00000) : (n == 0 ? 0.0f : acc[e] * inv[hh]));
      }
      *reinterpret_cast<uint4*>(out + (r * heads + h0 + h) * kLatent + d) = *reinterpret_cast<const uint4*>(v);
    }
  }
}

// Heads of a warp's S tile: 16 (HT = 64: 4 head tiles x 2 k-slices, 4 stages; HT = 32: 2 x 4).
// MH = 32 at HT = 64 (2 x 4, 3 stages) measured 1-6% slower.
template <int HT>
constexpr int kMhFor = 16;

// Whether the path can run (HT, W) on `device`: compute capability >= 9.0, the opt-in shared
// memory, and at least one co-resident cluster of kCluster CTAs.
template <int HT, int W>
bool Available(int device) {
  constexpr int bytes = Smem<HT, W, kMhFor<HT>>::kBytes;
  int optin = 0, major = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (major < 9 || optin < bytes) return false;
  auto kernel = MlaDecodeTcKernel<HT, W, kCluster, kMhFor<HT>>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kCluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(kCluster, 1, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = bytes;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return clusters > 0;
}

// Available() per (device, HT, W), worked out once.
bool AvailableCached(int device, int ht, int w) {
  static std::mutex mu;
  static auto* known = new std::map<std::tuple<int, int, int>, bool>();
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(device, ht, w);
  if (auto it = known->find(key); it != known->end()) return it->second;
  bool ok = false;
  if (ht == 32 && w == 512) ok = Available<32, 512>(device);
  if (ht == 32 && w == 576) ok = Available<32, 576>(device);
  if (ht == 64 && w == 512) ok = Available<64, 512>(device);
  if (ht == 64 && w == 576) ok = Available<64, 576>(device);
  (*known)[key] = ok;
  return ok;
}

int HeadTile(int64_t heads) { return heads <= 32 ? 32 : 64; }

template <int HT, int W>
absl::Status Launch(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads, const PagedView& cache,
                    const int32_t* sel, const int32_t* sel_offsets, float scale, uint16_t* out, void* stream) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kCluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(static_cast<unsigned>(rows * kCluster), static_cast<unsigned>((heads + HT - 1) / HT), 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = Smem<HT, W, kMhFor<HT>>::kBytes;
  cfg.stream = static_cast<cudaStream_t>(stream);
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const float scale_log2 = scale * 1.4426950408889634f;
  FERRY_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(
      &cfg, MlaDecodeTcKernel<HT, W, kCluster, kMhFor<HT>>, reinterpret_cast<const __nv_bfloat16*>(q_abs),
      reinterpret_cast<const __nv_bfloat16*>(q_pe), static_cast<int>(heads), cache, sel, sel_offsets, scale_log2,
      reinterpret_cast<__nv_bfloat16*>(out)));
  return absl::OkStatus();
}

}  // namespace

bool MlaTcApplies(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads, int64_t latent,
                  int64_t rope, const PagedCacheBf16& cache, const uint16_t* out) {
  // Every 16-byte access of the kernel: cp.async of q rows and cached rows, uint4 stores of out.
  if (cache.width != latent + rope || reinterpret_cast<uintptr_t>(out) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(cache.arena) % 16 != 0 || cache.page_stride % 8 != 0) {
    return false;
  }
  return MlaTcApplies(static_cast<const void*>(q_abs), static_cast<const void*>(q_pe), rows, heads, latent, rope);
}

bool MlaTcApplies(const void* q_abs, const void* q_pe, int64_t rows, int64_t heads, int64_t latent,
                  int64_t rope) {
  if (latent != kLatent || (rope != 0 && rope != 64) || rows > INT_MAX / kCluster ||
      heads > int64_t{65535} * 64) {  // grid x: rows * kCluster CTAs; grid y: head groups of up to 64
    return false;
  }
  if (reinterpret_cast<uintptr_t>(q_abs) % 16 != 0 || (rope > 0 && reinterpret_cast<uintptr_t>(q_pe) % 16 != 0)) {
    return false;
  }
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return AvailableCached(device, HeadTile(heads), static_cast<int>(latent + rope));
}

absl::Status MlaDecodeTc(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads, int64_t rope,
                         const PagedView& cache, const int32_t* sel, const int32_t* sel_offsets, float scale,
                         uint16_t* out, void* stream) {
  const bool wide = HeadTile(heads) == 64;
  if (!wide && rope == 0) return Launch<32, 512>(q_abs, q_pe, rows, heads, cache, sel, sel_offsets, scale, out, stream);
  if (!wide) return Launch<32, 576>(q_abs, q_pe, rows, heads, cache, sel, sel_offsets, scale, out, stream);
  if (rope == 0) return Launch<64, 512>(q_abs, q_pe, rows, heads, cache, sel, sel_offsets, scale, out, stream);
  return Launch<64, 576>(q_abs, q_pe, rows, heads, cache, sel, sel_offsets, scale, out, stream);
}

}  // namespace ferry::kernels::cuda
