// Exact per-row top-k over float32 scores (TopK in ops.h): one block of 1024 threads per row, or,
// for few long rows, a cluster of 2-8 blocks per row (TopKClusterKernel, below: the blocks share
// the samples and gather a part of the row each; block 0 finishes).
//
// Each score maps to a 32-bit key whose unsigned order is the selection order by value (NaN
// lowest, -0 == +0). A selection finds a threshold: the key T of the k-th largest element and
// `need`, how many of the elements equal to T belong to the answer (every larger key does).
// Over a row in global memory (the general path, with the key and the digit search in
// topk_radix.cuh):
//   RadixSelect: three passes (11, 11 and 10 bits from the top) of shared-memory histograms;
//   Compact: walks the elements in ascending index, 16384 at a time: each warp owns a contiguous
//     span of 512 (16 a lane, lane-interleaved so that loads coalesce, all in flight at once) and
//     marks the elements it takes (key > T, or key == T with fewer than `need` equal keys
//     before); a scan over the warps' counts gives each warp where its output starts; the warp
//     writes its elements in order (ballots give the positions).
// Over the candidate buffer (kCap keys and ids in shared memory, four a thread in registers):
//   BufferSelect: the same passes from the highest bit where the keys differ, stopping at a bin
//     taken whole; BufferCompact: one block scan of the threads' counts.
// The row path, when 2k fits the buffer:
//   1. If the row is longer than kCap, BufferSelect over kCap evenly spread samples finds a key
//      T_s expected to have about (k + kCap) / 2 elements at or above it.
//   2. Every element with key >= T_s (of a row of at most kCap: all of them) goes, in index
//      order, into the buffer (GatherAbove for a long row): one read of the row.
//   3. If between k and kCap elements were copied (the k-th largest key is then >= T_s, so every
//      element of the answer is a candidate), BufferSelect and BufferCompact give the answer.
//      Otherwise (bad luck with the samples, or many ties at T_s) the row takes the general path
//      (four more reads).
// Either way ties go to the lower index, the output is ascending by construction, and the set
// is exactly cpu::TopKIndices's. H200, kernel time (ncu), k = 2048: one row of 131072 scores
// 0.069 ms in one block, 0.034 ms in a cluster of 8, against 0.35 for the four-pass kernel this
// replaced; 32768 scores 28 us in a cluster of 2; 4096 scores 11 us (bench/results/h200-topk.md).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <climits>
#include <map>
#include <mutex>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/topk_radix.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kCap = 4096;               // candidate buffer: keys and indices (32 KiB); also holds the samples
constexpr int kMaxCluster = 8;           // TopKClusterKernel: blocks a row at most
constexpr int64_t kSplitMin = 4 * kCap;  // ... and the fewest scores of a row a block takes

// The rank among the kCap samples of a row of n (> kCap) whose key is the threshold: j of them
// stand for about (keff + kCap) / 2 elements.
__device__ __forceinline__ int SampleRank(int64_t n, int keff) {
  const int64_t want = (int64_t{keff} + kCap) / 2;
  return static_cast<int>((want * kCap + n - 1) / n);  // <= kCap < n
}

// A selection's threshold: the answer is every key > t and the first `need` keys == t (in index
// order).
struct Threshold {
  uint32_t t;
  int need;
};

// Up to kCap keys, thread t holding keys [4 t, 4 t + 4) in registers, and whether each is one of
// them: the buffer's m (16-byte aligned shared memory), or a short row's n read once.
struct BufferKeys {
  uint32_t k[4];
  bool in[4];
  __device__ __forceinline__ BufferKeys(const uint32_t* keys, int m) {
    const uint4 v = reinterpret_cast<const uint4*>(keys)[threadIdx.x];
    k[0] = v.x, k[1] = v.y, k[2] = v.z, k[3] = v.w;
#pragma unroll
    for (int j = 0; j < 4; ++j) in[j] = 4 * static_cast<int>(threadIdx.x) + j < m;
  }
  __device__ __forceinline__ BufferKeys(const float* __restrict__ row, int n) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = 4 * static_cast<int>(threadIdx.x) + j;
      in[j] = i < n;
      k[j] = in[j] ? Key(__ldg(row + i)) : 0u;
    }
  }
};
static_assert(kCap == 4 * kThreads, "four buffer keys a thread");

