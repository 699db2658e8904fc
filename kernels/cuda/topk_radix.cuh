// The block-wide building blocks of TopK (topk.cu, whose file comment describes the algorithm):
// the order-preserving key of a score, the shared state of a block of kThreads, the 2048-bin
// digit search, and the general path over a row in global memory (RadixSelect: three radix
// passes; Compact: the ordered write of the taken elements). Included by topk.cu alone, inside its
// anonymous namespace.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 1024, kWarps = kThreads / 32;  // kWarps <= 32: warp 0 scans the warps' counts
constexpr int kUnroll = 16;                            // loads in flight a thread in a histogram pass
constexpr int kPerLane = 16;                            // Compact: elements a lane a chunk
constexpr int kSpan = 32 * kPerLane;                    // a warp's contiguous elements a chunk
constexpr int64_t kChunk = int64_t{kWarps} * kSpan;
constexpr unsigned kFull = 0xffffffffu;
// Histogram bins are stored one word apart every 32 (bin b at Slot(b)): fewer bank conflicts
// where a warp's lanes read bins 2 apart (FindDigit).
constexpr int kHistWords = (1 << 11) + (1 << 11) / 32;
__device__ __forceinline__ int Slot(int bin) { return bin + (bin >> 5); }

// Order-preserving key: a > b in the selection order (by value) iff Key(a) > Key(b). NaN maps
// to 0, below every number (-inf maps to 0x007fffff); -0 maps like +0.
__device__ __forceinline__ uint32_t Key(float x) {
  if (isnan(x)) return 0u;
  if (x == 0.0f) return 0x80000000u;  // +0 and -0
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ int WarpInclusiveSum(int v, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int t = __shfl_up_sync(kFull, v, off);
    if (lane >= off) v += t;
  }
  return v;
}

// The block's shared state.
struct Shared {
  int hist[kHistWords];
  int digit, need, count;
  int warp_take[kWarps], warp_out[kWarps];
  int chunk_taken;
  int warp_eq[kWarps], warp_eq_before[kWarps];
  int chunk_equal;
  uint32_t warp_or[kWarps], warp_and[kWarps];
};

// The highest bin b of the 2048-bin histogram where the count of keys in bins >= b reaches `need`
// (<= the total), into sh->digit, with how many of bin b's keys are still needed (sh->need) and
// its count (sh->count); the histogram is left zeroed. Block-wide, one barrier inside; the
// caller's barrier must come between the histogram's last update and this, and between this and
// reading the answer. Thread t holds kBinsThread bins counting down from 2047 - kBinsThread t
// (and clears them once read: each bin has one reader); a scan over the threads (warp sums, then
// every warp scans the warps' totals) gives each the count above its bins, and the one whose bins
// cross `need` writes the answer.
__device__ void FindDigit(Shared* sh, int need) {
  constexpr int kBinsThread = 2048 / kThreads;
  static_assert(kBinsThread * kThreads == 2048 && kWarps == 32, "whole bins a thread, a lane a warp");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int top = 2047 - kBinsThread * tid;
  int c[kBinsThread], sum = 0;
#pragma unroll
  for (int q = 0; q < kBinsThread; ++q) {
    sum += (c[q] = sh->hist[Slot(top - q)]);
    sh->hist[Slot(top - q)] = 0;
  }
  const int incl = WarpInclusiveSum(sum, lane);
  if (lane == 31) sh->warp_take[warp] = incl;
  __syncthreads();
  const int w = sh->warp_take[lane], w_incl = WarpInclusiveSum(w, lane);
  int above = __shfl_sync(kFull, w_incl - w, warp) + incl - sum;
  if (above < need && need <= above + sum) {
#pragma unroll
    for (int q = 0; q < kBinsThread; ++q) {
      if (above + c[q] >= need) {
        sh->digit = top - q;
        sh->need = need - above;
        sh->count = c[q];
        break;
      }
      above += c[q];
    }
  }
}

// The keys of a row of scores, read through the non-coherent cache.
struct KeySource {
  const float* row;
  __device__ __forceinline__ uint32_t operator()(int64_t i) const { return Key(__ldg(row + i)); }
};

// One radix pass over keys src(i), i < n: the histogram of the 11 bits from `shift` of the keys
// whose bits under `mask` equal `prefix`, then FindDigit. Warp-aggregated where it pays: a row's
// scores share their top bits, so a warp's lanes mostly fall in one or two bins, and atomics of
// 32 lanes on one bin serialize: the bin of the first lane with one, then of the first lane
// left, add their counts once; the rest add one each. Every lane runs the block's trip count, so
// all reach the full-mask ballots (lanes past n or off the prefix carry bin -1).
__device__ void RadixPass(KeySource src, int64_t n, uint32_t prefix, uint32_t mask, int shift, int need, Shared* sh) {
  const int tid = threadIdx.x, lane = tid & 31;
  for (int b = tid; b < kHistWords; b += kThreads) sh->hist[b] = 0;
  __syncthreads();
  auto count = [&](int64_t i, uint32_t key) {
    const int bin = i < n && (key & mask) == prefix ? static_cast<int>((key >> shift) & 2047u) : -1;
    unsigned left = __ballot_sync(kFull, bin >= 0);
#pragma unroll
    for (int round = 0; round < 2; ++round) {
      if (left == 0u) break;
      const int leader = __ffs(left) - 1, lead_bin = __shfl_sync(kFull, bin, leader);
      const unsigned same = __ballot_sync(kFull, bin == lead_bin) & left;
      if (lane == leader) atomicAdd(&sh->hist[Slot(lead_bin)], __popc(same));
      left &= ~same;
    }
    if ((left >> lane) & 1u) atomicAdd(&sh->hist[Slot(bin)], 1);
  };
  // Whole rounds of kUnroll loads a thread, then the rest one element a thread at a time (short
  // rows and the candidates would otherwise run mostly empty unrolled bodies).
  int64_t base = 0;
  for (; base + int64_t{kThreads} * kUnroll <= n; base += int64_t{kThreads} * kUnroll) {
    uint32_t key[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) key[u] = src(base + u * kThreads + tid);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) count(base + u * kThreads + tid, key[u]);
  }
  for (; base < n; base += kThreads) {
    const int64_t i = base + tid;
    count(i, i < n ? src(i) : 0u);
  }
  __syncthreads();
  FindDigit(sh, need);
  __syncthreads();
}

