// How a request samples its tokens, as the coordinator receives it and the ranks apply it: the
// parameters, and the random stream of each position (so a token depends only on the request's
// seed and its position, whatever shares its step).
#pragma once

#include <cstdint>
#include <random>

namespace ferry::step {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy (argmax, ties to the lower id)
  int32_t top_k = 0;         // 0: no limit
  float top_p = 1.0f;        // in (0, 1]; 1: no limit
};

// The seed of the random stream that samples the token after `position` tokens of a request
// seeded `seed` (a splitmix64 step of the two).
uint64_t SamplingStreamSeed(uint64_t seed, int64_t position);

// Picks a token from logits [vocab] as kernels::cpu::SampleToken does with p's parameters.
int32_t SampleToken(const float* logits, int64_t vocab, const SamplingParams& p, std::mt19937_64& rng);

}  // namespace ferry::step
