// Sparse MLA decode on tensor cores: the fast path of MlaDecodeAttention (mla_decode_tc.h says
// how a row is split; ops.h has the contract).
//
// One CTA of 8 warps holds every head of its head group (HT = 32 or 64 rows of q, W = latent +
// rope columns) in shared memory and streams its tiles of 32 selected cached rows through a
// kStages-deep cp.async ring (3 or 4: two or three tiles in flight while one is computed), so
// each cached row is read from memory once for all heads. The small form (kSmall, for the 99 KiB
// of shared memory a block of sm_120 / sm_121, a GB10) keeps q in registers instead (each warp
// the A fragments of its head tile and k-slice, loaded once through the last stage), always in
// 32-head groups, with two stages; otherwise the same tile, split, merge and bits as HT = 32.
// The row addresses of a CTA's tiles are looked up once, up front (kTab), and each tile's arrival
// is an mbarrier, so no warp waits on a lookup or on another warp's copies. A tile, with two CTA barriers:
//   S = Q K^T   [HT x 32]: warp (head tile of MH, k-slice) with mma.sync m16n8k16 bf16, float32
//                accumulate, Q and K from swizzled shared memory by ldmatrix; every warp stores
//                its partial to shared memory;
//   softmax     warp w: heads [HT / 8 w, +HT / 8), the k-slices summed in order; running max /
//               sum per head (float32, exp2 with log2(e) folded into the scale); P rounded to
//               bf16 into shared memory;
//   O += P V    [HT x 512]: warp w owns latent columns [64 w, 64 w + 64) of every head (V is the
//               first 512 columns of the same tile, read by ldmatrix.trans).
// At the end CTA k of the cluster merges heads k, k + K, ...: every CTA pushes its O (rounded to
// bf16), max and sum (float32) of those heads into CTA k's shared memory, which folds them in
// rank order (log-sum-exp, float32) and writes the bf16 output.
//
// Bytes: every selected row once (W * 2 bytes), q once per CTA (from L2 after the first), the
// bf16 output once. Flops: HT * (W + 512) * 2 a selected row, on the tensor cores (mma.sync: at
// HT = 64 the math of a CTA's 256 rows, about 12 us on an H200, still does not overlap the rest;
// see bench/results/h200-mla-decode.md). The shared-memory layout and its address helpers are in
// mla_decode_tc_smem.cuh.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels/cuda/check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mla_decode_tc.h"
#include "kernels/cuda/mla_merge.cuh"
#include "kernels/cuda/mla_decode_tc_smem.cuh"
#include "kernels/cuda/options.h"

namespace ferry::kernels::cuda {
namespace {

using ptx::CpAsync16;
using ptx::CpAsyncMbarArrive;
using ptx::Ldsm4;
using ptx::Ldsm4T;
using ptx::MbarInit;
using ptx::MbarInitFence;
using ptx::MbarWait;
using ptx::Mma;

namespace cg = cooperative_groups;

// grid (rows * K, head groups), cluster (K, 1, 1), kThreads threads. See the file comment;
// kSmall: q in registers (Smem's small form).
template <int HT, int W, int K, int MH, bool kSmall = false>
__global__ void __launch_bounds__(kThreads, 1)
    MlaDecodeTcKernel(const __nv_bfloat16* __restrict__ q_abs, const __nv_bfloat16* __restrict__ q_pe, int heads,
                      PagedView cache, const int32_t* __restrict__ sel, const int32_t* __restrict__ sel_offsets,
                      float scale_log2, __nv_bfloat16* __restrict__ out) {
  using L = Smem<HT, W, MH, kSmall>;
  constexpr int kTabTiles = L::kTabTiles;
  constexpr int kRope = W - kLatent;
  constexpr int kA = HT / 16;       // PV: m-blocks of 16 heads
  constexpr int kMb = MH / 16;      // S: m-blocks a warp
  constexpr int kHs = L::kSTiles;   // S: head tiles
  constexpr int kStages = L::kStages;
  constexpr int kHk = HT / K;  // heads this CTA merges
  static_assert(kHk >= 1 && kHk * 64 <= 2 * kThreads, "merge work per CTA");
  // Softmax: warp w owns heads [kHpw w, +kHpw), kLph lanes a head, kTpl tokens a lane.
  constexpr int kHpw = HT / kWarps;
  constexpr int kLph = 32 / kHpw;
  constexpr int kTpl = kTile / kLph;
  static_assert(kHpw * kLph == 32 && kTpl % 4 == 0, "softmax lane map");

  extern __shared__ __align__(128) unsigned char smem[];
  float* part = reinterpret_cast<float*>(smem + L::kPart);
  float* corr = reinterpret_cast<float*>(smem + L::kCorr);
  int* flags = reinterpret_cast<int*>(smem + L::kFlags);
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full0 = sbase + L::kFull;

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
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      MbarInit(full0 + 8 * s, kThreads);
    }
    MbarInitFence();
  }

