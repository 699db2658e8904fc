// Sparse MLA decode on the warpgroup tensor cores of sm_90a (wgmma): the H100/H200 form of
// MlaDecodeTc (mla_decode_tc.h). Same split, same contract and rounding points as the mma.sync
// kernel of mla_decode_tc.cu; another summation order inside the products.
//
// A row's selection is cut into tiles of kTileW = 64 tokens; the kMlaTcCluster CTAs of a cluster
// take tiles rank, rank + K, ... (online softmax over their tiles) and merge their K partials in
// rank order through distributed shared memory, exactly as mla_decode_tc.cu does. A CTA is two
// warpgroups (256 threads) and holds 64 heads of q (heads past `heads` are zero rows); every
// thread copies its share of the next tiles with 16-byte cp.async into a two-stage ring, arriving
// on the stage's mbarrier. A tile, three named barriers:
//   S = Q K^T   warpgroup w: its 32 tokens [32 w, +32) x 64 heads, K = latent + rope, with
//               wgmma m64n32k16 (Q and K from 128-byte-swizzled shared memory);
//   softmax     each warpgroup its 32 tokens; the per-head maxima of both are exchanged through
//               shared memory, so both keep the same running max; each keeps its own running
//               sum (added at the merge); P rounded to bf16 into shared memory [64 heads x 64];
//   O += P V    warpgroup w: latent columns [256 w, +256) of every head, wgmma m64n256k16 with V
//               read transposed (MN-major) from the same tile (V = the latent part of K);
//   then the stage is refilled with the tile two ahead.
// Shared memory: q 72 KiB, two 72 KiB stages (rope 64; 64 KiB each at rope 0), P 8 KiB, a 4-tile
// table of row offsets, the maxima; the merge reuses q, stage 0 and P's space.
// The same items also run as a persistent wave with the merge through a workspace
// (mla_decode_wg_persistent.cu), whose warpgroups split a tile by role with WgTile's arithmetic.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/check.h"
#include "kernels/cuda/mla_decode_tc.h"
#include "kernels/cuda/mla_decode_wg_tile.cuh"
#include "kernels/cuda/mla_merge.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/options.h"

namespace ferry::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kTabTilesW = 4;               // tiles whose row offsets are looked up at once
constexpr int kOStrideW = kLatentW + 8;     // bf16 a head row of the merge buffer
static_assert(kTabTilesW * kTileW == kThreadsW, "one table entry a thread");

template <int W>
struct SmemW {
  static constexpr int kBlocks = W / 64;                 // column blocks of a row
  static constexpr int kStage = kBlocks * kBlock;        // a tile: 64 token rows
  static constexpr int kQ = 0;                           // [64 heads] x kBlocks blocks
  static constexpr int kKv = kQ + kBlocks * kBlock;      // 2 stages
  static constexpr int kP = kKv + 2 * kStage;            // [64 heads x 64 tokens] bf16, one block
  static constexpr int kTab = kP + kBlock;               // [kTabTilesW * 64] int64 row offsets
  static constexpr int kRed = kTab + kTabTilesW * kTileW * 8;  // [2][64] float: per-warpgroup maxima
  static constexpr int kFlags = kRed + 2 * 64 * 4;       // [0] bad selection, [1] bad in the cluster
  static constexpr int kFull = kFlags + 16;              // [2] mbarriers
  static constexpr int kBytes = kFull + 16;
  // The merge, after the tiles: bf16 partials [K][kHk][kOStrideW] over q and stage 0; its
  // scalars in P's block.
  static constexpr int kRecvM = kP;                      // [K][kHk]
  static constexpr int kRecvL = kRecvM + kK * kHk * 4;   // [K][2][kHk]
  static constexpr int kWgt = kRecvL + 2 * kK * kHk * 4; // [kHk][K]
  static constexpr int kInv = kWgt + kK * kHk * 4;       // [kHk]
  static_assert(kK * kHk * kOStrideW * 2 <= kP, "merge buffer fits in q and the stages");
  static_assert(kInv + kHk * 4 <= kP + kBlock, "merge scalars fit in P's block");
  static_assert(kKv % 1024 == 0 && kStage % 1024 == 0 && kP % 1024 == 0, "swizzle atoms 1024-byte aligned");
  static_assert(kBytes <= kMlaTcSmemBytes, "shared memory of a CTA");
};

