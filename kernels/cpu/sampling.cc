#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/ops.h"

namespace ferry::kernels::cpu {

int32_t SampleToken(const float* logits, int64_t vocab, float temperature, int32_t top_k, float top_p,
                    double uniform) {
  if (temperature <= 0.0f) return ArgMax(logits, vocab);
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isnan(logits[i])) order.push_back(static_cast<int32_t>(i));
  }
  if (order.empty()) return 0;
  std::stable_sort(order.begin(), order.end(), [logits](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (top_k > 0 && static_cast<size_t>(top_k) < order.size()) order.resize(static_cast<size_t>(top_k));
  // Tempered probabilities before normalisation, expf((logit - max) / T) in float32, summed in
  // float64 (the device sampler computes the same).
  const float inv_t = 1.0f / temperature, max = logits[order[0]];
  std::vector<double> prob(order.size());
  double sum = 0.0;
  for (size_t i = 0; i < order.size(); ++i) {
    prob[i] = static_cast<double>(std::exp((logits[order[i]] - max) * inv_t));
    sum += prob[i];
  }
  size_t keep = order.size();
  if (top_p < 1.0f) {
    // The smallest prefix whose running mass reaches top_p of the whole.
    const double target = static_cast<double>(top_p) * sum;
    double mass = 0.0;
    for (size_t i = 0; i < order.size(); ++i) {
      mass += prob[i];
      if (mass >= target) {
        keep = i + 1;
        break;
      }
    }
  }
  const double total = std::accumulate(prob.begin(), prob.begin() + static_cast<long>(keep), 0.0);
  const double u = uniform * total;
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += prob[i];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

SampledToken SampleRow(const float* logits, int64_t vocab, const RowSampler& s) {
  SampledToken out;
  float max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    const float v = logits[i];
    if (std::isnan(v) || v == INFINITY) return out;
    max = std::max(max, v);
  }
  if (max == -INFINITY) return out;
  out.token = SampleToken(logits, vocab, s.temperature, s.top_k, s.top_p, s.uniform);
  if (s.top_logprobs < 0) return out;
  // log_softmax = logit - (max + log sum expf(logit - max)), summed in float64.
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += static_cast<double>(std::exp(logits[i] - max));
  const double lse = static_cast<double>(max) + std::log(sum);
  out.logprob = static_cast<float>(static_cast<double>(logits[out.token]) - lse);
  out.n_top = static_cast<int32_t>(std::min<int64_t>({s.top_logprobs, kMaxTopLogprobs, vocab}));
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + out.n_top, ids.end(), [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int32_t j = 0; j < out.n_top; ++j) {
    out.top_ids[j] = ids[static_cast<size_t>(j)];
    out.top_logprobs[j] = static_cast<float>(static_cast<double>(logits[ids[static_cast<size_t>(j)]]) - lse);
  }
  return out;
}

}  // namespace ferry::kernels::cpu