// RadixSelect's answer for m keys (1 <= need <= m <= kCap) held as BufferKeys, with fewer passes:
// the first looks at the 11 bits below the highest bit where the keys differ (every key agrees
// above it), and it stops at a digit whose bin is taken whole (then t is one below the bin's
// lowest key and need is 0). A warp adds each bin's count once (match.any). Block-wide; leaves
// the histogram zeroed.
__device__ Threshold BufferSelect(const BufferKeys& b, int m, int need, Shared* sh) {
  if (need == m) return Threshold{0u, m};  // all of them
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t any = 0u, all = ~0u;  // OR and AND of the keys: the bits that differ are any ^ all
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    any |= b.in[j] ? b.k[j] : 0u;
    all &= b.in[j] ? b.k[j] : ~0u;
  }
  any = __reduce_or_sync(kFull, any);
  all = __reduce_and_sync(kFull, all);
  if (lane == 0) {
    sh->warp_or[warp] = any;
    sh->warp_and[warp] = all;
  }
  const int top = 2047 - 2 * static_cast<int>(threadIdx.x);  // FindDigit's bins of this thread
  sh->hist[Slot(top)] = 0;
  sh->hist[Slot(top - 1)] = 0;
  __syncthreads();
  any = __reduce_or_sync(kFull, sh->warp_or[lane]);
  all = __reduce_and_sync(kFull, sh->warp_and[lane]);
  const uint32_t diff = any ^ all;
  if (diff == 0u) return Threshold{all, need};  // every key equal: the first `need` of them
  int hi = 31 - __clz(diff);  // bits above hi: the same in every key
  const uint32_t low = hi == 31 ? ~0u : (2u << hi) - 1u;
  uint32_t t = all & ~low, mask = ~low;
#pragma unroll 1
  while (true) {
    const int width = min(11, hi + 1), shift = hi + 1 - width;
    const uint32_t digits = (1u << width) - 1u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int bin = b.in[j] && (b.k[j] & mask) == t ? static_cast<int>((b.k[j] >> shift) & digits) : -1;
      const unsigned peers = __match_any_sync(kFull, bin);
      if (bin >= 0 && lane == __ffs(peers) - 1) atomicAdd(&sh->hist[Slot(bin)], __popc(peers));
    }
    __syncthreads();
    FindDigit(sh, need);
    __syncthreads();
    const int d = sh->digit, bin_need = sh->need, bin_count = sh->count;
    t |= static_cast<uint32_t>(d) << shift;
    mask |= digits << shift;
    if (shift == 0) return Threshold{t, bin_need};
    // The whole bin taken: every key >= t, as key > t - 1 (t is 0 only where the bin holds the
    // lowest keys there are: then key > 0 and the bin's zeros).
    if (bin_need == bin_count) return t == 0u ? Threshold{0u, bin_need} : Threshold{t - 1u, 0};
    need = bin_need;
    hi = shift - 1;
  }
}

// Compact for m (<= kCap) keys held as BufferKeys: out[pos] = id of element i (ids[i], or i where
// ids is null) for every element taken (key > th.t, or key == th.t among the first th.need of
// those), in index order. One block scan of the threads' counts above and equal to th.t (packed,
// 16 bits each) gives where each thread's output starts. Block-wide; the last step of a row
// (nothing orders it before a later use of the warp tables).
__device__ void BufferCompact(const BufferKeys& b, const int32_t* ids, Threshold th, int32_t* out, Shared* sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned gt = 0u, eq = 0u;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    gt |= (b.in[j] && b.k[j] > th.t ? 1u : 0u) << j;
    eq |= (b.in[j] && b.k[j] == th.t ? 1u : 0u) << j;
  }
  const int packed = __popc(gt) | (__popc(eq) << 16);  // each sum <= kCap < 2^16
  const int incl = WarpInclusiveSum(packed, lane);
  if (lane == 31) sh->warp_take[warp] = incl;
  __syncthreads();
  const int w = sh->warp_take[lane], w_incl = WarpInclusiveSum(w, lane);
  const int before = __shfl_sync(kFull, w_incl - w, warp) + incl - packed;
  int eq_before = before >> 16;
  int pos = (before & 0xffff) + min(eq_before, th.need);  // every equal key before is taken, up to need
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    bool take = (gt >> j) & 1u;
    if ((eq >> j) & 1u) take = eq_before++ < th.need;
    if (take) out[pos++] = ids != nullptr ? ids[4 * tid + j] : 4 * tid + j;
  }
}

