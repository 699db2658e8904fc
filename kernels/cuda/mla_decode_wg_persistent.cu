// Sparse MLA decode on sm_90a, the persistent form (mla_decode_tc.h: MlaDecodeWg with a
// workspace): the same work items as the cluster form of mla_decode_wg.cu (row r, head group y,
// rank c: tiles c, c + K, ... of the row, online softmax over them), but a wave of at most one
// CTA an SM walks a contiguous range of items, its tile loads running two tiles ahead across item
// boundaries, and each item's bf16 partial goes to a workspace; a second kernel folds a row's
// partials in rank order (MlaDecodeWgFoldKernel). Each item's partial is computed by WgTile
// exactly as the cluster form computes it, and the fold's arithmetic is the cluster merge's, so
// the two forms give the same bits.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/mla_decode_tc.h"
#include "kernels/cuda/mla_decode_wg_tile.cuh"
#include "kernels/cuda/mla_merge.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kMaxItemsP = 12;    // items a CTA (shared-memory table)
constexpr int kTabRowsP = 128;    // table entries a buffer: 2 tiles
constexpr int kMlP = 256;         // floats of an item's scalars: m [64], l [2][64], the bad flag
constexpr int64_t kItemOP = int64_t{kHeadsW} * kLatentW;  // bf16 of an item's partial
static_assert(kMlaWgRowGroupBytes == kK * (kItemOP * 2 + kMlP * 4), "workspace of a (row, head group)");

// Where thread t (of 128) of warpgroup wg keeps, after a tile, its four outputs of column group jj
// (heads 16 (t / 32) + (t % 32) / 4 and that + 8, latent columns 256 wg + 8 jj + 2 (t % 4) and +1,
// as WgTile leaves them): an item's partial is stored in this layout, bf16 [2][32][128][4].
__host__ __device__ constexpr int PartialAt(int wg, int jj, int t) { return ((wg * 32 + jj) * 128 + t) * 4; }

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
  static constexpr int kTab = kP + kBlock;                     // [2][kTabRowsP] int64 row offsets
  static constexpr int kRed = kTab + 2 * kTabRowsP * 8;        // [2][64] float
  static constexpr int kItems = kRed + 2 * 64 * 4;             // [kMaxItemsP] ItemP
  static constexpr int kTotal = kItems + kMaxItemsP * 32;      // int: tiles of the CTA
  static constexpr int kBars = kTotal + 8;                     // full[2], q
  static constexpr int kBytes = kBars + 24;
  static_assert(sizeof(ItemP) == 32, "item table entry");
  static_assert(kKv % 1024 == 0 && kStage % 1024 == 0 && kP % 1024 == 0, "swizzle atoms 1024-byte aligned");
  static_assert(kBytes <= kMlaTcSmemBytes, "shared memory of a CTA");
};

