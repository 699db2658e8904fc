// Token sampling on the CPU: greedy, temperature, top-k, top-p (step/sampling.h applies a
// request's parameters through it: this is the one place the choice is made).
#pragma once

#include <cstdint>
#include <random>

namespace ferry::kernels::cpu {

// Picks a token from logits [vocab]. Greedy ignores `rng`. Otherwise: softmax(logits / T) in
// float64 over the top_k largest (ties to the lower id), then the smallest prefix, in descending
// probability, whose mass reaches top_p, renormalised; one uniform draw from `rng` picks.
// REQUIRES: vocab >= 1. NaN logits are never picked unless every logit is NaN (then id 0).
int32_t SampleToken(const float* logits, int64_t vocab, float temperature, int32_t top_k, float top_p,
                    std::mt19937_64& rng);

}  // namespace ferry::kernels::cpu