// Compact's case for the candidates (t the threshold, no ties to count): every element of the
// row with key > t goes, in index order, to the buffer's slot of its rank while the rank is below
// kCap. A warp keeps its ballots (the same in every lane) instead of bit masks, so writing the
// chunk costs a popcount an element, and re-reads a taken element's score rather than keeping
// every key live (the loads of a chunk then all stay in flight at once). Stops after the first
// chunk that takes the count past kCap; returns the count (block-uniform).
__device__ int64_t GatherAbove(const float* __restrict__ row, int64_t n, uint32_t t, uint32_t* cand_key,
                               int32_t* cand_id, Shared* sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned lanes_before = (1u << lane) - 1u;
  int64_t taken = 0;
  for (int64_t c0 = 0; c0 < n && taken <= kCap; c0 += kChunk) {
    const int64_t w0 = c0 + int64_t{warp} * kSpan;
    float x[kPerLane];
    uint32_t took[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t i = w0 + 32 * j + lane;
      x[j] = i < n ? __ldg(row + i) : 0.0f;
    }
    int count = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      took[j] = __ballot_sync(kFull, w0 + 32 * j + lane < n && Key(x[j]) > t);
      count += __popc(took[j]);
    }
    if (lane == 0) sh->warp_take[warp] = count;
    __syncthreads();
    if (warp == 0) {
      const int c = lane < kWarps ? sh->warp_take[lane] : 0, incl = WarpInclusiveSum(c, lane);
      if (lane < kWarps) sh->warp_out[lane] = incl - c;
      if (lane == 31) sh->chunk_taken = incl;
    }
    __syncthreads();
    int64_t pos = taken + sh->warp_out[warp];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (took[j] == 0u) continue;
      const int64_t p = pos + __popc(took[j] & lanes_before);
      if (((took[j] >> lane) & 1u) && p < kCap) {  // the key read again (an L1 hit): fewer live registers
        cand_key[p] = Key(__ldg(row + w0 + 32 * j + lane));
        cand_id[p] = static_cast<int32_t>(w0 + 32 * j + lane);
      }
      pos += __popc(took[j]);
    }
    taken += sh->chunk_taken;
    __syncthreads();  // the warp tables and chunk count are rewritten by the next chunk
  }
  return taken;
}

// The steps of a row (each a select, then a compact; one call site each keeps the code small
// enough for the instruction cache):
//   kSample: the samples' threshold lo, then every element with key >= lo into the buffer;
//   kShort: select and compact over the whole (short) row, four scores a thread in registers;
//   kCandidates: select and compact over the buffer (m elements) into out;
//   kRow: select and compact over the row into out.
enum Step { kSample, kShort, kCandidates, kRow, kDone };

// The first step of a row of n scores with keff = min(n, k) to select.
__device__ __forceinline__ int FirstStep(int64_t n, int keff) {
  return keff == 0 ? kDone : 2 * int64_t{keff} > kCap ? kRow : n <= kCap ? kShort : kSample;
}

// The row's answer into out (keff ids ascending), from `step` on (m: the buffer's elements when
// step is kCandidates). Block-wide.
__device__ __forceinline__ void SelectRow(const float* __restrict__ row, int64_t n, int keff, int32_t* out, int step,
                                          int64_t m, Shared* sh, uint32_t* cand_key, int32_t* cand_id) {
  const int tid = threadIdx.x;
  const KeySource row_src{row};
#pragma unroll 1
  while (step != kDone) {
    if (step == kShort) {  // the whole row in registers, four scores a thread
      const BufferKeys b(row, static_cast<int>(n));
      BufferCompact(b, nullptr, BufferSelect(b, static_cast<int>(n), keff, sh), out, sh);
      break;
    }
    if (step == kSample) {
      // Sample s at s * n / kCap: each stands for n / kCap elements. Their SampleRank-th
      // largest key lo, then every element with key >= lo (key > lo - 1) into the buffer, in
      // index order. Between keff and kCap candidates: the keff-th largest key is >= lo, so every
      // element of the answer is among them. Else the general path.
#pragma unroll
      for (int s = tid; s < kCap; s += kThreads) cand_key[s] = row_src(s * n / kCap);
      __syncthreads();
      const Threshold th = BufferSelect(BufferKeys(cand_key, kCap), kCap, SampleRank(n, keff), sh);
      const uint32_t lo = th.need > 0 ? th.t : th.t + 1u;  // the lowest key the samples' answer takes
      if (lo == 0u) {  // key >= 0 takes the whole long row: over kCap anyway
        step = kRow;
        continue;
      }
      m = GatherAbove(row, n, lo - 1u, cand_key, cand_id, sh);
      step = m >= keff && m <= kCap ? kCandidates : kRow;
      continue;
    }
    if (step == kCandidates) {
      const BufferKeys b(cand_key, static_cast<int>(m));
      BufferCompact(b, cand_id, BufferSelect(b, static_cast<int>(m), keff, sh), out, sh);
    } else {  // kRow
      int need = 0;
      const uint32_t t = RadixSelect(row_src, n, keff, sh, &need);
      Compact(row_src, n, t, need, out, sh);
    }
    step = kDone;
  }
}