// grid: min(items, SMs) CTAs of 256 threads, CTA b taking items [b * items / grid, (b + 1) *
// items / grid) of the launch's rows x groups x K (item i: rank i % K, group (i / K) % groups,
// row i / (K * groups)); row0 is the launch's first row of q, sel_offsets and the page table.
// Writes item i's partial to ws_o [i][kItemOP] (bf16, unnormalised, in PartialAt's layout) and
// ws_ml [i][kMlP] (m, the two warpgroups' sums, the bad flag), for items with tiles only.
template <int W>
__global__ void __launch_bounds__(kThreadsW, 1)
    MlaDecodeWgPersistentKernel(const __nv_bfloat16* __restrict__ q_abs, const __nv_bfloat16* __restrict__ q_pe,
                                int heads, PagedView cache, const int32_t* __restrict__ sel,
                                const int32_t* __restrict__ sel_offsets, int64_t row0, int items, int groups,
                                float scale_log2, __nv_bfloat16* __restrict__ ws_o, float* __restrict__ ws_ml) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = SmemP<W>;
  extern __shared__ __align__(1024) unsigned char smem[];
  PdlLaunchDependents();  // the fold may be scheduled as CTAs retire; it waits for all of this grid
  float* red = reinterpret_cast<float*>(smem + L::kRed);
  ItemP* item = reinterpret_cast<ItemP*>(smem + L::kItems);
  int* total_s = reinterpret_cast<int*>(smem + L::kTotal);
  int64_t* tab = reinterpret_cast<int64_t*>(smem + L::kTab);
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full0 = sbase + L::kBars, qbar = full0 + 16;
  const int tid = threadIdx.x, wg = tid >> 7, v = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, q4 = lane & 3;
  const int row0h = 16 * v + g;  // this thread's heads in O: row0h and row0h + 8

  const int64_t i_begin = blockIdx.x * static_cast<int64_t>(items) / gridDim.x;
  const int count = static_cast<int>((blockIdx.x + 1) * static_cast<int64_t>(items) / gridDim.x - i_begin);
  if (count > kMaxItemsP) __trap();  // the host keeps items <= kMaxItemsP * grid
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
  if (tid == 0) {
    if ((sbase & 1023) != 0) __trap();  // the swizzle atoms need a 1024-byte aligned base
    ptx::MbarInit(full0, kThreadsW);
    ptx::MbarInit(full0 + 8, kThreadsW);
    ptx::MbarInit(qbar, kThreadsW);
    ptx::MbarInitFence();
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
  if (total == 0) return;

  // The item of flat tile ft (< total).
  auto item_of = [&](int ft) {
    int j = 0;
    while (ft >= item[j].first + item[j].tiles) ++j;
    return j;
  };
  // q [64 heads x W] of item j's row and group into the swizzled layout (rows past the heads
  // zero), then an arrival on qbar once this thread's copies land.
  auto load_q = [&](int j) {
    const int h0 = item[j].group * kHeadsW;
    CopyQW<W>(sbase + L::kQ, q_abs, q_pe, heads, row0 + item[j].row, h0, min(kHeadsW, heads - h0));
    ptx::CpAsyncMbarArrive(qbar);
  };

  // Row offsets, two tiles a table buffer (block b: flat tiles 2b, 2b + 1; the first half of each
  // warpgroup's threads looks up one entry each, `ent`), as in the cluster form: kPastEnd for a
  // token past its item's tiles or row (zero-filled), kBad for an unaddressable one (zero-filled,
  // the row becomes NaN). The lookups run ahead of their use: a block's ids two blocks early,
  // its pages one block early.
  const bool table_thread = (tid & 64) == 0;
  const int ent = (tid & 63) | ((tid >> 7) << 6);  // its entry (table threads)
  // An id is the selected int32 as it was loaded (the load is not waited for until the next
  // block's step), or kNoToken for a token past its item's tiles or row.
  constexpr int64_t kPastEnd = -1, kBad = -2, kNoToken = INT64_MIN;
  auto load_id = [&](int blk) -> int64_t {
    const int ft = 2 * blk + (ent >> 6);
    if (ft >= total) return kNoToken;
    const ItemP& e = item[item_of(ft)];
    const int j = (e.rank + (ft - e.first) * kK) * kTileW + (ent & (kTileW - 1));
    return j < e.n ? static_cast<int64_t>(sel[e.begin + j]) : kNoToken;
  };
  auto load_page = [&](int blk, int64_t id) {
    const int ft = 2 * blk + (ent >> 6);
    if (ft >= total || id < 0) return -1;
    const int64_t index = id >> cache.page_shift;
    if (index >= cache.table_stride) return -1;
    return cache.page_table[(row0 + item[item_of(ft)].row) * cache.table_stride + index];
  };
  auto store_offset = [&](int blk, int64_t id, int page) {
    int64_t off = kPastEnd;
    if (id != kNoToken) {
      off = id < 0 || page < 0 || page >= cache.n_pages
                ? kBad
                : page * cache.page_stride + (id & ((1 << cache.page_shift) - 1)) * cache.width;
      if (off == kBad) item[item_of(2 * blk + (ent >> 6))].bad = 1;
    }
    tab[(blk & 1) * kTabRowsP + ent] = off;
  };
  // Flat tile ft into stage ft % 2 (CopyTileW), then an arrival on the stage's mbarrier. The
  // cached rows are read once: evicted first, so that the items' partials stay in L2 for the fold.
  const uint64_t once = ptx::EvictFirstPolicy();
  auto copy_tile = [&](int ft) {
    const int s = ft & 1;
    CopyTileW<W, true>(sbase + L::kKv + s * L::kStage, tab + ((ft >> 1) & 1) * kTabRowsP + (ft & 1) * kTileW,
                       cache.arena, q_abs, once);
    ptx::CpAsyncMbarArrive(full0 + 8 * s);
  };

  int j = item_of(0);
  load_q(j);
  int64_t id_next = kNoToken, id_after = kNoToken;  // block b + 1's id and page, b + 2's id
  int page_next = -1;
  if (table_thread) {  // two round trips: the ids of blocks 0..3, then the pages of 0..2
    const int64_t id0 = load_id(0), id1 = load_id(1);
    id_next = load_id(2);
    id_after = load_id(3);
    const int page0 = load_page(0, id0), page1 = load_page(1, id1);
    page_next = load_page(2, id_next);
    store_offset(0, id0, page0);
    store_offset(1, id1, page1);
  }
  __syncthreads();
  copy_tile(0);
  if (total > 1) copy_tile(1);

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  uint32_t q_phase = 0;
  bool q_pending = true;  // a q load went out that the next tile must wait for

#pragma unroll 1
  for (int ft = 0; ft < total; ++ft) {
    while (ft >= item[j].first + item[j].tiles) ++j;
    const ItemP e = item[j];
    const int it = ft - e.first, t = e.rank + it * kK;
    const bool last = it == e.tiles - 1;
    if (q_pending) {
      ptx::MbarWait(qbar, q_phase & 1);
      ++q_phase;
      q_pending = false;
    }
    const uint32_t kv = sbase + L::kKv + (ft & 1) * L::kStage;
    ptx::MbarWait(full0 + 8 * (ft & 1), (ft >> 1) & 1);
    wgmma::ProxyFence();
    // After this item's last tile: the next item with tiles, and whether it needs another q.
    int jn = -1;
    if (last && ft + 1 < total) {
      jn = item_of(ft + 1);
      if (item[jn].row == e.row && item[jn].group == e.group) jn = -1;
    }
    WgTile<W>(sbase + L::kQ, kv, sbase + L::kP, smem + L::kP, red, min(kTileW, e.n - t * kTileW), scale_log2, o,
              m_run, l_run, [&] {
                if (jn >= 0) load_q(jn);
              });
    if (jn >= 0) q_pending = true;
    if (last) {
      // The item's partial: bf16 outputs in the accumulators' own layout (PartialAt: each warp's
      // stores one contiguous 256 bytes), then maxima, sums and the flag.
      const int64_t i = i_begin + j;
      __nv_bfloat16* dst = ws_o + i * kItemOP + PartialAt(wg, 0, tid & 127);
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        uint2 val;
        val.x = PackBf16W(o[4 * jj], o[4 * jj + 1]);
        val.y = PackBf16W(o[4 * jj + 2], o[4 * jj + 3]);
        *reinterpret_cast<uint2*>(dst + PartialAt(0, jj, 0)) = val;
      }
      float* ml = ws_ml + i * kMlP;
      if (q4 == 0) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int h = row0h + 8 * hh;
          if (wg == 0) ml[h] = m_run[hh];
          ml[64 + 64 * wg + h] = l_run[hh];
        }
      }
      if (tid == 0) ml[192] = e.bad != 0 ? 1.0f : 0.0f;
