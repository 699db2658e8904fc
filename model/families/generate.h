// In-process generation over one conversation: prefill, then decode token by token.
// (The serving system's scheduler batches many of these; this is the single-stream loop that
// `ferry generate --model` and the golden check use.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "step/sampling.h"
#include "model/families/causal_lm.h"

namespace ferry::model {

struct GenerateOptions {
  int64_t max_tokens = 16;
  step::SamplingParams sampling;
  uint64_t seed = 0;
  std::vector<int32_t> stop_token_ids;  // in addition to the config's eos ids
  bool ignore_eos = false;              // when set, only max_tokens ends the stream
  int64_t prefill_chunk = 0;            // > 0: feed the prompt in pieces of this many tokens
  // The latent split: the rank that alone holds the conversation's latent rows (-1: every rank).
  int latent_owner = -1;
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::string finish_reason;  // "stop" or "length"
  // With sampling.top_logprobs >= 0: each token's log-probabilities.
  std::vector<step::SampledToken> logprobs;
  // Logits of every prompt position and of every generated token's step, [rows, vocab], when
  // asked for (keep_logits).
  std::vector<float> logits;
};

// REQUIRES: prompt non-empty. Errors from Forward() are returned as they are.
absl::StatusOr<GenerateResult> Generate(CausalLM& model, const std::vector<int32_t>& prompt,
                                        const GenerateOptions& opt, bool keep_logits = false);

}  // namespace ferry::model
