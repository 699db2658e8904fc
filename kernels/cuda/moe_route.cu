// Sigmoid MoE routing with bias, groups and top-k (MoeRoute in ops.h): one block per row, a thread
// an expert.
//
// The top-k is a rank count under the CPU's strict total order (rank.cuh's RankKey): expert e is
// chosen when fewer than top_k experts rank before it, so the chosen set equals cpu::RouteRow's
// nth_element set whatever the ties (a single warp taking the best remaining expert top_k times
// was ~18 us a row: one warp cannot hide its own latencies). The group choice, small, stays on one
// warp. The weight sum runs over the chosen experts in ascending id, the CPU's order.
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rank.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kMaxExperts = 1024;
constexpr int kMaxGroups = 64;

__global__ void __launch_bounds__(kMaxExperts)
    MoeRouteKernel(const float* __restrict__ logits, const float* __restrict__ bias, int n_experts, int top_k,
                   int n_group, int topk_group, bool grouped, bool norm_topk_prob, float scaling,
                   int32_t* __restrict__ experts, float* __restrict__ weights) {
  PdlLaunchDependents();
  PdlWait();
  __shared__ float s[kMaxExperts], choice[kMaxExperts];
  __shared__ uint64_t key[kMaxExperts];
  __shared__ unsigned char picked[kMaxExperts];
  __shared__ int chosen[kMaxExperts];
  __shared__ float group_score[kMaxGroups];
  __shared__ unsigned char kept[kMaxGroups];
  const int64_t r = blockIdx.x;
  const int t = threadIdx.x, lane = t & 31;
  const float* x = logits + r * n_experts;
  if (t < n_experts) {
    s[t] = 1.0f / (1.0f + expf(-x[t]));
    choice[t] = s[t] + (bias != nullptr ? bias[t] : 0.0f);
  }
  __syncthreads();

  if (grouped) {
    if (t < 32) {
      // Group score = the sum of its two best biased scores (the CPU adds them in ascending id;
      // float addition is commutative, so the order of the two is immaterial).
      const int per = n_experts / n_group;
      for (int g = lane; g < n_group; g += 32) {
        Ranked b1{0.0f, -1}, b2{0.0f, -1};
        for (int e = g * per; e < (g + 1) * per; ++e) b1 = Better(b1, Ranked{choice[e], e});
        for (int e = g * per; e < (g + 1) * per; ++e) {
          if (e != b1.i) b2 = Better(b2, Ranked{choice[e], e});
        }
        group_score[g] = choice[b1.i] + choice[b2.i];
        kept[g] = 0;
      }
      __syncwarp();
      for (int k = 0; k < topk_group; ++k) {
        Ranked b{0.0f, -1};
        for (int g = lane; g < n_group; g += 32) {
          if (!kept[g]) b = Better(b, Ranked{group_score[g], g});
        }
        b = WarpBest(b);
        if (lane == 0) kept[b.i] = 1;
        __syncwarp();
      }
    }
    __syncthreads();
    if (t < n_experts && !kept[t / (n_experts / n_group)]) choice[t] = -INFINITY;
    __syncthreads();
  }

  if (t < n_experts) key[t] = RankKey(choice[t], t);
  __syncthreads();
  if (t < n_experts) {
    const uint64_t mine = key[t];
    int before = 0;
#pragma unroll 8
    for (int e = 0; e < n_experts; ++e) before += key[e] > mine ? 1 : 0;
    picked[t] = before < top_k ? 1 : 0;
  }
  __syncthreads();
  if (t >= 32) return;

  // The chosen ids in ascending order, gathered 32 experts a ballot, then the weight sum over them
  // in that order, as the CPU.
  int n = 0;
  for (int e0 = 0; e0 < n_experts; e0 += 32) {
    const int e = e0 + lane;
    const bool mine = e < n_experts && picked[e];
    const unsigned mask = __ballot_sync(0xffffffffu, mine);
    if (mine) chosen[n + __popc(mask & ((1u << lane) - 1u))] = e;
    n += __popc(mask);
  }
  __syncwarp();
  float sum = 0.0f;
  if (lane == 0) {
    for (int j = 0; j < n; ++j) sum += s[chosen[j]];
  }
  sum = __shfl_sync(0xffffffffu, sum, 0);
  int32_t* ex = experts + r * top_k;
  float* wt = weights + r * top_k;
  for (int j = lane; j < n; j += 32) {
    const int e = chosen[j];
    float w = s[e];
    if (norm_topk_prob) w /= (sum + 1e-20f);
    ex[j] = e;
    wt[j] = w * scaling;
  }
}

}  // namespace

absl::Status MoeRoute(const float* logits, const float* bias, int64_t rows, const cpu::RoutingParams& p,
                      int32_t* experts, float* weights, void* stream) {
  const int64_t E = p.n_experts;
  if (rows < 0 || rows > 0x7fffffff || E < 1 || E > kMaxExperts || p.top_k < 0 || p.top_k > E || p.n_group < 1) {
    return absl::InvalidArgumentError(absl::StrCat("MoeRoute: rows ", rows, ", n_experts ", E, ", top_k ", p.top_k,
                                                   ", n_group ", p.n_group, " (need 1 <= n_experts <= ", kMaxExperts,
                                                   ", 0 <= top_k <= n_experts, n_group >= 1)"));
  }
  const bool grouped = p.n_group > 1 && p.topk_group < p.n_group;
  if (grouped && (p.n_group > kMaxGroups || E % p.n_group != 0 || E / p.n_group < 2 || p.topk_group < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("MoeRoute: ", E, " experts in ", p.n_group, " groups, keeping ",
                                                   p.topk_group, " (need n_group <= ", kMaxGroups,
                                                   ", equal groups of >= 2 experts, topk_group >= 1)"));
  }
  if (rows == 0 || p.top_k == 0) return absl::OkStatus();
  if (logits == nullptr || experts == nullptr || weights == nullptr) {
    return absl::InvalidArgumentError("MoeRoute: null logits, experts or weights");
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MoeRouteKernel, static_cast<unsigned>(rows),
                                             static_cast<unsigned>((E + 31) / 32 * 32), 0,
                                             static_cast<cudaStream_t>(stream), logits, bias, static_cast<int>(E),
                                             static_cast<int>(p.top_k), static_cast<int>(p.n_group),
                                             static_cast<int>(p.topk_group), grouped, p.norm_topk_prob,
                                             p.routed_scaling_factor, experts, weights));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