  // q rows [q_abs | q_pe] of this head group (cp.async from every thread; tile 0's mbarrier
  // covers them, as it covers each thread's earlier copies); heads past `heads` are zero. The
  // small form stages them in the last K/V stage (below, after tile 0's copy went out).
  const uint32_t q_at = kSmall ? sbase + L::kKv + (kStages - 1) * L::kStage : sbase + L::kQ;
  auto load_q = [&] {
    for (int i = tid; i < HT * L::kChunks; i += kThreads) {
      const int h = i / L::kChunks, c = i % L::kChunks;
      const __nv_bfloat16* src = q_abs;
      int bytes = 0;
      if (h < hcount) {
        const int64_t rh = r * heads + h0 + h;
        src = c < kLatent / 8 ? q_abs + rh * kLatent + c * 8 : q_pe + rh * kRope + (c - kLatent / 8) * 8;
        bytes = 16;
      }
      CpAsync16(q_at + Swz(h, c, L::kRowBytes), src, bytes);
    }
  };
  if (!kSmall && my_tiles > 0) load_q();
  __syncthreads();  // the flags and mbarriers are initialised before any tile load

  // Loads. The row addresses of kTabTiles tiles at a time are looked up together into kTab
  // (thread tid: rows tid, tid + 256, ... of those tiles; its token id, then its page id), so a
  // tile's copy never waits on a lookup: the lookups of the first kTabTiles tiles (all of them at
  // the model shapes) cost two memory latencies once, in the prologue. An entry is the row's
  // offset in the arena, kPastEnd for a token past the row's end (zero-filled, not an error) or
  // kBad for an unaddressable one (zero-filled, and the row becomes NaN). A selected id below 0
  // is read as -1 (unaddressable).
  // Thread tid copies 16-byte chunks tid % 8, +8, ... of token row tid / 8 of each tile (eight
  // threads cover 128 contiguous bytes) with cp.async, then arrives on the stage's "full"
  // mbarrier once its copies have landed (cp.async.mbarrier.arrive), so no warp waits for another
  // warp's copies. The copy of tile it + kStages - 1 goes out once every warp is done with tile
  // it - 1 (after the first barrier of tile it), into that tile's stage. `it` counts this CTA's
  // tiles: its tile it is the row's tile rank + it * K.
  constexpr int64_t kPastEnd = -1, kBad = -2;
  const int row = tid >> 3;
  int64_t* tab = reinterpret_cast<int64_t*>(smem + L::kTab);
  auto load_table = [&](int it0) {  // tiles it0 .. it0 + kTabTiles - 1; REQUIRES a barrier after
    constexpr int kPer = kTabTiles * kTile / kThreads;
    int ids[kPer];
#pragma unroll
    for (int x = 0; x < kPer; ++x) {
      const int e = tid + kThreads * x;
      const int it = it0 + e / kTile;
      const int64_t j = (rank + static_cast<int64_t>(it) * K) * kTile + e % kTile;
      ids[x] = it < my_tiles && j < n ? max(sel[begin + j], -1) : INT_MIN;
    }
    int pages[kPer];
#pragma unroll
    for (int x = 0; x < kPer; ++x) {
      const int64_t index = ids[x] >> cache.page_shift;
      pages[x] = ids[x] < 0 || index >= cache.table_stride ? -1 : cache.page_table[r * cache.table_stride + index];
    }
#pragma unroll
    for (int x = 0; x < kPer; ++x) {
      int64_t off = kPastEnd;
      if (ids[x] != INT_MIN) {
        off = ids[x] < 0 || pages[x] < 0 || pages[x] >= cache.n_pages
                  ? kBad
                  : pages[x] * cache.page_stride + (ids[x] & ((1 << cache.page_shift) - 1)) * cache.width;
        if (off == kBad) flags[0] = 1;  // unaddressable: the row becomes NaN
      }
      tab[tid + kThreads * x] = off;
    }
  };
  auto copy_tile = [&](int it) {
    const int s = it % kStages;
    const int64_t off = tab[(it % kTabTiles) * kTile + row];
    const __nv_bfloat16* src = off >= 0 ? cache.arena + off : nullptr;
    const uint32_t dst = sbase + L::kKv + s * L::kStage;
#pragma unroll
    for (int i = 0; i < L::kChunks / 8; ++i) {
      const int c = (tid & 7) + 8 * i;
      CpAsync16(dst + Swz(row, c, L::kRowBytes), src != nullptr ? src + c * 8 : q_abs, src != nullptr ? 16 : 0);
    }
    CpAsyncMbarArrive(full0 + 8 * s);
  };
  const int hs = warp % kHs, ks = warp / kHs;
  // The small form's q: this warp's A fragments of S (heads [MH hs, +MH), k-slice ks), loaded
  // once from the staged rows.
  uint32_t qa[kSmall ? L::kStepsPerWarp : 1][kMb][4];
  if (my_tiles > 0) {
    load_table(0);
    __syncthreads();  // kTab holds tiles 0 .. kTabTiles - 1
    if constexpr (kSmall) {
      copy_tile(0);
      load_q();
      ptx::CpAsyncCommit();
      ptx::CpAsyncWait<0>();
      __syncthreads();  // every thread's q rows landed
#pragma unroll
      for (int kq = 0; kq < L::kStepsPerWarp; ++kq) {
#pragma unroll
        for (int mb = 0; mb < kMb; ++mb) {
          Ldsm4(qa[kq][mb], q_at + Swz(MH * hs + 16 * mb + (lane & 15), 2 * (ks * L::kStepsPerWarp + kq) + (lane >> 4),
                                      L::kRowBytes));
        }
      }
      __syncthreads();  // the staging stage is free for its tile
#pragma unroll
      for (int s = 1; s < kStages; ++s) {
        if (s < my_tiles) copy_tile(s);
      }
    } else {
#pragma unroll
      for (int s = 0; s < kStages; ++s) {
        if (s < my_tiles) copy_tile(s);
      }
    }
  }

