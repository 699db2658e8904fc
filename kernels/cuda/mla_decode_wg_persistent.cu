// Sparse MLA decode on sm_90a, the persistent form (mla_decode_tc.h: MlaDecodeWg with a
// workspace): the same work items as the cluster form of mla_decode_wg.cu (row r, head group y,
// rank c: tiles c, c + K, ... of the row, online softmax over them), but a wave of at most one
// CTA an SM, each walking a contiguous range of items: a producer warpgroup looks up and copies
// the tiles' rows into two stages, running across item boundaries, while two consumer
// warpgroups compute them and store each item's bf16 partial to a workspace; a second kernel
// folds each row's partials in rank order (mla_decode_wg_fold.cu).
//
// The consumers split a tile by role, not by tokens as WgTile does: warpgroup 0 computes S over
// all 64 tokens (m64n64: q and K read once, at the tensor rate), the softmax and O's first 256
// columns with P from its registers, while warpgroup 1 computes O's last 256 columns from P in
// shared memory, its products overlapping warpgroup 0's next S. The arithmetic is WgTile's, value
// for value (the same S, maxima, bf16 P, sums of tokens [0, 32) and [32, 64) apart, rescale, then
// the products in the same k order), and the fold's is the cluster merge's, so the two forms give
// the same bits (the harness and the bench compare them).
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/mla_decode_tc.h"
#include "kernels/cuda/mla_decode_wg_tile.cuh"
#include "kernels/cuda/mla_decode_wg_workspace.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kMaxItemsP = 12;    // items a CTA (shared-memory table)
constexpr int kProducerThreads = 128;                      // warpgroup 2: lookups and copies
constexpr int kThreadsP = kThreadsW + kProducerThreads;    // a CTA: two consumer warpgroups, the producer
// setmaxnreg budgets (used by sm_90a code only): the launch gives every thread 168 (384 x 168 =
// 64512 of 65536); the producer's and warpgroup 1's decreases free 12288 + 1024, warpgroup 0's
// increase takes 8192. ptxas: no spills down to 208 for warpgroup 0 and 160 for warpgroup 1. Keep
// slack: an increase waits for registers, and a budget the pool cannot meet hangs the launch.
[[maybe_unused]] constexpr int kProducerRegs = 72, kScoreRegs = 232, kOutRegs = 160;
[[maybe_unused]] constexpr int kReady = 1, kFree = 2;  // named barriers between the consumers
// Named barrier `id` of the two consumer warpgroups: BarSync waits for it, BarArrive only arrives.
[[maybe_unused]] __device__ __forceinline__ void BarSync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreadsW) : "memory");
}
[[maybe_unused]] __device__ __forceinline__ void BarArrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kThreadsW) : "memory");
}

struct ItemP {
  int row;    // in the launch's rows
  int group;  // head group of 64
  int rank;   // c: tiles c, c + K, ... of the row
  int n;      // the row's selection length
  int begin;  // sel_offsets[row]
  int first;  // its first tile in the CTA's flat tile sequence
  int tiles;  // its tiles (0: c past the row's tiles)
  int bad;    // a selected token or page could not be addressed
};

template <int W>
struct SmemP {
  static constexpr int kBlocks = W / 64;
  static constexpr int kStage = kBlocks * kBlock;
  static constexpr int kQ = 0;
  static constexpr int kKv = kQ + kBlocks * kBlock;
  static constexpr int kP = kKv + 2 * kStage;
  static constexpr int kRed = kP + kBlock;                     // [64] float: a tile's correction
  static constexpr int kItems = kRed + 2 * 64 * 4;             // [kMaxItemsP] ItemP
  static constexpr int kTotal = kItems + kMaxItemsP * 32;      // int: tiles of the CTA
  static constexpr int kBars = kTotal + 8;                     // mbarriers: full[2], empty[2], q
  static constexpr int kBytes = kBars + 40;
  static_assert(sizeof(ItemP) == 32, "item table entry");
  static_assert(kKv % 1024 == 0 && kStage % 1024 == 0 && kP % 1024 == 0, "swizzle atoms 1024-byte aligned");
  static_assert(kBytes <= kMlaTcSmemBytes, "shared memory of a CTA");
};