#pragma unroll
      for (int k = 0; k < 128; ++k) o[k] = 0.0f;
      m_run[0] = m_run[1] = -INFINITY;
      l_run[0] = l_run[1] = 0.0f;
    }
    NamedSync(3);  // both warpgroups are done with this stage and with P

    if (ft + 2 < total) copy_tile(ft + 2);
    if ((ft & 1) == 0 && table_thread && ft + 4 < total) {  // block ft / 2 + 2 (see the table comment)
      const int blk = ft / 2 + 2;
      store_offset(blk, id_next, page_next);
      page_next = load_page(blk + 1, id_after);
      id_next = id_after;
      id_after = load_id(blk + 2);
    }
  }
#else
  __trap();  // built without sm_90a: MlaWgAvailable is false, nothing launches this
#endif
}

// The fold of the persistent form: one CTA of 256 threads an item (row, group, c), owning heads
// c, c + K, ... of the group, as the cluster form's CTA c does, with the same arithmetic
// (MlaMergeWeights, then per value acc += w_c' * partial_c' in rank order, MlaMergeOut). Thread k
// takes the column group jj = k % 32 of warpgroup half wg = (k / 32) % 2 for heads 16 v + c and
// 16 v + c + 8, v = k / 64: in PartialAt's layout the 8 columns of both heads are the 32 bytes
// of threads 32 v + 4 c + (0..3). Launched after the item kernel (programmatic dependent launch:
// it waits for all of it before reading the workspace).
__global__ void __launch_bounds__(256)
    MlaDecodeWgFoldKernel(const __nv_bfloat16* __restrict__ ws_o, const float* __restrict__ ws_ml,
                          const int32_t* __restrict__ sel_offsets, int64_t row0, int groups, int heads,
                          __nv_bfloat16* __restrict__ out) {
  static_assert(kHk == 8 && kK == 8, "heads 16 v + c and + 8 are the CTA's eight");
  __shared__ float recv_m[kK * kHk], recv_l[kK * 2 * kHk], wgt[kHk * kK], inv[kHk];
  __shared__ int bad_s;
  const int64_t i = blockIdx.x, first = i - i % kK;  // the row's item of rank 0
  const int c = static_cast<int>(i % kK), y = static_cast<int>((i / kK) % groups);
  const int64_t r = row0 + i / (static_cast<int64_t>(kK) * groups);
  const int tid = threadIdx.x;
  // The selection was written before the item kernel began: read it before waiting for that.
  const int64_t begin = sel_offsets[r], end = sel_offsets[r + 1];
  PdlWait();
  // Every load of the workspace goes out before any is used: the K items of the row all have
  // room there, those without tiles (c >= parts) hold stale values that are loaded and not used.
  const int v = tid >> 6, wg = (tid >> 5) & 1, jj = tid & 31;
  const __nv_bfloat16* src = ws_o + first * kItemOP + PartialAt(wg, jj, 32 * v + 4 * c);
  uint4 part[kK][2];
#pragma unroll
  for (int cc = 0; cc < kK; ++cc) {
    part[cc][0] = *reinterpret_cast<const uint4*>(src + cc * kItemOP);
    part[cc][1] = *reinterpret_cast<const uint4*>(src + cc * kItemOP + 8);
  }
  float mlv[3] = {0.0f, 0.0f, 0.0f}, flag = 0.0f;
  if (tid < kK * kHk) {
    const int cc = tid / kHk, h = (tid % kHk) * kK + c;
    const float* ml = ws_ml + (first + cc) * kMlP;
    mlv[0] = ml[h];
    mlv[1] = ml[64 + h];
    mlv[2] = ml[128 + h];
    flag = ml[192];
  }
  const int n = end < begin ? 0 : static_cast<int>(end - begin);
  const int parts = min(kK, (n + kTileW - 1) / kTileW);
  if (tid < kK * kHk) {  // items past `parts` had no tiles: max -inf, sums 0
    const int cc = tid / kHk, hh = tid % kHk;
    const bool has = cc < parts;
    recv_m[cc * kHk + hh] = has ? mlv[0] : -INFINITY;
    recv_l[(cc * 2) * kHk + hh] = has ? mlv[1] : 0.0f;
    recv_l[(cc * 2 + 1) * kHk + hh] = has ? mlv[2] : 0.0f;
  }
  if (tid == 0) bad_s = end < begin ? 1 : 0;
  __syncthreads();
  if (tid < kK * kHk && tid % kHk == 0 && tid / kHk < parts && flag != 0.0f) bad_s = 1;
  MlaMergeWeights<kK, kHk, 2>(recv_m, recv_l, wgt, inv);
  __syncthreads();
  const int hh0 = 2 * v, hh1 = 2 * v + 1;  // heads 16 v + c = hh0 * K + c and + 8
  float acc0[8], acc1[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) acc0[e] = acc1[e] = 0.0f;
#pragma unroll
  for (int cc = 0; cc < kK; ++cc) {
    if (cc >= parts) break;
    // Threads q4 = 0..3: [head hh0: columns 2 q4, +1][head hh1: the same], 8 bytes each.
    const uint32_t w32[8] = {part[cc][0].x, part[cc][0].y, part[cc][0].z, part[cc][0].w,
                             part[cc][1].x, part[cc][1].y, part[cc][1].z, part[cc][1].w};
    const float w0 = wgt[hh0 * kK + cc], w1 = wgt[hh1 * kK + cc];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 f0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w32[2 * q]));
      const float2 f1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w32[2 * q + 1]));
      acc0[2 * q] += w0 * f0.x;
      acc0[2 * q + 1] += w0 * f0.y;
      acc1[2 * q] += w1 * f1.x;
      acc1[2 * q + 1] += w1 * f1.y;
    }
  }
  const bool bad = bad_s != 0;
  const int hcount = min(kHeadsW, heads - y * kHeadsW);
  __nv_bfloat16* o = out + (r * heads + y * kHeadsW) * kLatentW + 256 * wg + 8 * jj;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int hh = half == 0 ? hh0 : hh1, h = hh * kK + c;
    if (h >= hcount) continue;
    __align__(16) __nv_bfloat16 val[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) val[e] = MlaMergeOut(half == 0 ? acc0[e] : acc1[e], inv[hh], bad, n);
    *reinterpret_cast<uint4*>(o + h * kLatentW) = *reinterpret_cast<const uint4*>(val);
  }
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
    const int items = static_cast<int>(std::min(chunk, rows - r0) * groups * kK);
    const int grid = std::min(items, sms);
    MlaDecodeWgPersistentKernel<W><<<grid, kThreadsW, SmemP<W>::kBytes, stream>>>(
        qa, qp, static_cast<int>(heads), cache, sel, sel_offsets, r0, items, groups, scale_log2, ws_o, ws_ml);
    FERRY_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MlaDecodeWgFoldKernel, dim3(items), dim3(256), 0, stream, ws_o,
                                               ws_ml, sel_offsets, r0, groups, static_cast<int>(heads), out));
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

int64_t MlaWgPersistentRows(int64_t rows, int64_t heads, int64_t width, const void* workspace,
                            int64_t workspace_bytes) {
  // The persistent form once a launch pair's items (rows x groups x K) outnumber the SMs: with
  // fewer, each CTA has one item either way and the fold's second launch costs ~3 us more than
  // the cluster merge (bench/results/h200-mla-decode.md, session 9).
  const int sms = ReadySms(width);
  const int64_t chunk = PersistentChunk(heads, workspace, workspace_bytes, sms);
  if (chunk <= 0 || std::min(chunk, rows) * ((heads + kHeadsW - 1) / kHeadsW) * kK <= sms) return 0;
  return chunk;
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