// The key of the `need`-th largest of src(i), i < n (1 <= need <= n), and into *need_equal how
// many keys equal to it are among the `need` largest: bits 31..21, 20..10, then 9..0 (the last
// pass's bins also hold bit 10, which the second pass fixed: they fall in one half)
__device__ uint32_t RadixSelect(KeySource src, int64_t n, int need, Shared* sh, int* need_equal) {
  uint32_t t = 0u, mask = 0u;
#pragma unroll 1
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
    RadixPass(src, n, t, mask, shift, need, sh);
    t |= static_cast<uint32_t>(sh->digit) << shift;
    mask |= (pass == 2 ? 1023u : 2047u) << shift;
    need = sh->need;
  }
  *need_equal = need;
  __syncthreads();  // sh->digit and sh->need are rewritten by the next select
  return t;
}

// Walks keys src(i), i < n, in ascending i and writes each element taken (key > t, or key == t
// and fewer than `need` equal keys before it) as out[pos] = i, pos its rank among the taken ones.
__device__ void Compact(KeySource src, int64_t n, uint32_t t, int need, int32_t* out, Shared* sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned lanes_before = (1u << lane) - 1u;
  int64_t taken = 0;
  int equal_seen = 0;
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    // Lane l holds elements w0 + 32 j + l (j < kPerLane) of the warp's span.
    const int64_t w0 = c0 + int64_t{warp} * kSpan;
    uint32_t key[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t i = w0 + 32 * j + lane;
      key[j] = i < n ? src(i) : 0u;
    }
    // (Past n the keys are 0 and marked neither above nor equal.)
    uint32_t gt = 0u, eq = 0u;  // bit j: element j of this lane is above t / equal to it
    int gt_w = 0, eq_w = 0;
#pragma unroll
    for (int j = 0; j < kPerLane && w0 < n; ++j) {  // (w0 < n: warps past the end skip)
      const bool in = w0 + 32 * j + lane < n;
      const bool g = in && key[j] > t, e = in && key[j] == t;
      gt_w += __popc(__ballot_sync(kFull, g));
      eq_w += __popc(__ballot_sync(kFull, e));
      gt |= (g ? 1u : 0u) << j;
      eq |= (e ? 1u : 0u) << j;
    }
    if (lane == 0) {
      sh->warp_take[warp] = gt_w;
      sh->warp_eq[warp] = eq_w;
    }
    __syncthreads();
    if (warp == 0) {
      // Warp `lane`'s equal keys before it, how many of its own it takes, where it writes.
      const int g = lane < kWarps ? sh->warp_take[lane] : 0, e = lane < kWarps ? sh->warp_eq[lane] : 0;
      const int e_incl = WarpInclusiveSum(e, lane);
      const int e_taken = min(max(need - (equal_seen + e_incl - e), 0), e);
      const int t_incl = WarpInclusiveSum(g + e_taken, lane);
      if (lane < kWarps) {
        sh->warp_out[lane] = t_incl - (g + e_taken);
        sh->warp_eq_before[lane] = equal_seen + e_incl - e;
      }
      if (lane == 31) {
        sh->chunk_taken = t_incl;
        sh->chunk_equal = e_incl;
      }
    }
    __syncthreads();
    if (__any_sync(kFull, (gt | eq) != 0u)) {
      int64_t pos = taken + sh->warp_out[warp];
      int eq_rank = sh->warp_eq_before[warp];
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const bool g = (gt >> j) & 1u, e = (eq >> j) & 1u;
        const unsigned eb = __ballot_sync(kFull, e);
        const bool take = g || (e && eq_rank + __popc(eb & lanes_before) < need);
        const unsigned tb = __ballot_sync(kFull, take);
        if (take) out[pos + __popc(tb & lanes_before)] = static_cast<int32_t>(w0 + 32 * j + lane);
        pos += __popc(tb);
        eq_rank += __popc(eb);
      }
    }
    taken += sh->chunk_taken;
    equal_seen += sh->chunk_equal;
    __syncthreads();  // the warp tables and chunk counts are rewritten by the next chunk
  }
}

}  // namespace
}  // namespace ferry::kernels::cuda