// An item's partial, this thread's part of it: o (a warpgroup's accumulators) as bf16 at dst (its
// PartialAt(wg, 0, t) in the item's partial: each warp's stores one contiguous 512 bytes), kept
// in L2 for the fold; then o = 0 for the next item.
[[maybe_unused]] __device__ __forceinline__ void StoreItemO(float (&o)[128], __nv_bfloat16* dst) {
  const uint64_t keep = ptx::EvictLastPolicy();
#pragma unroll
  for (int jp = 0; jp < 16; ++jp) {
    uint4 val;
    val.x = PackBf16W(o[8 * jp], o[8 * jp + 1]);
    val.y = PackBf16W(o[8 * jp + 2], o[8 * jp + 3]);
    val.z = PackBf16W(o[8 * jp + 4], o[8 * jp + 5]);
    val.w = PackBf16W(o[8 * jp + 6], o[8 * jp + 7]);
    ptx::St16Hint(dst + PartialAt(0, jp, 0), val, keep);
  }
#pragma unroll
  for (int k = 0; k < 128; ++k) o[k] = 0.0f;
}

// grid: min(items, SMs) CTAs of kThreadsP threads, CTA b taking items [b * items / grid, (b + 1) *
// items / grid) of the launch's rows x groups x K (item i: rank i % K, group (i / K) % groups,
// row i / (K * groups)); row0 is the launch's first row of q, sel_offsets, the page table and
// out. Warpgroups 0 and 1 compute (the file comment's roles), warpgroup 2 looks up the rows of
// each tile and copies them into the stage the consumers released (full / empty mbarriers a
// stage). Writes item i's partial to ws_o [i][kItemOP] (bf16, unnormalised, in PartialAt's
// layout) and ws_ml [i][kMlP] (m, the sums of the two token halves, the bad flag), for items with
// tiles only. Launched as a programmatic dependent of the kernel before it (LaunchDependent): in a
// decode step its launch overlaps that kernel's end (H200, eight calls back to back as the layers
// of a step run them, roofline section 2f, GLM-5.2 128K: 21.4 -> 20.3 us a layer at batch 8, 70.6
// -> 69.1 at 64; one call after an L2 flush is unchanged).
template <int W>
__global__ void __launch_bounds__(kThreadsP, 1)
    MlaDecodeWgPersistentKernel(const __nv_bfloat16* __restrict__ q_abs, const __nv_bfloat16* __restrict__ q_pe,
                                int heads, PagedView cache, const int32_t* __restrict__ sel,
                                const int32_t* __restrict__ sel_offsets, int64_t row0, int items, int groups,
                                float scale_log2, __nv_bfloat16* __restrict__ ws_o, float* __restrict__ ws_ml) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = SmemP<W>;
  extern __shared__ __align__(1024) unsigned char smem[];
  PdlLaunchDependents();  // the fold may be scheduled as CTAs retire; it waits for all of this grid
  ItemP* item = reinterpret_cast<ItemP*>(smem + L::kItems);
  int* total_s = reinterpret_cast<int*>(smem + L::kTotal);
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full0 = sbase + L::kBars, empty0 = full0 + 16, qbar = full0 + 32;
  const int tid = threadIdx.x;

  const int64_t i_begin = blockIdx.x * static_cast<int64_t>(items) / gridDim.x;
  const int count = static_cast<int>((blockIdx.x + 1) * static_cast<int64_t>(items) / gridDim.x - i_begin);
  if (count > kMaxItemsP) __trap();  // the host keeps items <= kMaxItemsP * grid
  if (tid == 0) {
    if ((sbase & 1023) != 0) __trap();  // the swizzle atoms need a 1024-byte aligned base
    ptx::MbarInit(full0, kProducerThreads);
    ptx::MbarInit(full0 + 8, kProducerThreads);
    ptx::MbarInit(empty0, kThreadsW);
    ptx::MbarInit(empty0 + 8, kThreadsW);
    ptx::MbarInit(qbar, 128);  // warpgroup 0 loads q
    ptx::MbarInitFence();
  }
  // Launched as a programmatic dependent: from here on it reads what earlier kernels wrote (q,
  // the selection, the cache) and writes the workspace the previous call's fold reads.
  PdlWait();
  if (tid < count) {
    const int64_t i = i_begin + tid;
    ItemP e;
    e.rank = static_cast<int>(i % kK);
    e.group = static_cast<int>((i / kK) % groups);
    e.row = static_cast<int>(i / (static_cast<int64_t>(kK) * groups));
    const int64_t r = row0 + e.row;
    const int64_t b = sel_offsets[r], end = sel_offsets[r + 1];
    e.n = end < b ? 0 : static_cast<int>(end - b);
    e.begin = static_cast<int>(b);
    const int n_tiles = (e.n + kTileW - 1) / kTileW;
    e.tiles = e.rank < n_tiles ? (n_tiles - e.rank + kK - 1) / kK : 0;
    e.first = 0;
    e.bad = 0;
    item[tid] = e;
  }
  __syncthreads();
  if (tid == 0) {
    int acc = 0;
    for (int j = 0; j < count; ++j) {
      item[j].first = acc;
      acc += item[j].tiles;
    }
    *total_s = acc;
  }
  __syncthreads();
  const int total = *total_s;
  // The item of flat tile ft (< total).
  auto item_of = [&](int ft) {
    int j = 0;
    while (ft >= item[j].first + item[j].tiles) ++j;
    return j;
  };

  if (tid >= kThreadsW) {
    // The producer: warp w copies rows 16 w .. 16 w + 15 of every tile into the stage the
    // consumers released, lane l chunk l % 8 of every 64-value column block of rows 16 w + 4 i + l
    // / 8 (eight lanes a 128-byte line: each copy instruction reads four whole lines). Lane l
    // looks up row 16 w + l % 16 and passes its address to the lanes that copy it.
    wgmma::DecMaxRegs<kProducerRegs>();
    const int p = tid - kThreadsW, lane = p & 31, my_row = 16 * (p >> 5) + (lane & 15);
    constexpr int64_t kNoToken = INT64_MIN;
    // The selected id of row my_row of tile ft, or kNoToken past its item's tiles or row.
    auto load_id = [&](int ft) -> int64_t {
      if (ft >= total) return kNoToken;
      const ItemP& e = item[item_of(ft)];
      const int j = (e.rank + (ft - e.first) * kK) * kTileW + my_row;
      return j < e.n ? static_cast<int64_t>(sel[e.begin + j]) : kNoToken;
    };
    // Whether id addresses a page table entry of the row.
    auto in_table = [&](int64_t id) { return id >= 0 && (id >> cache.page_shift) < cache.table_stride; };
    // That row's page table entry (-1 where there is none to read).
    auto load_page = [&](int ft, int64_t id) -> int {
      if (ft >= total || id == kNoToken || !in_table(id)) return -1;
      return cache.page_table[(row0 + item[item_of(ft)].row) * cache.table_stride + (id >> cache.page_shift)];
    };
    // That row's cached address, or null (zero-filled) past its item's tiles or row and when
    // unaddressable (then the item's bad flag is set, before the arrival on the tile's stage:
    // the consumers see it).
    auto resolve = [&](int ft, int64_t id, int page) -> const __nv_bfloat16* {
      if (ft >= total || id == kNoToken) return nullptr;
      if (!in_table(id) || page < 0 || page >= cache.n_pages) {
        item[item_of(ft)].bad = 1;
        __threadfence_block();
        return nullptr;
      }
      return cache.arena + page * cache.page_stride + (id & ((1 << cache.page_shift) - 1)) * cache.width;
    };
    const uint64_t once = ptx::EvictFirstPolicy();  // read once: the partials stay in L2 instead
    // The lookups run ahead of the copies, each dependent read a tile before its use: with tile
    // ft's copies go out the reads of tile ft + 3's ids and of tile ft + 2's pages, and tile ft +
    // 1's addresses are formed.
    int64_t id1 = load_id(1), id2 = load_id(2);
    const int64_t id0 = load_id(0);
    int pg1 = load_page(1, id1);
    const __nv_bfloat16* src = resolve(0, id0, load_page(0, id0));
#pragma unroll 1
    for (int ft = 0; ft < total; ++ft) {
      const int s = ft & 1;
      // Ahead of the copies (which fill the load queue): tile ft + 3's ids, tile ft + 2's pages.
      const int64_t id3 = load_id(ft + 3);
      const int pg2 = load_page(ft + 2, id2);
      if (ft >= 2) ptx::MbarWait(empty0 + 8 * s, ((ft >> 1) + 1) & 1);  // the consumers released tile ft - 2
      const uint32_t dst = sbase + L::kKv + s * L::kStage;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int from = 4 * i + (lane >> 3);
        const auto* row_src = reinterpret_cast<const __nv_bfloat16*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(src), from));
        const int row = 16 * (p >> 5) + from;
