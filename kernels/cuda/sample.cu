// Sampling on the device (SampleRows in ops.h): a cluster of kCluster blocks of 1024 threads per
// row, each block on its slice of the row, the CPU's cpu::SampleRow step by step without sorting
// the vocabulary. The blocks combine what they find through distributed shared memory (each reads
// the others' partial sums, maxima and histograms in rank order, so every block reaches the same
// result, run after run).
//
// Every selection the CPU makes by walking the sorted row (the top_k-th token, the end of the
// top_p prefix, the token the draw lands on) is "the first element, in the row's order, whose
// running weight reaches a target" (weight 1 for top_k, the tempered probability otherwise). The
// cluster finds it as a radix select over the elements' 64-bit order keys (rank.cuh RankKey:
// value, then the lower id first): eight bits a pass from the top, each pass a histogram of the
// weight and count of the elements still in play (each block its slice's, summed across the
// cluster), walked in descending order to the bucket where the running weight crosses; a bucket
// of one element ends it early (most rows take 3 to 4 passes).
// Weights are the CPU's (expf in float32) summed in float64 as there; only the order of those
// sums (and expf's last bits) differ, so a pick can differ from the CPU's only where the draw
// falls within rounding of a boundary.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rank.cuh"

namespace ferry::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kCluster = 8;  // blocks a row (the portable cluster size)
constexpr int kWarps = kThreads / 32;
constexpr int kBuckets = 256;
constexpr unsigned kFull = 0xffffffffu;
static_assert(kWarps == 32, "block reductions give one warp's result to each lane");
static_assert(kBuckets == 32 * 8, "the bucket walk gives each lane of a warp 8 buckets");

struct Smem {
  double w[kBuckets];                  // a pass's histogram: weight,
  unsigned long long top[kBuckets];    // largest key,
  int count[kBuckets];                 // and elements of each bucket
  double lane_w[kWarps][32];           // a warp's elements of one iteration, for its bucket leaders
  unsigned long long lane_key[kWarps][32];
  double red_d[kWarps];
  Ranked red_best[kWarps];
  int red_bad[kWarps];
  unsigned long long prefix;  // a select's pass result: the key bits fixed so far,
  double target;              // the weight left to cross within them,
  unsigned long long found;   // the element when its bucket held it alone (0: none yet)
  unsigned long long top_keys[kMaxTopLogprobs];  // the most likely tokens' keys in this slice
  int n_top;
  double part_d;     // this block's part of a cluster reduction
  Ranked part_best;
  int part_bad;
};

// This block's slice of its row: elements [lo, hi) (lo a multiple of 4, for 16-byte loads).
struct Slice {
  const float* row;
  int64_t lo, hi;
};

__device__ __forceinline__ Slice SliceOf(const float* row, int64_t vocab, unsigned rank) {
  const int64_t chunk = ((vocab + kCluster - 1) / kCluster + 3) / 4 * 4;
  const int64_t lo = min(vocab, static_cast<int64_t>(rank) * chunk);
  return Slice{row, lo, min(vocab, lo + chunk)};
}

// An element's weight in a select: 1 (counting), or its tempered probability before
// normalisation, expf((v - max) * (1 / T)) as cpu::SampleToken computes it.
struct Weight {
  bool unit;
  float inv_t, max;
  __device__ __forceinline__ double operator()(float v) const {
    return unit ? 1.0 : static_cast<double>(expf((v - max) * inv_t));
  }
};

__device__ __forceinline__ double BlockSum(double v, Smem& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFull, v, off);
  if (lane == 0) sm.red_d[warp] = v;
  __syncthreads();
  double t = sm.red_d[lane];
  for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(kFull, t, off);
  __syncthreads();
  return t;
}