// Row r's length (0 when lengths[r] is outside [0, cols]: it selects nothing).
__device__ __forceinline__ int64_t RowLength(const int32_t* lengths, int64_t r, int64_t cols) {
  const int64_t n = lengths != nullptr ? lengths[r] : cols;
  return n < 0 || n > cols ? 0 : n;
}

// Grid: one block a row.
__global__ void __launch_bounds__(kThreads)
    TopKKernel(const float* __restrict__ scores, int64_t cols, const int32_t* __restrict__ lengths, int k,
               int32_t* __restrict__ ids, int32_t* __restrict__ counts) {
  PdlLaunchDependents();
  PdlWait();
  __shared__ Shared sh;
  __shared__ __align__(16) uint32_t cand_key[kCap];
  __shared__ int32_t cand_id[kCap];
  const int64_t r = blockIdx.x;
  const float* row = scores + r * cols;
  int32_t* out = ids + r * static_cast<int64_t>(k);
  const int64_t n = RowLength(lengths, r, cols);
  const int keff = static_cast<int>(n < k ? n : k);
  SelectRow(row, n, keff, out, FirstStep(n, keff), 0, &sh, cand_key, cand_id);
  for (int64_t j = keff + threadIdx.x; j < k; j += kThreads) out[j] = -1;
  if (counts != nullptr && threadIdx.x == 0) counts[r] = keff;
}

// Grid: a cluster of C (2 to kMaxCluster) blocks a row, for few rows: a sampled row's work is
// split. Every block loads its share of the samples into every block's buffer (distributed
// shared memory), all select the same threshold from them, and each gathers its own 1/C of the
// row; block 0 collects the counts, the others append their candidates to block 0's buffer in
// order, and block 0 selects and writes the answer. A row that is not sampled, or whose
// candidates fall outside [keff, kCap], is done by block 0 alone as TopKKernel does it.
__global__ void __launch_bounds__(kThreads)
    TopKClusterKernel(const float* __restrict__ scores, int64_t cols, const int32_t* __restrict__ lengths, int k,
                      int32_t* __restrict__ ids, int32_t* __restrict__ counts) {
  namespace cg = cooperative_groups;
  PdlLaunchDependents();
  PdlWait();
  __shared__ Shared sh;
  __shared__ __align__(16) uint32_t cand_key[kCap];
  __shared__ int32_t cand_id[kCap];
  __shared__ int64_t seg_count[kMaxCluster];  // block 0's: the blocks' candidate counts
  cg::cluster_group cluster = cg::this_cluster();
  const int c = static_cast<int>(cluster.block_rank()), nc = static_cast<int>(cluster.num_blocks());
  const int tid = threadIdx.x;
  const int64_t r = blockIdx.x / nc;
  const float* row = scores + r * cols;
  int32_t* out = ids + r * static_cast<int64_t>(k);
  const int64_t n = RowLength(lengths, r, cols);
  const int keff = static_cast<int>(n < k ? n : k);
  int step = FirstStep(n, keff);  // the same in every block of the cluster
  int64_t m = 0;
  if (step == kSample && n >= int64_t{kSplitMin} * nc) {
    cluster.sync();  // every block of the cluster has started: its shared memory may be written
    for (int s = c * kCap / nc + tid; s < (c + 1) * kCap / nc; s += kThreads) {
      const uint32_t key = Key(__ldg(row + s * n / kCap));
      for (int d = 0; d < nc; ++d) cluster.map_shared_rank(cand_key, d)[s] = key;
    }
    cluster.sync();
    const Threshold th = BufferSelect(BufferKeys(cand_key, kCap), kCap, SampleRank(n, keff), &sh);
    const uint32_t lo = th.need > 0 ? th.t : th.t + 1u;  // as SelectRow's kSample step
    if (lo == 0u) {
      step = kRow;  // every block: no more cluster traffic
    } else {
      const int64_t seg = (n + nc - 1) / nc, seg0 = min(c * seg, n), seg_n = min(seg, n - seg0);
      const int64_t mine = GatherAbove(row + seg0, seg_n, lo - 1u, cand_key, cand_id, &sh);
      if (tid == 0) cluster.map_shared_rank(seg_count, 0)[c] = mine;
      cluster.sync();
      const int64_t* counts0 = cluster.map_shared_rank(seg_count, 0);
      int64_t before = 0;
      for (int d = 0; d < nc; ++d) {
        const int64_t v = counts0[d];
        m += v;
        if (d < c) before += v;
      }
      const bool fits = m >= keff && m <= kCap;
      if (fits && c > 0) {  // block 0's own candidates are already in place (before = 0, seg0 = 0)
        uint32_t* key0 = cluster.map_shared_rank(cand_key, 0);
        int32_t* id0 = cluster.map_shared_rank(cand_id, 0);
        for (int64_t j = tid; j < mine; j += kThreads) {
          key0[before + j] = cand_key[j];
          id0[before + j] = cand_id[j] + static_cast<int32_t>(seg0);
        }
      }
      cluster.sync();  // the copies landed; nothing reads another block's memory after this
      step = fits ? kCandidates : kRow;
    }
  }
  if (c != 0) return;
  SelectRow(row, n, keff, out, step, m, &sh, cand_key, cand_id);
  for (int64_t j = keff + tid; j < k; j += kThreads) out[j] = -1;
  if (counts != nullptr && tid == 0) counts[r] = keff;
}