#pragma unroll
        for (int b = 0; b < W / 64; ++b) {
          const int c = 8 * b + (lane & 7);
          ptx::CpAsync16Hint(dst + SwzW(row, c), row_src != nullptr ? row_src + c * 8 : q_abs,
                             row_src != nullptr ? 16 : 0, once);
        }
      }
      ptx::CpAsyncMbarArrive(full0 + 8 * s);
      src = resolve(ft + 1, id1, pg1);
      id1 = id2;
      pg1 = pg2;
      id2 = id3;
    }
    ptx::CpAsyncCommit();  // the last copies land before the thread exits
    ptx::CpAsyncWait<0>();
    return;
  }

  // The consumers. Warpgroup 0: S = Q K^T over the whole tile, the softmax, O's columns [0, 256)
  // with P from its registers; warpgroup 1: O's columns [256, 512) with P and the correction
  // from shared memory, its products overlapping warpgroup 0's next S. Named barriers: kReady
  // (warpgroup 0 has written the tile's P and correction), kFree (warpgroup 1 is done reading
  // them: warpgroup 0 may write the next tile's).
  const int wg = tid >> 7, v = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, q4 = lane & 3;
  const int row0h = 16 * v + g;  // this thread's heads in S, P and O: row0h and row0h + 8
  float* corr_s = reinterpret_cast<float*>(smem + L::kRed);  // [64]: the tile's correction a head
  if (total == 0) return;
  int j = item_of(0);
  if (wg == 0) {
    wgmma::IncMaxRegs<kScoreRegs>();
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    // q [64 heads x W] of item jj's row and group into the swizzled layout (rows past the heads
    // zero), then an arrival on qbar once this thread's copies land.
    auto load_q = [&](int jj) {
      const int h0 = item[jj].group * kHeadsW;
      CopyQW<W>(sbase + L::kQ, q_abs, q_pe, heads, row0 + item[jj].row, h0, min(kHeadsW, heads - h0), tid, 128);
      ptx::CpAsyncMbarArrive(qbar);
    };
    load_q(j);
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};  // l: [half][head]
    uint32_t q_phase = 0;
    bool q_pending = true;  // a q load went out that the next tile must wait for