// The sum of v over the cluster's threads, in every thread: each block's sum, then the blocks'
// sums in rank order.
__device__ double ClusterSum(double v, Smem& sm, cg::cluster_group& cluster) {
  const double mine = BlockSum(v, sm);
  if (threadIdx.x == 0) sm.part_d = mine;
  cluster.sync();
  double total = 0.0;
  for (unsigned r = 0; r < kCluster; ++r) total += cluster.map_shared_rank(&sm, r)->part_d;
  cluster.sync();  // every block has read the parts before any writes another
  return total;
}

__device__ __forceinline__ int32_t IdOf(unsigned long long key) {
  return static_cast<int32_t>(~static_cast<uint32_t>(key));
}

// Calls f(in_row, i, v) for this thread's share of the slice (i the index in the row): 16-byte
// loads of four elements, two in flight (a pass is bound by load latency otherwise), then the
// tail. Every lane of a warp makes the same calls (in_row false past the end, v then 0), so f may
// use warp-wide intrinsics.
template <class F>
__device__ __forceinline__ void ForEachInRow(const Slice& slice, F&& f) {
  const float* row = slice.row + slice.lo;
  const int64_t vocab = slice.hi - slice.lo, base = slice.lo;
  const bool vec = (reinterpret_cast<uintptr_t>(row) & 15) == 0;
  const int64_t groups = vec ? vocab / 4 : 0;
  const int64_t span = (groups + 2 * kThreads - 1) / (2 * kThreads) * (2 * kThreads);
  const float4* quads = reinterpret_cast<const float4*>(row);
  for (int64_t g0 = threadIdx.x; g0 < span; g0 += 2 * kThreads) {
    const int64_t g1 = g0 + kThreads;
    const bool in0 = g0 < groups, in1 = g1 < groups;
    const float4 a = in0 ? quads[g0] : float4{0.0f, 0.0f, 0.0f, 0.0f};
    const float4 b = in1 ? quads[g1] : float4{0.0f, 0.0f, 0.0f, 0.0f};
    f(in0, base + 4 * g0, a.x);
    f(in0, base + 4 * g0 + 1, a.y);
    f(in0, base + 4 * g0 + 2, a.z);
    f(in0, base + 4 * g0 + 3, a.w);
    f(in1, base + 4 * g1, b.x);
    f(in1, base + 4 * g1 + 1, b.y);
    f(in1, base + 4 * g1 + 2, b.z);
    f(in1, base + 4 * g1 + 3, b.w);
  }
  const int64_t rest = vocab - 4 * groups;
  const int64_t rest_span = (rest + kThreads - 1) / kThreads * kThreads;
  for (int64_t t = threadIdx.x; t < rest_span; t += kThreads) {
    const bool in = t < rest;
    f(in, base + 4 * groups + t, in ? row[4 * groups + t] : 0.0f);
  }
}

// The sum of the weights of the row's elements with key >= floor (every key of a number is > 0).
__device__ double WeightAbove(const Slice& slice, unsigned long long floor, Weight wf, Smem& sm,
                              cg::cluster_group& cluster) {
  double s = 0.0;
  ForEachInRow(slice, [&](bool in_row, int64_t i, float v) {
    if (in_row && RankKey(v, static_cast<int32_t>(i)) >= floor) s += wf(v);
  });
  return ClusterSum(s, sm, cluster);
}

