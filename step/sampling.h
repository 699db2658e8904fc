// How a request samples its tokens, as the coordinator receives it and the ranks apply it: the
// parameters, the draw of each position (so a token depends only on the request's seed and its
// position, whatever shares its step), and what a sampled token brings back.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ferry::step {

// Most log-probabilities of likely tokens a request may ask for a position.
inline constexpr int32_t kMaxTopLogprobs = 20;

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy (argmax, ties to the lower id)
  int32_t top_k = 0;         // 0: no limit
  float top_p = 1.0f;        // in (0, 1]; 1: no limit
  // -1: no log-probabilities; n in [0, kMaxTopLogprobs]: each token's log-probability and the n
  // most likely tokens' at its position (log_softmax of the model's logits at temperature 1).
  int32_t top_logprobs = -1;
};

// The seed of the random stream that samples the token after `position` tokens of a request
// seeded `seed` (a splitmix64 step of the two).
uint64_t SamplingStreamSeed(uint64_t seed, int64_t position);

// That position's draw in [0, 1): the stream seed's top 53 bits.
double SamplingUniform(uint64_t seed, int64_t position);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// What a step returns for a sampled position.
struct SampledToken {
  // -1: nothing was picked because the position's logits were not finite (the request fails).
  int32_t token = -1;
  // With top_logprobs >= 0: the token's log-probability and the most likely tokens'.
  std::optional<float> logprob;
  std::vector<TokenLogprob> top;
};

}  // namespace ferry::step