#pragma unroll 1
    for (int ft = 0; ft < total; ++ft) {
      while (ft >= item[j].first + item[j].tiles) ++j;
      const int it = ft - item[j].first, t = item[j].rank + it * kK;
      const bool last = it == item[j].tiles - 1;
      if (q_pending) {
        ptx::MbarWait(qbar, q_phase & 1);
        ++q_phase;
        q_pending = false;
      }
      const uint32_t kv = sbase + L::kKv + (ft & 1) * L::kStage;
      ptx::MbarWait(full0 + 8 * (ft & 1), (ft >> 1) & 1);
      wgmma::ProxyFence();
      const ItemP e = item[j];  // after the wait: the producer's bad flags of this tile are in
      // S [64 heads x 64 tokens]: 36 (rope 0: 32) k16 steps; the descriptors are built once and a
      // step adds its byte offset / 16 (shared addresses stay below 2^18: no carry).
      float sacc[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) sacc[i] = 0.0f;
      {
        const uint64_t qd = wgmma::Desc(sbase + L::kQ, 16, 1024), kd = wgmma::Desc(kv, 16, 1024);
        wgmma::Fence();
#pragma unroll
        for (int k = 0; k < W / 16; ++k) {
          const uint32_t step = ((k >> 2) * kBlock + (k & 3) * 32) >> 4;
          wgmma::WgmmaM64N64(sacc, qd + step, kd + step, k > 0 ? 1 : 0);
        }
        wgmma::Commit();
        wgmma::Wait<0>();
#pragma unroll
        for (int i = 0; i < 32; ++i) wgmma::Pin(sacc[i]);
      }
      // q is read: after an item's last tile, the next item's q if it is another row or group.
      if (last && ft + 1 < total) {
        const int jn = item_of(ft + 1);
        if (item[jn].row != e.row || item[jn].group != e.group) {
          load_q(jn);
          q_pending = true;
        }
      }
      // The softmax, with WgTile's arithmetic: the maxima over the tile (the running max first),
      // P rounded to bf16, the sums of tokens [0, 32) and [32, 64) kept apart.
      float mx[2], corr[2];
      ScaleMaskRowMax<8>(sacc, min(kTileW, e.n - t * kTileW), scale_log2, mx);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float mn = fmaxf(m_run[h], mx[h]);
        corr[h] = exp2f(m_run[h] - mn);
        m_run[h] = mn;
      }
      uint32_t pa[16];  // P as the A fragments of the four k16 steps: pa[4 kk .. 4 kk + 3]
      float sum[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float p0 = exp2f(sacc[4 * jj + 2 * h] - m_run[h]), p1 = exp2f(sacc[4 * jj + 2 * h + 1] - m_run[h]);
          sum[jj >> 2][h] += p0 + p1;
          pa[2 * jj + h] = PackBf16W(p0, p1);
        }
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          sum[half][h] = QuadSum(sum[half][h]);
          l_run[half][h] = l_run[half][h] * corr[h] + sum[half][h];
        }
      }
      // P and the correction to warpgroup 1, once it is done with the previous tile's.
      if (ft > 0) BarSync(kFree);
      unsigned char* pbase = smem + L::kP;
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int hr = row0h + 8 * h, tok = 8 * jj + 2 * q4;
          *reinterpret_cast<uint32_t*>(pbase + PPairAt(hr, tok)) = pa[2 * jj + h];
        }
      }
      if (q4 == 0) {
        corr_s[row0h] = corr[0];
        corr_s[row0h + 8] = corr[1];
      }
      wgmma::ProxyFence();
      BarArrive(kReady);
      // O [:, 0:256) = O * corr + P V.
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        o[4 * jj] *= corr[0];
        o[4 * jj + 1] *= corr[0];
        o[4 * jj + 2] *= corr[1];
        o[4 * jj + 3] *= corr[1];
      }
      {
        const uint64_t vd = wgmma::Desc(kv, kBlock, 1024);
        wgmma::Fence();
#pragma unroll
        for (int kk = 0; kk < kTileW / 16; ++kk) {
          const uint32_t a[4] = {pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3]};
          wgmma::WgmmaM64N256TRegA(o, a, vd + ((kk * 16 * 128) >> 4));
        }
        wgmma::Commit();
        wgmma::Wait<0>();