// Walking the row's elements with key >= floor in descending key order: the first whose running
// weight reaches `target` (exceeds it when `strict`), or the last when none does (rounding).
// Returns its key. REQUIRES: at least one element with key >= floor. Cluster-uniform call: each
// block histograms its slice; every block's warp 0 walks the sum of the cluster's histograms.
__device__ unsigned long long Select(const Slice& slice, unsigned long long floor, Weight wf, double target,
                                     bool strict, Smem& sm, cg::cluster_group& cluster) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned long long prefix = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = tid; b < kBuckets; b += kThreads) {
      sm.w[b] = 0.0;
      sm.top[b] = 0;
      sm.count[b] = 0;
    }
    __syncthreads();
    const unsigned long long high = shift == 56 ? 0ull : ~0ull << (shift + 8);
    ForEachInRow(slice, [&](bool in_row, int64_t i, float v) {
      const unsigned long long key = in_row ? RankKey(v, static_cast<int32_t>(i)) : 0;
      const bool in = in_row && key >= floor && (key & high) == prefix;
      const unsigned active = __ballot_sync(kFull, in);
      if (active == 0) return;
      const unsigned digit = in ? static_cast<unsigned>(key >> shift) & 255u : 0u;
      const double w = in ? wf(v) : 0.0;
      const unsigned first = __shfl_sync(kFull, digit, __ffs(active) - 1);
      if (__all_sync(kFull, !in || digit == first)) {
        // Every element in play shares one bucket (the common case in a pass's hot buckets): a
        // warp-wide sum and max, one atomic each.
        double s = w;
        unsigned long long most = in ? key : 0;
        for (int off = 16; off > 0; off >>= 1) {
          s += __shfl_xor_sync(kFull, s, off);
          const unsigned long long o = __shfl_xor_sync(kFull, most, off);
          most = o > most ? o : most;
        }
        if (lane == 0) {
          atomicAdd(&sm.w[first], s);
          atomicAdd(&sm.count[first], __popc(active));
          atomicMax(&sm.top[first], most);
        }
        return;
      }
      if (!in) return;
      // Several buckets: each bucket's lowest lane sums its peers' weights.
      const unsigned peers = __match_any_sync(active, digit);
      sm.lane_w[warp][lane] = w;
      sm.lane_key[warp][lane] = key;
      __syncwarp(active);
      if (lane == __ffs(peers) - 1) {
        double s = 0.0;
        unsigned long long most = 0;
        for (unsigned m = peers; m != 0; m &= m - 1) {
          const int j = __ffs(m) - 1;
          s += sm.lane_w[warp][j];
          most = sm.lane_key[warp][j] > most ? sm.lane_key[warp][j] : most;
        }
        atomicAdd(&sm.w[digit], s);
        atomicAdd(&sm.count[digit], __popc(peers));
        atomicMax(&sm.top[digit], most);
      }
      __syncwarp(active);
    });
    cluster.sync();  // every block's histogram is complete
    if (warp == 0) {
      // The cluster's histogram: the blocks' buckets summed in rank order (so every block walks
      // the same numbers).
      Smem* parts[kCluster];
      for (unsigned r = 0; r < kCluster; ++r) parts[r] = cluster.map_shared_rank(&sm, r);
      auto weight_of = [&](int b) {
        double t = 0.0;
        for (unsigned r = 0; r < kCluster; ++r) t += parts[r]->w[b];
        return t;
      };
      auto count_of = [&](int b) {
        int t = 0;
        for (unsigned r = 0; r < kCluster; ++r) t += parts[r]->count[b];
        return t;
      };
      auto top_of = [&](int b) {
        unsigned long long t = 0;
        for (unsigned r = 0; r < kCluster; ++r) t = parts[r]->top[b] > t ? parts[r]->top[b] : t;
        return t;
      };
      // Lane l holds buckets 255 - 8l down to 248 - 8l: a scan over lanes, then the crossing
      // lane walks its eight.
      double w8[8];
      int c8[8];
      double own = 0.0;
      int own_count = 0;
      for (int j = 0; j < 8; ++j) {
        w8[j] = weight_of(255 - 8 * lane - j);
        c8[j] = count_of(255 - 8 * lane - j);
        own += w8[j];
        own_count += c8[j];
      }
      double incl = own;
      for (int off = 1; off < 32; off <<= 1) {
        const double y = __shfl_up_sync(kFull, incl, off);
        if (lane >= off) incl += y;
      }
      double excl = __shfl_up_sync(kFull, incl, 1);
      if (lane == 0) excl = 0.0;
      const unsigned hits = __ballot_sync(kFull, own_count > 0 && (strict ? incl > target : incl >= target));
      const unsigned nonempty = __ballot_sync(kFull, own_count > 0);
      const bool last = hits == 0;  // none crosses: take the last element (the lowest key)
      const int walker = last ? 31 - __clz(nonempty) : __ffs(hits) - 1;
      if (nonempty == 0 && lane == 0) {
        sm.prefix = prefix;
        sm.found = prefix == 0 ? 1 : prefix;  // nothing in play (a broken REQUIRES): stop
      }
      if (nonempty != 0 && lane == walker) {
        double cum = excl, cum_before = excl;
        int pick_j = -1, last_j = -1;
        for (int j = 0; j < 8; ++j) {
          if (c8[j] == 0) continue;
          if (!last && (strict ? cum + w8[j] > target : cum + w8[j] >= target)) {
            pick_j = j;
            cum_before = cum;
            break;
          }
          last_j = j;
          cum_before = cum;
          cum += w8[j];
        }
        if (pick_j < 0) pick_j = last_j;
        const int pick = 255 - 8 * lane - pick_j;
        sm.prefix = prefix | (static_cast<unsigned long long>(pick) << shift);
        sm.target = last ? INFINITY : target - cum_before;
        sm.found = c8[pick_j] == 1 ? top_of(pick) : 0;
      }
    }
    __syncthreads();
    prefix = sm.prefix;
    target = sm.target;
    const unsigned long long found = sm.found;
    cluster.sync();  // no block clears its histogram while another still reads it
    if (found != 0) return found;
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads)
    SampleKernel(const float* __restrict__ logits, int64_t vocab, const RowSampler* __restrict__ samplers,
                 SampledToken* __restrict__ out) {
  PdlLaunchDependents();
  PdlWait();
  __shared__ Smem sm;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t r = blockIdx.x / kCluster;
  const float* row = logits + r * vocab;
  const Slice slice = SliceOf(row, vocab, rank);
  const RowSampler s = samplers[r];
  SampledToken& o = out[r];
  const bool writer = rank == 0 && tid == 0;

  // The argmax, and whether the row is fit to sample from.
  Ranked best{0.0f, -1};
  int bad = 0;
  ForEachInRow(slice, [&](bool in_row, int64_t i, float v) {
    if (!in_row) return;
    bad |= isnan(v) || v == INFINITY;
    best = Better(best, Ranked{v, static_cast<int32_t>(i)});
  });
  best = WarpBest(best);
  bad = __any_sync(kFull, bad);
  if (lane == 0) {
    sm.red_best[warp] = best;
    sm.red_bad[warp] = bad;
  }
  __syncthreads();
  best = WarpBest(sm.red_best[lane]);
  bad = __any_sync(kFull, sm.red_bad[lane]);
  if (tid == 0) {
    sm.part_best = best;
    sm.part_bad = bad;
  }
  cluster.sync();
  for (unsigned k = 0; k < kCluster; ++k) {
    const Smem* part = cluster.map_shared_rank(&sm, k);
    best = Better(best, part->part_best);
    bad |= part->part_bad;
  }
  cluster.sync();  // the parts are read before any block writes its next one
  if (bad || best.v == -INFINITY) {
    if (writer) {
      o.token = -1;
      o.n_top = 0;
    }
    return;
  }

  int32_t token = best.i;
  if (s.temperature > 0.0f) {
    unsigned long long floor = 0;  // below every number's key
    if (s.top_k > 0 && s.top_k < vocab) {
      floor = Select(slice, 0, Weight{true, 0.0f, 0.0f}, static_cast<double>(s.top_k), false, sm, cluster);
    }
    const Weight prob{false, 1.0f / s.temperature, best.v};
    double mass = WeightAbove(slice, floor, prob, sm, cluster);
    if (s.top_p < 1.0f) {
      floor = Select(slice, floor, prob, static_cast<double>(s.top_p) * mass, false, sm, cluster);
      mass = WeightAbove(slice, floor, prob, sm, cluster);
    }
    token = IdOf(Select(slice, floor, prob, s.uniform * mass, true, sm, cluster));
  }
  if (s.top_logprobs < 0) {
    if (writer) {
      o.token = token;
      o.n_top = 0;
    }
    return;
  }

  // log_softmax at temperature 1: v - (max + log sum expf(v - max)), summed in float64.
  double e = 0.0;
  ForEachInRow(slice, [&](bool in_row, int64_t, float v) {
    if (in_row) e += static_cast<double>(expf(v - best.v));
  });
  const double lse = static_cast<double>(best.v) + log(ClusterSum(e, sm, cluster));
  // The n most likely: the n-th's key by a counting select, then every key at or above it from
  // each slice, merged by rank 0.
  const int n = static_cast<int>(vocab < kMaxTopLogprobs ? min(static_cast<int64_t>(s.top_logprobs), vocab)
                                                         : min(s.top_logprobs, kMaxTopLogprobs));
  if (n > 0) {
    const unsigned long long nth =
        Select(slice, 0, Weight{true, 0.0f, 0.0f}, static_cast<double>(n), false, sm, cluster);
    if (tid == 0) sm.n_top = 0;
    __syncthreads();
    ForEachInRow(slice, [&](bool in_row, int64_t i, float v) {
      if (!in_row || RankKey(v, static_cast<int32_t>(i)) < nth) return;
      const int slot = atomicAdd(&sm.n_top, 1);
      if (slot < kMaxTopLogprobs) sm.top_keys[slot] = RankKey(v, static_cast<int32_t>(i));  // distinct: n
    });
    cluster.sync();
    if (writer) {
      unsigned long long keys[kMaxTopLogprobs];
      int got = 0;
      for (unsigned k = 0; k < kCluster; ++k) {
        const Smem* part = cluster.map_shared_rank(&sm, k);
        for (int j = 0; j < min(part->n_top, kMaxTopLogprobs) && got < kMaxTopLogprobs; ++j) {
          keys[got++] = part->top_keys[j];
        }
      }
      for (int a = 1; a < got; ++a) {  // at most 20: insertion sort, descending
        const unsigned long long k = keys[a];
        int b = a;
        for (; b > 0 && keys[b - 1] < k; --b) keys[b] = keys[b - 1];
        keys[b] = k;
      }
      for (int j = 0; j < n && j < got; ++j) {
        o.top_ids[j] = IdOf(keys[j]);
        o.top_logprobs[j] = static_cast<float>(static_cast<double>(row[IdOf(keys[j])]) - lse);
      }
    }
    cluster.sync();  // rank 0 has read every slice's keys before any block exits
  }
  if (writer) {
    o.token = token;
    o.logprob = static_cast<float>(static_cast<double>(row[token]) - lse);
    o.n_top = n;
  }
}

}  // namespace

absl::Status SampleRows(const float* logits, int64_t rows, int64_t vocab, const RowSampler* samplers,
                        SampledToken* out, void* stream) {
  if (rows < 0 || rows > 0x7fffffff || vocab < 1 || vocab > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("SampleRows: rows ", rows, ", vocab ", vocab,
                                                   " (need 0 <= rows, 1 <= vocab, each <= 2^31 - 1)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (logits == nullptr || samplers == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("SampleRows: null logits, samplers or out");
  }
  if (rows > 0x7fffffff / kCluster) {
    return absl::InvalidArgumentError(absl::StrCat("SampleRows: rows ", rows, " (at most ", 0x7fffffff / kCluster, ")"));
  }
  // A cluster of kCluster blocks a row, allowed to begin before the kernel before it ends (PDL).
  FERRY_CUDA_RETURN_IF_ERROR(LaunchClusterDependent(SampleKernel, dim3(static_cast<unsigned>(rows * kCluster)),
                                                    dim3(kThreads), kCluster, static_cast<cudaStream_t>(stream), logits,
                                                    vocab, samplers, out));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