// grid (rows * K, head groups of 64), cluster (K, 1, 1), 256 threads. See the file comment.
template <int W>
__global__ void __launch_bounds__(kThreadsW, 1)
    MlaDecodeWgKernel(const __nv_bfloat16* __restrict__ q_abs, const __nv_bfloat16* __restrict__ q_pe, int heads,
                      PagedView cache, const int32_t* __restrict__ sel, const int32_t* __restrict__ sel_offsets,
                      float scale_log2, __nv_bfloat16* __restrict__ out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = SmemW<W>;
  extern __shared__ __align__(1024) unsigned char smem[];
  float* red = reinterpret_cast<float*>(smem + L::kRed);
  int* flags = reinterpret_cast<int*>(smem + L::kFlags);
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full0 = sbase + L::kFull;

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t r = blockIdx.x / kK;
  const int h0 = blockIdx.y * kHeadsW;
  const int hcount = min(kHeadsW, heads - h0);
  const int tid = threadIdx.x, wg = tid >> 7, v = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, q4 = lane & 3;
  const int row0 = 16 * v + g;  // this thread's heads in S, P and O: row0 and row0 + 8

  const int64_t begin = sel_offsets[r], end = sel_offsets[r + 1];
  const int n = end < begin ? 0 : static_cast<int>(end - begin);
  const int n_tiles = (n + kTileW - 1) / kTileW;
  const int my_tiles = rank < n_tiles ? (n_tiles - rank + kK - 1) / kK : 0;
  if (tid == 0) {
    if ((sbase & 1023) != 0) __trap();  // the swizzle atoms need a 1024-byte aligned base
    flags[0] = end < begin ? 1 : 0;
    flags[1] = 0;
    ptx::MbarInit(full0, kThreadsW);
    ptx::MbarInit(full0 + 8, kThreadsW);
    ptx::MbarInitFence();
  }

  // q [64 heads x W] into the swizzled layout; rows past hcount are zero. Tile 0's mbarrier
  // covers these copies (each thread arrives after all its earlier cp.async).
  if (my_tiles > 0) CopyQW<W>(sbase + L::kQ, q_abs, q_pe, heads, r, h0, hcount);
  __syncthreads();  // flags and mbarriers initialised

  // Row offsets of tiles it0 .. it0 + 3 (thread tid: entry tid), as in mla_decode_tc.cu:
  // kPastEnd for a token past the row's end (zero-filled), kBad for an unaddressable one
  // (zero-filled, the row becomes NaN).
  constexpr int64_t kPastEnd = -1, kBad = -2;
  int64_t* tab = reinterpret_cast<int64_t*>(smem + L::kTab);
  auto load_table = [&](int it0) {  // REQUIRES a CTA barrier after
    const int it = it0 + tid / kTileW;
    const int64_t j = (rank + static_cast<int64_t>(it) * kK) * kTileW + tid % kTileW;
    const int id = it < my_tiles && j < n ? max(sel[begin + j], -1) : INT_MIN;
    const int64_t index = id >> cache.page_shift;
    const int page = id < 0 || index >= cache.table_stride ? -1 : cache.page_table[r * cache.table_stride + index];
    int64_t off = kPastEnd;
    if (id != INT_MIN) {
      off = id < 0 || page < 0 || page >= cache.n_pages
                ? kBad
                : page * cache.page_stride + (id & ((1 << cache.page_shift) - 1)) * cache.width;
      if (off == kBad) flags[0] = 1;
    }
    tab[tid] = off;
  };
  // Tile it (of this CTA) into stage it % 2 (CopyTileW), then an arrival on the stage's mbarrier.
  auto copy_tile = [&](int it) {
    const int s = it & 1;
    CopyTileW<W>(sbase + L::kKv + s * L::kStage, tab + (it % kTabTilesW) * kTileW, cache.arena, q_abs);
    ptx::CpAsyncMbarArrive(full0 + 8 * s);
  };
  if (my_tiles > 0) {
    load_table(0);
    __syncthreads();
    copy_tile(0);
    if (my_tiles > 1) copy_tile(1);
  }

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  // Running max (both warpgroups hold the same) and this warpgroup's running sum, exp2 domain,
  // of heads row0 and row0 + 8.
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int it = 0; it < my_tiles; ++it) {
    const int s = it & 1;
    const int t = rank + it * kK;
    const uint32_t kv = sbase + L::kKv + s * L::kStage;
    ptx::MbarWait(full0 + 8 * s, (it >> 1) & 1);
    wgmma::ProxyFence();

    WgTile<W>(sbase + L::kQ, kv, sbase + L::kP, smem + L::kP, red, min(kTileW, n - t * kTileW), scale_log2, o, m_run,
              l_run, [] {});
    NamedSync(3);  // both warpgroups are done with this stage and with P

    const int nt = it + 2;
    if (nt < my_tiles) {
      if (nt % kTabTilesW == 0) {  // every copy of the tiles before nt went out: the table is free
        load_table(nt);
        __syncthreads();
      }
      copy_tile(nt);
    }
  }

  // Merge, as in mla_decode_tc.cu: CTA k of the cluster owns heads k, k + K, ...; every CTA
  // pushes its bf16 partial of those heads, its max and (per warpgroup) its sums into the
  // owner's shared memory; the owner folds the K partials in rank order.
  __nv_bfloat16* recv = reinterpret_cast<__nv_bfloat16*>(smem + L::kQ);  // [K][kHk][kOStrideW]
  float* recv_m = reinterpret_cast<float*>(smem + L::kRecvM);             // [K][kHk]
  float* recv_l = reinterpret_cast<float*>(smem + L::kRecvL);             // [K][2][kHk]
  cluster.sync();
  const bool odd = (q4 & 1) != 0;  // after the pair swap: odd lanes hold row row0 + 8, even ones row0
  {
    const int h = row0 + (odd ? 8 : 0);
    __nv_bfloat16* dst = cluster.map_shared_rank(recv, h % kK) + (rank * kHk + h / kK) * kOStrideW;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float s0 = odd ? o[4 * j] : o[4 * j + 2], s1 = odd ? o[4 * j + 1] : o[4 * j + 3];
      const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
      uint2 val;
      if (odd) {
        val.x = PackBf16W(r0, r1);
        val.y = PackBf16W(o[4 * j + 2], o[4 * j + 3]);
      } else {
        val.x = PackBf16W(o[4 * j], o[4 * j + 1]);
        val.y = PackBf16W(r0, r1);
      }
      const int d = 256 * wg + 8 * j + 2 * (q4 & 2);
      *reinterpret_cast<uint2*>(dst + d) = val;
    }
  }
  if (q4 == 0) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int h = row0 + 8 * hh;
      const int slot = rank * kHk + h / kK;
      if (wg == 0) cluster.map_shared_rank(recv_m, h % kK)[slot] = m_run[hh];
      cluster.map_shared_rank(recv_l, h % kK)[(rank * 2 + wg) * kHk + h / kK] = l_run[hh];
    }
  }
  if (tid < kK && flags[0] != 0) *cluster.map_shared_rank(flags + 1, tid) = 1;
  cluster.sync();

  float* wgt = reinterpret_cast<float*>(smem + L::kWgt);
  float* inv = reinterpret_cast<float*>(smem + L::kInv);
  MlaMergeFold<kK, kHk, kOStrideW, 2, kThreadsW>(recv, recv_m, recv_l, wgt, inv, flags[1] != 0, n, rank, hcount,
                                                 out + (r * heads + h0) * kLatentW);
