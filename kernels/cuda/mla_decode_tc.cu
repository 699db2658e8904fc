// Sparse MLA decode on tensor cores: the fast path of MlaDecodeAttention (mla_decode_tc.h says
// how a row is split; ops.h has the contract).
//
// One CTA of 8 warps holds every head of its head group (HT = 32 or 64 rows of q, W = latent +
// rope columns) in shared memory and streams its tiles of 64 selected cached rows through a
// two-stage cp.async ring, so each cached row is read from memory once for all heads. A tile:
//   S = Q K^T   [HT x 64]: warp (head block of 16, token group) with mma.sync m16n8k16 bf16,
//                float32 accumulate, Q and K from swizzled shared memory by ldmatrix;
//   softmax     running max / sum per head (float32, exp2 with log2(e) folded into the scale);
//               P rounded to bf16 into shared memory;
//   O += P V    [HT x 512]: warp w owns latent columns [64 w, 64 w + 64) of every head (V is the
//               first 512 columns of the same tile, read by ldmatrix.trans).
// At the end CTA k of the cluster merges heads k, k + K, ...: every CTA pushes its O (float32),
// max and sum of those heads into CTA k's shared memory, which folds them in rank order
// (log-sum-exp) and writes the bf16 output.
//
// Bytes: every selected row once (W * 2 bytes), q once per CTA (from L2 after the first), the
// bf16 output once. Flops: HT * (W + 512) * 2 a selected row, on the tensor cores. At HT = 64 the
// S product reads q and K from shared memory at 384 bytes an mma, so shared memory, not HBM,
// bounds a tile (about 3.6 us for 64 rows measured); see bench/results/h200-mla-decode.md.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <climits>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/check.h"
#include "kernels/cuda/mla_decode_tc.h"

namespace ferry::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kLatent = 512;
constexpr int kTile = kMlaTcTile;
constexpr int kCluster = kMlaTcCluster;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kDimsPerWarp = kLatent / kWarps;  // PV: latent columns a warp owns
constexpr int kOStride = kLatent + 8;           // floats a head row of the merge buffer (bank spread)
static_assert(kDimsPerWarp == 64, "PV loops assume 8 n-tiles of 8 columns a warp");

// Shared memory of one CTA, byte offsets. Rows of Q, K/V and P are stored with their 16-byte
// chunks XOR-swizzled by (row & 7), so ldmatrix's eight row addresses hit distinct banks.
template <int HT, int W>
struct Smem {
  static constexpr int kRowBytes = W * 2;
  static constexpr int kChunks = W / 8;
  static constexpr int kHeadBlocks = HT / 16;           // S: warps along heads
  static constexpr int kTokenGroups = kWarps / kHeadBlocks;  // S: warps along tokens
  static constexpr int kStage = kTile * kRowBytes;
  static constexpr int kQ = 0;
  static constexpr int kKv = kQ + HT * kRowBytes;     // 2 stages
  static constexpr int kP = kKv + 2 * kStage;         // [HT][kTile] bf16
  static constexpr int kRedMax = kP + HT * kTile * 2;  // [kTokenGroups][HT] float
  static constexpr int kRedSum = kRedMax + kTokenGroups * HT * 4;
  static constexpr int kMRun = kRedSum + kTokenGroups * HT * 4;  // [2][HT]: by tile parity
  static constexpr int kLRun = kMRun + 2 * HT * 4;
  static constexpr int kCorr = kLRun + HT * 4;
  static constexpr int kInv = kCorr + HT * 4;
  static constexpr int kFlags = kInv + HT * 4;  // [0] bad selection, [1] bad anywhere in the cluster
  static constexpr int kBytes = kFlags + 16;
  // After the tiles the merge receives K partials of HT / K heads each, [HT][kOStride] float32
  // in all, into the K/V stages and P; their maxima and sums into the reduction arrays.
  static_assert(HT * kOStride * 4 <= kRedMax - kKv, "merge buffer fits in the stages");
  static_assert(kTokenGroups >= 1, "merge maxima and sums fit in the reduction arrays");
  static_assert(kChunks % 8 == 0, "the swizzle stays inside a row");
};

