#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/ops.h"

namespace ferry::kernels::cpu {

int32_t SampleToken(const float* logits, int64_t vocab, float temperature, int32_t top_k, float top_p,
                    std::mt19937_64& rng) {
  if (temperature <= 0.0f) return ArgMax(logits, vocab);
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isnan(logits[i])) order.push_back(static_cast<int32_t>(i));
  }
  if (order.empty()) return 0;
  std::stable_sort(order.begin(), order.end(), [logits](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (top_k > 0 && static_cast<size_t>(top_k) < order.size()) order.resize(static_cast<size_t>(top_k));
  const double inv_t = 1.0 / static_cast<double>(temperature);
  const double top = static_cast<double>(logits[order[0]]) * inv_t;
  std::vector<double> prob(order.size());
  double sum = 0.0;
  for (size_t i = 0; i < order.size(); ++i) {
    prob[i] = std::exp(static_cast<double>(logits[order[i]]) * inv_t - top);
    sum += prob[i];
  }
  size_t keep = order.size();
  if (top_p < 1.0f) {
    double mass = 0.0;
    for (size_t i = 0; i < order.size(); ++i) {
      mass += prob[i] / sum;
      if (mass >= static_cast<double>(top_p)) {
        keep = i + 1;
        break;
      }
    }
  }
  const double total = std::accumulate(prob.begin(), prob.begin() + static_cast<long>(keep), 0.0);
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += prob[i];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

}  // namespace ferry::kernels::cpu
