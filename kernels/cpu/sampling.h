// Token sampling on the CPU: greedy, temperature, top-k, top-p. The coordinator samples once a
// step and every rank takes its token, so this is the one place the choice is made.
#pragma once

#include <cstdint>
#include <random>

namespace ferry::kernels::cpu {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy (argmax, ties to the lower id)
  int32_t top_k = 0;         // 0: no limit
  float top_p = 1.0f;        // in (0, 1]; 1: no limit
};

// Picks a token from logits [vocab]. Greedy ignores `rng`. Otherwise: softmax(logits / T) in
// float64 over the top_k largest (ties to the lower id), then the smallest prefix, in descending
// probability, whose mass reaches top_p, renormalised; one uniform draw from `rng` picks.
// REQUIRES: vocab >= 1. NaN logits are never picked unless every logit is NaN (then id 0).
int32_t SampleToken(const float* logits, int64_t vocab, const SamplingParams& p, std::mt19937_64& rng);

}  // namespace ferry::kernels::cpu