#pragma unroll
        for (int i = 0; i < 128; ++i) wgmma::Pin(o[i]);
      }
      ptx::MbarArrive(empty0 + 8 * (ft & 1));  // this warpgroup's products are complete
      if (last) {  // the item's partial, then maxima, both halves' sums and the flag
        const int64_t i = i_begin + j;
        StoreItemO(o, ws_o + i * kItemOP + PartialAt(0, 0, tid));
        float* ml = ws_ml + i * kMlP;
        if (q4 == 0) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            ml[row0h + 8 * h] = m_run[h];
            ml[64 + row0h + 8 * h] = l_run[0][h];
            ml[128 + row0h + 8 * h] = l_run[1][h];
          }
        }
        if (tid == 0) ml[192] = e.bad != 0 ? 1.0f : 0.0f;
        m_run[0] = m_run[1] = -INFINITY;
        l_run[0][0] = l_run[0][1] = l_run[1][0] = l_run[1][1] = 0.0f;
      }
    }
  } else {
    wgmma::DecMaxRegs<kOutRegs>();
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
#pragma unroll 1
    for (int ft = 0; ft < total; ++ft) {
      while (ft >= item[j].first + item[j].tiles) ++j;
      const bool last = ft - item[j].first == item[j].tiles - 1;
      const uint32_t kv = sbase + L::kKv + (ft & 1) * L::kStage;
      ptx::MbarWait(full0 + 8 * (ft & 1), (ft >> 1) & 1);
      wgmma::ProxyFence();
      BarSync(kReady);
      // O [:, 256:512) = O * corr + P V.
      const float corr0 = corr_s[row0h], corr1 = corr_s[row0h + 8];
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        o[4 * jj] *= corr0;
        o[4 * jj + 1] *= corr0;
        o[4 * jj + 2] *= corr1;
        o[4 * jj + 3] *= corr1;
      }
      const uint64_t pd = wgmma::Desc(sbase + L::kP, 16, 1024), vd = wgmma::Desc(kv + 4 * kBlock, kBlock, 1024);
      wgmma::Fence();
#pragma unroll
      for (int kk = 0; kk < kTileW / 16; ++kk) {
        wgmma::WgmmaM64N256T(o, pd + ((kk * 32) >> 4), vd + ((kk * 16 * 128) >> 4), 1);
      }
      wgmma::Commit();
      wgmma::Wait<0>();
#pragma unroll
      for (int i = 0; i < 128; ++i) wgmma::Pin(o[i]);
      if (ft + 1 < total) BarArrive(kFree);
      ptx::MbarArrive(empty0 + 8 * (ft & 1));
      if (last) {
        StoreItemO(o, ws_o + (i_begin + j) * kItemOP + PartialAt(1, 0, tid - 128));
      }
    }
  }
