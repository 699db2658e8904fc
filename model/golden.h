// Reference outputs made by HuggingFace transformers (../shared/testdata/README.md): for each
// prompt pK in golden.safetensors, `pK.ids` int32 [n], `pK.greedy` int32 [G], and
// `pK.logits` f32 [n + G, vocab] from one teacher-forced forward of prompt + greedy tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/causal_lm.h"

namespace ferry::model {

struct GoldenPrompt {
  std::string name;  // "p0", "p1", ...
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy;
  std::vector<float> logits;  // [ids.size() + greedy.size(), vocab]
  int64_t vocab = 0;
};

// Reads every pK in the file, in order of K. Errors name the file and the tensor at fault.
absl::StatusOr<std::vector<GoldenPrompt>> ReadGolden(const std::string& path);

struct GoldenResult {
  std::string name;
  int64_t prompt_len = 0;
  std::vector<int32_t> generated;
  bool tokens_equal = false;
  float max_prefill_error = 0.0f;  // max |logit - golden| over the prompt's positions
  float max_decode_error = 0.0f;   // ... over the generated positions
  bool passed = false;             // tokens equal and both errors <= tolerance
};

// Prefills the prompt (in pieces of `prefill_chunk` tokens when > 0), greedy-decodes
// greedy.size() tokens through the decode path, and compares tokens exactly and logits at
// every position within `tolerance`.
absl::StatusOr<GoldenResult> CheckGoldenPrompt(CausalLM& model, const GoldenPrompt& golden,
                                               float tolerance, int64_t prefill_chunk = 0);

}  // namespace ferry::model