__device__ __forceinline__ uint32_t Swz(int row, int chunk, int row_bytes) {
  return static_cast<uint32_t>(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void CpAsyncWaitAllButOne() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

__device__ __forceinline__ void Ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void Ldsm4T(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
// c += a b, m16n8k16, bf16 in, float32 accumulate.
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// grid (rows * K, head groups), cluster (K, 1, 1), kThreads threads. See the file comment.
template <int HT, int W, int K>
__global__ void __launch_bounds__(kThreads, 1)
    MlaDecodeTcKernel(const __nv_bfloat16* __restrict__ q_abs, const __nv_bfloat16* __restrict__ q_pe, int heads,
                      PagedView cache, const int32_t* __restrict__ sel, const int32_t* __restrict__ sel_offsets,
                      float scale_log2, __nv_bfloat16* __restrict__ out) {
  using L = Smem<HT, W>;
  constexpr int kRope = W - kLatent;
  constexpr int kA = L::kHeadBlocks;
  constexpr int kB = L::kTokenGroups;
  constexpr int kTw = kTile / kB;  // tokens a warp scores
  constexpr int kNt = kTw / 8;     // n-tiles of 8 tokens
  static_assert(kNt % 2 == 0, "K fragments are loaded two n-tiles at a time");
  constexpr int kHk = HT / K;      // heads this CTA merges
  static_assert(kHk >= 1 && kHk * 64 <= 2 * kThreads, "merge work per CTA");

  extern __shared__ __align__(128) unsigned char smem[];
  float* red_max = reinterpret_cast<float*>(smem + L::kRedMax);
  float* red_sum = reinterpret_cast<float*>(smem + L::kRedSum);
  float* m_run = reinterpret_cast<float*>(smem + L::kMRun);
  float* l_run = reinterpret_cast<float*>(smem + L::kLRun);
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
  const int my_tiles = rank < n_tiles ? (n_tiles - rank + K - 1) / K : 0;
  if (tid < HT) {
    m_run[tid] = -INFINITY;
    l_run[tid] = 0.0f;
  }
  if (tid == 0) {
    flags[0] = end < begin ? 1 : 0;
    flags[1] = 0;
  }
  __syncthreads();  // the flags are set before any tile load may raise them

  // Thread tid copies 16-byte chunks tid % 4, +4, ... of token row tid / 4 of each tile. The two
  // dependent lookups of a row (its token id, then its page) run one and two tiles ahead of the
  // copy, so no warp waits on them while the tiles stream.
  constexpr int kPastEnd = INT_MIN;  // a token past the row's end: zero-filled, not an error
  const int row = tid >> 2;
  auto fetch_id = [&](int t) {
    const int j = t * kTile + row;
    return j < n ? sel[begin + j] : kPastEnd;
  };
  auto resolve = [&](int id) { return id == kPastEnd ? nullptr : PagedRow(cache, r, id); };
  auto copy_tile = [&](int id, const __nv_bfloat16* src, int s) {
    if (id != kPastEnd && src == nullptr) flags[0] = 1;  // unaddressable: the row becomes NaN
    const uint32_t dst = sbase + L::kKv + s * L::kStage;
    for (int c = tid & 3; c < L::kChunks; c += 4) {
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

  // The loads run ahead of the math: tiles 0 and 1 start together, then tile it + 1 is in
  // flight into the other stage while tile it is computed, and the lookups (token id, then
  // page) of tiles it + 2 and it + 3 are pending.
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
    const int id0 = fetch_id(rank);
    copy_tile(id0, resolve(id0), 0);
    CpAsyncCommit();
    if (my_tiles > 1) {
      const int id1 = fetch_id(rank + K);
      copy_tile(id1, resolve(id1), 1);
    }
    CpAsyncCommit();
  }
  int id_copy = kPastEnd;                 // tile it + 1 (copied at iteration it >= 1): its token,
  const __nv_bfloat16* src_copy = nullptr;  // and its row
  int id_ahead = fetch_id(rank + 2 * K);  // tile it + 2's token

  const int hb = warp % kA, tg = warp / kA;  // S: head block, token group
  for (int it = 0; it < my_tiles; ++it) {
    const int t = rank + it * K;
    const int stage = it & 1;
    const uint32_t kv = sbase + L::kKv + stage * L::kStage;
    if (it == 0) {
      CpAsyncWaitAllButOne();  // q and tile 0; tile 1 may still be in flight
    } else {
      CpAsyncWaitAll();
    }
    __syncthreads();  // tile it landed; the previous tile's PV is done with the other stage
    if (it >= 1 && it + 1 < my_tiles) {
      copy_tile(id_copy, src_copy, stage ^ 1);
      CpAsyncCommit();
    }
    id_copy = id_ahead;
    src_copy = it + 2 < my_tiles ? resolve(id_ahead) : nullptr;
    id_ahead = fetch_id(t + 3 * K);

    // S = Q K^T for heads [16 hb, +16) x tokens [kTw tg, +kTw).
    float s[kNt][4];
#pragma unroll
    for (int j = 0; j < kNt; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
    const int qrow = 16 * hb + (lane & 15);
    const int krow = kTw * tg + (lane & 7) + ((lane >> 4) << 3);
#pragma unroll 4
    for (int k = 0; k < W / 16; ++k) {
      uint32_t a[4];
      Ldsm4(a, sbase + L::kQ + Swz(qrow, 2 * k + (lane >> 4), L::kRowBytes));
#pragma unroll
      for (int p = 0; p < kNt / 2; ++p) {
        uint32_t b[4];
        Ldsm4(b, kv + Swz(krow + 16 * p, 2 * k + ((lane >> 3) & 1), L::kRowBytes));
        Mma(s[2 * p], a, b[0], b[1]);
        Mma(s[2 * p + 1], a, b[2], b[3]);
      }
    }
    // Scale into the exp2 domain, mask tokens past the row's end, row maxima of this warp.
    const int valid = min(kTile, n - t * kTile);
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < kNt; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = kTw * tg + 8 * j + 2 * q4 + (e & 1);
        s[j][e] = tok < valid ? s[j][e] * scale_log2 : -INFINITY;
      }
      mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
      mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    const int h_lo = 16 * hb + g, h_hi = h_lo + 8;
    if (q4 == 0) {
      red_max[tg * HT + h_lo] = mx0;
      red_max[tg * HT + h_hi] = mx1;
    }
    __syncthreads();

    // Softmax of the tile: p = exp2(s - m_new), bf16 into P; row sums; the rescale factor.
    const float* m_old = m_run + stage * HT;
    float mn0 = m_old[h_lo], mn1 = m_old[h_hi];
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      mn0 = fmaxf(mn0, red_max[b * HT + h_lo]);
      mn1 = fmaxf(mn1, red_max[b * HT + h_hi]);
    }
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int j = 0; j < kNt; ++j) {
      const float p0 = exp2f(s[j][0] - mn0), p1 = exp2f(s[j][1] - mn0);
      const float p2 = exp2f(s[j][2] - mn1), p3 = exp2f(s[j][3] - mn1);
      sum0 += p0 + p1;
      sum1 += p2 + p3;
      const int chunk = (kTw * tg) / 8 + j;
      *reinterpret_cast<__nv_bfloat162*>(smem + L::kP + Swz(h_lo, chunk, kTile * 2) + 4 * q4) =
          __floats2bfloat162_rn(p0, p1);
      *reinterpret_cast<__nv_bfloat162*>(smem + L::kP + Swz(h_hi, chunk, kTile * 2) + 4 * q4) =
          __floats2bfloat162_rn(p2, p3);
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      sum0 += __shfl_xor_sync(0xffffffffu, sum0, off);
      sum1 += __shfl_xor_sync(0xffffffffu, sum1, off);
    }
    if (q4 == 0) {
      red_sum[tg * HT + h_lo] = sum0;
      red_sum[tg * HT + h_hi] = sum1;
      if (tg == 0) {
        float* m_new = m_run + (stage ^ 1) * HT;
        corr[h_lo] = exp2f(m_old[h_lo] - mn0);
        corr[h_hi] = exp2f(m_old[h_hi] - mn1);
        m_new[h_lo] = mn0;
        m_new[h_hi] = mn1;
      }
    }
    __syncthreads();

    // O = O * corr + P V over latent columns [64 warp, +64).
    if (tid < HT) {
      float add = 0.0f;
#pragma unroll
      for (int b = 0; b < kB; ++b) add += red_sum[b * HT + tid];
      l_run[tid] = l_run[tid] * corr[tid] + add;
    }
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
      for (int i = 0; i < kA; ++i) Ldsm4(a[i], sbase + L::kP + Swz(16 * i + (lane & 15), 2 * kk + (lane >> 4), kTile * 2));
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
  // heads (O unnormalised in the exp2 domain, its max and sum) into the owner's shared memory
  // with 16-byte remote stores that need no round trip, laid out [source rank][slot][column];
  // after the cluster barrier each owner folds the K partials in rank order from its own shared
  // memory. The receive buffer reuses the K/V stages and P, so nobody pushes before every CTA of
  // the cluster is done with its tiles.
  float* recv = reinterpret_cast<float*>(smem + L::kKv);  // [K][kHk][kOStride]
  float* recv_m = red_max;                                 // [K][kHk]
  float* recv_l = red_sum;                                 // [K][kHk]
  cluster.sync();
  const bool odd = (q4 & 1) != 0;  // after the pair swap: odd lanes hold row g + 8, even ones row g
#pragma unroll
  for (int i = 0; i < kA; ++i) {
    const int h = 16 * i + g + (odd ? 8 : 0);
    float* dst = cluster.map_shared_rank(recv, h % K) + (rank * kHk + h / K) * kOStride;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      // Lane pairs (q4, q4 ^ 1) swap halves so that each holds four adjacent columns of one row.
      const float s0 = odd ? o[i][j][0] : o[i][j][2], s1 = odd ? o[i][j][1] : o[i][j][3];
      const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
      const float4 v = odd ? make_float4(r0, r1, o[i][j][2], o[i][j][3]) : make_float4(o[i][j][0], o[i][j][1], r0, r1);
      const int d = warp * kDimsPerWarp + 8 * j + 2 * (q4 & 2);
      *reinterpret_cast<float4*>(dst + d) = v;
    }
  }
  if (tid < HT) {
    const int slot = rank * kHk + tid / K;
    cluster.map_shared_rank(recv_m, tid % K)[slot] = m_run[(my_tiles & 1) * HT + tid];
    cluster.map_shared_rank(recv_l, tid % K)[slot] = l_run[tid];
  }
  if (tid < K && flags[0] != 0) *cluster.map_shared_rank(flags + 1, tid) = 1;
  cluster.sync();

  float* wgt = corr;   // [kHk][K]: the partials' weights exp2(m_c - max)
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
      const float4* src = reinterpret_cast<const float4*>(recv + (c * kHk + hh) * kOStride + d);
      const float4 v0 = src[0], v1 = src[1];
      const float w = wgt[hh * K + c];
      acc[0] += w * v0.x;
      acc[1] += w * v0.y;
      acc[2] += w * v0.z;
      acc[3] += w * v0.w;
      acc[4] += w * v1.x;
      acc[5] += w * v1.y;
      acc[6] += w * v1.z;
      acc[7] += w * v1.w;
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

// Whether the path can run (HT, W) on `device`: compute capability >= 9.0, the opt-in shared
// memory, and at least one co-resident cluster of kCluster CTAs.
template <int HT, int W>
bool Available(int device) {
  constexpr int bytes = Smem<HT, W>::kBytes;
  int optin = 0, major = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (major < 9 || optin < bytes) return false;
  auto kernel = MlaDecodeTcKernel<HT, W, kCluster>;
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
  cfg.dynamicSmemBytes = Smem<HT, W>::kBytes;
  cfg.stream = static_cast<cudaStream_t>(stream);
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const float scale_log2 = scale * 1.4426950408889634f;
  FERRY_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(
      &cfg, MlaDecodeTcKernel<HT, W, kCluster>, reinterpret_cast<const __nv_bfloat16*>(q_abs),
      reinterpret_cast<const __nv_bfloat16*>(q_pe), static_cast<int>(heads), cache, sel, sel_offsets, scale_log2,
      reinterpret_cast<__nv_bfloat16*>(out)));
  return absl::OkStatus();
}

}  // namespace

bool MlaTcApplies(const void* q_abs, const void* q_pe, int64_t rows, int64_t heads, int64_t latent,
                  int64_t rope) {
  if (latent != kLatent || (rope != 0 && rope != 64) || rows > INT_MAX / kCluster) return false;
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