#else
  __trap();  // built without sm_90a: MlaWgAvailable is false, nothing launches this
#endif
}

// Per device (MlaWgPersistentSetUp, under MlaWgAvailable's lock, before any launch there): its
// SMs, and whether the kernel for rows of 512 / 576 values got its shared memory.
constexpr int kMaxDevices = 64;
std::atomic<int> sm_count[kMaxDevices];
std::atomic<bool> ready[kMaxDevices][2];

template <int W>
bool SetUpW(int device) {
  static_assert(SmemP<W>::kBytes <= kMlaTcSmemBytes, "the persistent form fits where the cluster form does");
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      optin < SmemP<W>::kBytes ||
      cudaFuncSetAttribute(MlaDecodeWgPersistentKernel<W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           SmemP<W>::kBytes) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

// The current device's SMs when the kernel for rows of `width` values is set up there, else 0.
int ReadySms(int64_t width) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (device < 0 || device >= kMaxDevices || !ready[device][width == 576 ? 1 : 0].load()) return 0;
  return sm_count[device].load();
}

// Rows a launch of the persistent form takes (0: it does not apply): as many as the workspace
// holds, and few enough that no CTA gets more than kMaxItemsP items.
int64_t PersistentChunk(int64_t heads, const void* workspace, int64_t workspace_bytes, int sms) {
  if (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 16 != 0 || sms <= 0) return 0;
  const int64_t groups = (heads + kHeadsW - 1) / kHeadsW;
  return std::min(workspace_bytes / (groups * kMlaWgRowGroupBytes), int64_t{kMaxItemsP} * sms / (kK * groups));
}