  float o[kA][8][4];
#pragma unroll
  for (int i = 0; i < kA; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][j][e] = 0.0f;

  // Running max and sum (exp2 domain) of head kHpw warp + lane / kLph (every lane of the head
  // holds them).
  float m_run = -INFINITY, l_run = 0.0f;
  for (int it = 0; it < my_tiles; ++it) {
    const int t = rank + it * K;
    const uint32_t kv = sbase + L::kKv + (it % kStages) * L::kStage;
    MbarWait(full0 + 8 * (it % kStages), (it / kStages) & 1);  // tile it landed

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
          if constexpr (kSmall) {
#pragma unroll
            for (int e = 0; e < 4; ++e) a[mb][e] = qa[kq][mb][e];
          } else {
            Ldsm4(a[mb], sbase + L::kQ + Swz(MH * hs + 16 * mb + (lane & 15), 2 * k + (lane >> 4), L::kRowBytes));
          }
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
    {
#pragma unroll
      for (int mb = 0; mb < kMb; ++mb) {
        float* lo = part + (ks * HT + MH * hs + 16 * mb + g) * kSStride + 2 * q4;
        float* hi = lo + 8 * kSStride;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          *reinterpret_cast<float2*>(lo + 8 * j) = make_float2(s[mb][j][0], s[mb][j][1]);
          *reinterpret_cast<float2*>(hi + 8 * j) = make_float2(s[mb][j][2], s[mb][j][3]);
        }
      }
    }
    __syncthreads();  // the S partials are in kPart; every warp is done with tile it - 1