// How many clusters of `size` TopKClusterKernel blocks the current device runs at once (0: none;
// worked out once a device and size).
int MaxClusters(int size) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  static std::mutex mu;
  static auto* known = new std::map<std::pair<int, int>, int>();
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(device, size);
  if (auto it = known->find(key); it != known->end()) return it->second;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(size);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(size));
  config.blockDim = dim3(kThreads);
  config.attrs = attr;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, TopKClusterKernel, &config) != cudaSuccess) {
    cudaGetLastError();
    clusters = 0;
  }
  (*known)[key] = clusters;
  return clusters;
}

// Blocks a row: the largest of 8, 4, 2 that leaves each block at least kSplitMin scores of the
// longest row and runs every row's cluster at once; else 1 (TopKKernel).
int ClusterFor(int64_t rows, int64_t cols) {
  for (int size : {kMaxCluster, kMaxCluster / 2, kMaxCluster / 4}) {
    if (cols / size >= kSplitMin && rows <= MaxClusters(size)) return size;
  }
  return 1;
}

}  // namespace

absl::Status TopK(const float* scores, int64_t rows, int64_t cols, const int32_t* lengths, int64_t k,
                  int32_t* ids, int32_t* counts, void* stream) {
  if (rows < 0 || rows > INT_MAX || cols < 1 || cols > INT_MAX || k < 0 || k > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("TopK: rows ", rows, ", cols ", cols, ", k ", k,
                                                   " (need 0 <= rows, 1 <= cols, 0 <= k, each <= ", INT_MAX, ")"));
  }
  if (rows == 0 || (k == 0 && counts == nullptr)) return absl::OkStatus();
  if (scores == nullptr || (k > 0 && ids == nullptr)) {
    return absl::InvalidArgumentError("TopK: null scores or ids");
  }
  auto* st = static_cast<cudaStream_t>(stream);
  const int cluster = ClusterFor(rows, cols);
  if (cluster > 1) {
    FERRY_CUDA_RETURN_IF_ERROR(LaunchClusterDependent(TopKClusterKernel, dim3(static_cast<unsigned>(rows * cluster)),
                                                      dim3(kThreads), static_cast<unsigned>(cluster), st, scores,
                                                      cols, lengths, static_cast<int>(k), ids, counts));
    return absl::OkStatus();
  }
  FERRY_CUDA_RETURN_IF_ERROR(
      LaunchDependent(TopKKernel, static_cast<unsigned>(rows), kThreads, 0, st, scores, cols, lengths,
                      static_cast<int>(k), ids, counts));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