template <int W>
absl::Status LaunchPersistent(const __nv_bfloat16* qa, const __nv_bfloat16* qp, int64_t rows, int64_t heads,
                              const PagedView& cache, const int32_t* sel, const int32_t* sel_offsets,
                              float scale_log2, __nv_bfloat16* out, void* workspace, int64_t chunk, int sms,
                              cudaStream_t stream) {
  const int groups = static_cast<int>((heads + kHeadsW - 1) / kHeadsW);
  auto* ws_o = static_cast<__nv_bfloat16*>(workspace);
  auto* ws_ml = reinterpret_cast<float*>(static_cast<char*>(workspace) + chunk * groups * kK * kItemOP * 2);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t launch_rows = std::min(chunk, rows - r0);
    const int items = static_cast<int>(launch_rows * groups * kK);
    const int grid = std::min(items, sms);
    FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MlaDecodeWgPersistentKernel<W>, dim3(grid), dim3(kThreadsP),
                                               SmemP<W>::kBytes, stream, qa, qp, static_cast<int>(heads), cache,
                                               sel, sel_offsets, r0, items, groups, scale_log2, ws_o, ws_ml));
    FERRY_RETURN_IF_ERROR(
        LaunchMlaWgFold(ws_o, ws_ml, sel_offsets, r0, items, groups, static_cast<int>(heads), out, stream));
  }
  return absl::OkStatus();
}

}  // namespace

bool MlaWgPersistentSetUp(int device, int64_t width) {
  if (device < 0 || device >= kMaxDevices || (width != 512 && width != 576)) return false;
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const bool ok = width == 512 ? SetUpW<512>(device) : SetUpW<576>(device);
  sm_count[device].store(sms);
  ready[device][width == 576 ? 1 : 0].store(ok);
  return ok;
}

int64_t MlaWgPersistentRows(int64_t heads, int64_t width, const void* workspace, int64_t workspace_bytes) {
  // The persistent form whenever the workspace allows: on an H200 at 64 heads 13% faster than the
  // cluster form at batch 1, 10% at 8, 42% at 16, 37% at 32, 32% at 64
  // (bench/results/h200-mla-decode.md).
  return PersistentChunk(heads, workspace, workspace_bytes, ReadySms(width));
}

absl::Status MlaDecodeWgPersistent(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads,
                                   int64_t rope, const PagedView& cache, const int32_t* sel,
                                   const int32_t* sel_offsets, float scale, uint16_t* out, void* workspace,
                                   int64_t pair_rows, void* stream) {
  const int sms = ReadySms(kLatentW + rope);
  if (sms <= 0 || pair_rows <= 0) {
    return absl::InternalError("MlaDecodeWgPersistent: not set up on this device, or no rows a launch pair");
  }
  const float scale_log2 = scale * 1.4426950408889634f;
  const auto* qa = reinterpret_cast<const __nv_bfloat16*>(q_abs);
  const auto* qp = reinterpret_cast<const __nv_bfloat16*>(q_pe);
  auto* o = reinterpret_cast<__nv_bfloat16*>(out);
  auto* st = static_cast<cudaStream_t>(stream);
  return rope == 0 ? LaunchPersistent<512>(qa, qp, rows, heads, cache, sel, sel_offsets, scale_log2, o, workspace,
                                           pair_rows, sms, st)
                   : LaunchPersistent<576>(qa, qp, rows, heads, cache, sel, sel_offsets, scale_log2, o, workspace,
                                           pair_rows, sms, st);
}

int64_t MlaWgWorkspaceBytes(int64_t rows, int64_t heads) {
  if (heads <= 32) return 0;  // MlaDecodeTc keeps the mma.sync kernel: no workspace form
  return rows * ((heads + kHeadsW - 1) / kHeadsW) * kMlaWgRowGroupBytes;
}

}  // namespace ferry::kernels::cuda