    if (it >= 1 && it + kStages - 1 < my_tiles) {  // refill the stage of tile it - 1
      const int nt = it + kStages - 1;
      if (nt % kTabTiles == 0) {  // every copy of the tiles before nt went out: kTab is free
        load_table(nt);
        __syncthreads();
      }
      copy_tile(nt);
    }

    {
      // Softmax of head hl: sum the k-slices in order, scale into the exp2 domain, mask tokens
      // past the row's end; online update of the running max / sum; P rounded to bf16.
      const int hl = kHpw * warp + lane / kLph, qq = lane % kLph;
      float v[kTpl];
#pragma unroll
      for (int x = 0; x < L::kKSplit; ++x) {
        const float* src = part + (x * HT + hl) * kSStride + qq * kTpl;
#pragma unroll
        for (int e4 = 0; e4 < kTpl / 4; ++e4) {
          const float4 f = *reinterpret_cast<const float4*>(src + 4 * e4);
          if (x == 0) {
            v[4 * e4] = f.x;
            v[4 * e4 + 1] = f.y;
            v[4 * e4 + 2] = f.z;
            v[4 * e4 + 3] = f.w;
          } else {
            v[4 * e4] += f.x;
            v[4 * e4 + 1] += f.y;
            v[4 * e4 + 2] += f.z;
            v[4 * e4 + 3] += f.w;
          }
        }
      }
      const int valid = min(kTile, n - t * kTile);
      float mx = -INFINITY;
#pragma unroll
      for (int e = 0; e < kTpl; ++e) {
        v[e] = qq * kTpl + e < valid ? v[e] * scale_log2 : -INFINITY;
        mx = fmaxf(mx, v[e]);
      }
#pragma unroll
      for (int off = 1; off < kLph; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float mn = fmaxf(m_run, mx);
      float sum = 0.0f;
      uint32_t pk[kTpl / 2];
#pragma unroll
      for (int e = 0; e < kTpl; e += 2) {
        const float p0 = exp2f(v[e] - mn), p1 = exp2f(v[e + 1] - mn);
        sum += p0 + p1;
        pk[e / 2] = PackBf16(p0, p1);
      }
      // kTpl bf16 = kTpl * 2 bytes at byte qq * kTpl * 2 of the P row.
      const int byte = qq * kTpl * 2;
      unsigned char* prow = smem + L::kP + PAddr(hl, byte >> 4) + (byte & 15);
      if constexpr (kTpl == 8) {
        *reinterpret_cast<uint4*>(prow) = make_uint4(pk[0], pk[1], pk[2], pk[3]);
      } else {
        *reinterpret_cast<uint2*>(prow) = make_uint2(pk[0], pk[1]);
      }
#pragma unroll
      for (int off = 1; off < kLph; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      const float c = exp2f(m_run - mn);
      l_run = l_run * c + sum;
      m_run = mn;
      if (qq == 0) corr[hl] = c;
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
      for (int i = 0; i < kA; ++i) Ldsm4(a[i], sbase + L::kP + PAddr(16 * i + (lane & 15), 2 * kk + (lane >> 4)));
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

  // Merge: CTA k of the cluster owns heads k, k + K, k + 2K, ... (kHk of them; striding the
  // heads spreads every warp's pushes over all K peers). Every CTA pushes its partial of those
  // heads (O unnormalised in the exp2 domain, rounded to bf16; its max and sum in float32) into
  // the owner's shared memory with remote stores that need no round trip, laid out
  // [source rank][slot][column]; after the cluster barrier each owner folds the K partials in
  // rank order from its own shared memory. The receive buffer reuses q and the K/V stages, so
  // nobody pushes before every CTA of the cluster is done with its tiles (every copy issued was
  // waited for by its tile).
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
  if (lane % kLph == 0) {
    const int h = kHpw * warp + lane / kLph;
    const int slot = rank * kHk + h / K;
    cluster.map_shared_rank(recv_m, h % K)[slot] = m_run;
    cluster.map_shared_rank(recv_l, h % K)[slot] = l_run;
  }
  if (tid < K && flags[0] != 0) *cluster.map_shared_rank(flags + 1, tid) = 1;
  cluster.sync();

  float* wgt = reinterpret_cast<float*>(smem + L::kWgt);  // [kHk][K]: the partials' weights exp2(m_c - max)
  float* inv = reinterpret_cast<float*>(smem + L::kInv);  // [kHk]: 1 / the weighted sum
  MlaMergeFold<K, kHk, kOStride, 1, kThreads>(recv, recv_m, recv_l, wgt, inv, flags[1] != 0, n, rank, hcount,
                                              out + (r * heads + h0) * kLatent);
}

// Heads of a warp's S tile: HT = 64: 32 (2 head tiles x 4 k-slices; 256 bytes of ldmatrix an mma
// instead of 384, measured 2-3% faster than 16 x 2); HT = 32: 16 (2 x 4).
template <int HT>
constexpr int kMhFor = HT == 64 ? 32 : 16;

// Whether the path can run (HT, W) on `device` (kSmall: the small form, HT = 32): compute
// capability >= 9.0, the opt-in shared memory, and at least one co-resident cluster of kCluster
// CTAs.
template <int HT, int W, bool kSmall = false>
bool Available(int device) {
  constexpr int bytes = Smem<HT, W, kMhFor<HT>, kSmall>::kBytes;
  int optin = 0, major = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (major < 9 || optin < bytes) return false;
  auto kernel = MlaDecodeTcKernel<HT, W, kCluster, kMhFor<HT>, kSmall>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = MlaClusterConfig(dim3(kCluster, 1, 1), kThreads, bytes, nullptr, attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return clusters > 0;
}

int HeadTile(int64_t heads) { return heads <= 32 ? 32 : 64; }

// KernelOptions::mla_tc_small: the small form for every head count wherever it can run, and no
// wgmma form (to check and time it on a device that has the shared memory for the others).
bool ForceSmall() { return GetKernelOptions().mla_tc_small; }

// The form for (heads, W) on `device`, worked out once: 32 or 64 (the head tile of the standard
// form: HeadTile(heads)), 0 for the small form (32-head tiles, for devices without the shared
// memory of the standard one, or forced), -1 when neither runs.
int FormCached(int device, int64_t heads, int w) {
  static std::mutex mu;
  static auto* known = new std::map<std::tuple<int, int, int>, int>();
  const int ht = HeadTile(heads);
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(device, ht, w);
  if (auto it = known->find(key); it != known->end()) return it->second;
  bool standard = false;
  if (!ForceSmall()) {
    if (ht == 32 && w == 512) standard = Available<32, 512>(device);
    if (ht == 32 && w == 576) standard = Available<32, 576>(device);
    if (ht == 64 && w == 512) standard = Available<64, 512>(device);
    if (ht == 64 && w == 576) standard = Available<64, 576>(device);
  }
  int form = standard ? ht : -1;
  if (!standard) {
    const bool small = w == 512 ? Available<32, 512, true>(device) : Available<32, 576, true>(device);
    if (small) form = 0;
  }
  (*known)[key] = form;
  return form;
}

template <int HT, int W, bool kSmall = false>
absl::Status Launch(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads, const PagedView& cache,
                    const int32_t* sel, const int32_t* sel_offsets, float scale, uint16_t* out, void* stream) {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = MlaClusterConfig(
      dim3(static_cast<unsigned>(rows * kCluster), static_cast<unsigned>((heads + HT - 1) / HT), 1), kThreads,
      Smem<HT, W, kMhFor<HT>, kSmall>::kBytes, stream, attr);
  const float scale_log2 = scale * 1.4426950408889634f;
  FERRY_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(
      &cfg, MlaDecodeTcKernel<HT, W, kCluster, kMhFor<HT>, kSmall>, reinterpret_cast<const __nv_bfloat16*>(q_abs),
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
  const int form = FormCached(device, heads, static_cast<int>(latent + rope));
  // The small form's grid y counts 32-head groups.
  return form > 0 || (form == 0 && heads <= int64_t{65535} * 32);
}

// MlaDecodeTc's choice of the wgmma form (more than 32 heads, where it runs and is not overridden).
static bool TakesWgmma(int64_t heads, int64_t width) {
  return HeadTile(heads) == 64 && !ForceSmall() && MlaWgAvailable(width);
}

std::string MlaDecodePathName(int64_t heads, int64_t latent, int64_t rope) {
  alignas(16) static const uint16_t aligned[8] = {};
  if (heads < 1 || !MlaTcApplies(static_cast<const void*>(aligned), aligned, 1, heads, latent, rope)) {
    return "CUDA cores, a block a head";
  }
  if (TakesWgmma(heads, latent + rope)) return "wgmma, 64-head groups";
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) cudaGetLastError();
  const int form = FormCached(device, heads, static_cast<int>(latent + rope));
  return form == 0 ? "tensor cores, small form" : "tensor cores, " + std::to_string(form) + "-head tiles";
}

absl::Status MlaDecodeTc(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads, int64_t rope,
                         const PagedView& cache, const int32_t* sel, const int32_t* sel_offsets, float scale,
                         uint16_t* out, void* workspace, int64_t workspace_bytes, void* stream) {
  // More than 32 heads: the wgmma form (64-row head groups). Up to 32, the mma.sync kernel's
  // 32-head variant measured faster than padding q to 64 rows (97.8 vs 109.0 us at batch 64,
  // bench/results/h200-mla-decode.md).
  if (TakesWgmma(heads, kLatent + rope)) {
    return MlaDecodeWg(q_abs, q_pe, rows, heads, rope, cache, sel, sel_offsets, scale, out, workspace,
                       workspace_bytes, stream);
  }
  int device = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  if (FormCached(device, heads, static_cast<int>(kLatent + rope)) == 0) {  // the small form: 32-head groups
    if (rope == 0) return Launch<32, 512, true>(q_abs, q_pe, rows, heads, cache, sel, sel_offsets, scale, out, stream);
    return Launch<32, 576, true>(q_abs, q_pe, rows, heads, cache, sel, sel_offsets, scale, out, stream);
  }
  const bool wide = HeadTile(heads) == 64;
  if (!wide && rope == 0) return Launch<32, 512>(q_abs, q_pe, rows, heads, cache, sel, sel_offsets, scale, out, stream);
  if (!wide) return Launch<32, 576>(q_abs, q_pe, rows, heads, cache, sel, sel_offsets, scale, out, stream);
  if (rope == 0) return Launch<64, 512>(q_abs, q_pe, rows, heads, cache, sel, sel_offsets, scale, out, stream);
  return Launch<64, 576>(q_abs, q_pe, rows, heads, cache, sel, sel_offsets, scale, out, stream);
}

}  // namespace ferry::kernels::cuda