#else
  __trap();  // built without sm_90a: MlaWgAvailable is false, nothing launches this
#endif
}

template <int W>
bool AvailableW(int device) {
  constexpr int bytes = SmemW<W>::kBytes;
  int optin = 0, major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (major != 9 || minor != 0 || optin < bytes) return false;
  auto kernel = MlaDecodeWgKernel<W>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = MlaClusterConfig(dim3(kK, 1, 1), kThreadsW, bytes, nullptr, attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return clusters > 0;
}

}  // namespace

bool MlaWgAvailable(int64_t width) {
#if defined(FERRY_CUDA_SM90A)
  if (!GetKernelOptions().mla_wgmma) return false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  static std::mutex mu;
  static auto* known = new std::map<std::pair<int, int64_t>, bool>();
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(device, width);
  if (auto it = known->find(key); it != known->end()) return it->second;
  bool ok = false;
  if (width == 512) ok = AvailableW<512>(device);
  if (width == 576) ok = AvailableW<576>(device);
  if (ok) MlaWgPersistentSetUp(device, width);  // when it fails, MlaWgPersistentRows is 0
  (*known)[key] = ok;
  return ok;
#else
  (void)width;
  return false;
#endif
}

absl::Status MlaDecodeWg(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads, int64_t rope,
                         const PagedView& cache, const int32_t* sel, const int32_t* sel_offsets, float scale,
                         uint16_t* out, void* workspace, int64_t workspace_bytes, void* stream) {
  if (const int64_t pair_rows = MlaWgPersistentRows(heads, kLatentW + rope, workspace, workspace_bytes);
      pair_rows > 0) {
    return MlaDecodeWgPersistent(q_abs, q_pe, rows, heads, rope, cache, sel, sel_offsets, scale, out, workspace,
                                 pair_rows, stream);
  }
  const float scale_log2 = scale * 1.4426950408889634f;
  const auto* qa = reinterpret_cast<const __nv_bfloat16*>(q_abs);
  const auto* qp = reinterpret_cast<const __nv_bfloat16*>(q_pe);
  auto* o = reinterpret_cast<__nv_bfloat16*>(out);
  cudaLaunchAttribute attr[1];
  const int bytes = rope == 0 ? SmemW<512>::kBytes : SmemW<576>::kBytes;
  cudaLaunchConfig_t cfg = MlaClusterConfig(
      dim3(static_cast<unsigned>(rows * kK), static_cast<unsigned>((heads + kHeadsW - 1) / kHeadsW), 1), kThreadsW,
      bytes, stream, attr);
  if (rope == 0) {
    FERRY_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&cfg, MlaDecodeWgKernel<512>, qa, qp, static_cast<int>(heads),
                                                  cache, sel, sel_offsets, scale_log2, o));
  } else {
    FERRY_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&cfg, MlaDecodeWgKernel<576>, qa, qp, static_cast<int>(heads),
                                                  cache, sel, sel_offsets, scale_log2, o));
  }
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
