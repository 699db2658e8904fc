// Selection ops: indexer scores, top-k, routing, argmax.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/ops.h"

namespace ferry::kernels::cpu {
namespace {

// Strict "ranks before": larger value first, NaN last, ties toward the lower index.
inline bool RanksBefore(float va, int32_t a, float vb, int32_t b) {
  const bool na = std::isnan(va), nb = std::isnan(vb);
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return a < b;
}

}  // namespace

void IndexerScoresRow(const float* qi, const float* w, int64_t heads, int64_t dim, const float* keys,
                      int64_t stride, int64_t n_keys, float scale, float* scores) {
  for (int64_t s = 0; s < n_keys; ++s) {
    const float* k = keys + s * stride;
    float acc = 0.0f;
    for (int64_t h = 0; h < heads; ++h) {
      const float d = Dot(qi + h * dim, k, dim) * scale;
      acc += w[h] * (d > 0.0f ? d : 0.0f);
    }
    scores[s] = acc;
  }
}

std::vector<int32_t> TopKIndices(const float* scores, int64_t n, int64_t k) {
  k = std::min(k, n);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  if (k <= 0) return {};
  auto cmp = [scores](int32_t a, int32_t b) { return RanksBefore(scores[a], a, scores[b], b); };
  if (k < n) std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), cmp);
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

void RouteRow(const float* logits, const float* bias, const RoutingParams& p, int32_t* experts,
              float* weights) {
  const int64_t E = p.n_experts;
  std::vector<float> s(static_cast<size_t>(E)), choice(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    s[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    choice[e] = s[e] + (bias ? bias[e] : 0.0f);
  }
  if (p.n_group > 1 && p.topk_group < p.n_group) {
    const int64_t per = E / p.n_group;
    std::vector<float> group_score(static_cast<size_t>(p.n_group));
    for (int64_t g = 0; g < p.n_group; ++g) {
      std::vector<int32_t> top2 = TopKIndices(choice.data() + g * per, per, 2);
      group_score[g] = choice[g * per + top2[0]] + choice[g * per + top2[1]];
    }
    std::vector<int32_t> kept = TopKIndices(group_score.data(), p.n_group, p.topk_group);
    std::vector<bool> keep(static_cast<size_t>(p.n_group), false);
    for (int32_t g : kept) keep[g] = true;
    for (int64_t e = 0; e < E; ++e) {
      if (!keep[e / per]) choice[e] = -INFINITY;
    }
  }
  std::vector<int32_t> picked = TopKIndices(choice.data(), E, p.top_k);
  float sum = 0.0f;
  for (int32_t e : picked) sum += s[e];
  for (size_t i = 0; i < picked.size(); ++i) {
    experts[i] = picked[i];
    float w = s[picked[i]];
    if (p.norm_topk_prob) w /= (sum + 1e-20f);
    weights[i] = w * p.routed_scaling_factor;
  }
}

int32_t ArgMax(const float* logits, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (RanksBefore(logits[i], static_cast<int32_t>(i), logits[best], best)) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace ferry::kernels::cpu
