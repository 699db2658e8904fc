// Reference outputs made by HuggingFace transformers (../shared/testdata/README.md): for each
// prompt pK in golden.safetensors, `pK.ids` int32 [n], `pK.greedy` int32 [G], and
// `pK.logits` f32 [n + G, vocab] from one teacher-forced forward of prompt + greedy tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/causal_lm.h"
#include "model/config.h"

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

// The logit tolerance of a bf16 CUDA run whose indexer and routing decisions are pinned (to the
// float32 run's in `ferry check-golden`, or to another bf16 run's in ferry-cuda-model-check).
// Measured on the tiny checkpoints (logits about -6..6), every position of every golden prompt
// against the goldens: at most 0.39 (glm-dsa-tiny) and 1.14 (glm5next-tiny). Rounding error
// accumulates over glm5_next's 8 layers of 4 hyper-connected streams faster than over
// glm_moe_dsa's 4 layers: the float32 runs' stream error grows from layer 0 to the last 6.8x
// there (1.07e-6 to 7.3e-6) against 3.0x (1.02e-6 to 3.0e-6), and the pinned bf16 maxima stand in
// about that ratio. Each bound is the measured maximum with ~30% to spare; unpinned bf16 runs are
// off by 3..8 logits (bench/results/h200-check-golden-cuda.md).
double PinnedBf16Tolerance(Family family);

struct GoldenResult {
  std::string name;
  int64_t prompt_len = 0;
  std::vector<int32_t> generated;
  bool tokens_equal = false;
  float max_prefill_error = 0.0f;  // max |logit - golden| over the prompt's positions
  float max_decode_error = 0.0f;   // ... over the generated positions
  bool passed = false;             // tokens equal and both errors <= tolerance
  // CheckGoldenPromptForced only: generated positions whose golden top-1/top-2 margin is
  // <= tolerance (a token may differ there), and how many of them did differ.
  int64_t near_ties = 0;
  int64_t near_tie_flips = 0;
  // max |logit - golden| of each compared position, in order (prompt, then generated).
  std::vector<float> position_errors;
  // The logits the model gave, [positions, vocab] (prompt, then generated).
  std::vector<float> logits;
};

// Prefills the prompt (in pieces of `prefill_chunk` tokens when > 0), greedy-decodes
// greedy.size() tokens through the decode path, and compares tokens exactly and logits at
// every position within `tolerance`. latent_owner >= 0: the conversation's latent rows live on
// that rank alone (the latent split; every rank of the group runs the same check in lockstep).
absl::StatusOr<GoldenResult> CheckGoldenPrompt(CausalLM& model, const GoldenPrompt& golden,
                                               float tolerance, int64_t prefill_chunk = 0, int latent_owner = -1);

// The check for a backend that rounds differently from the reference (the bf16 CUDA backend),
// where an exact greedy match cannot be asked for: the golden continuation is fed back one
// token a step through the decode path (teacher forcing), so every position sees the
// reference's prefix and its logits are comparable. Passes when the logits are within
// `tolerance` at every position (prompt and generated) and the backend's own greedy pick
// (`generated`) equals the golden token wherever the golden's top-1/top-2 margin exceeds
// `tolerance`; `near_ties` counts the positions where it need not. When every pick matches,
// this is the same run as CheckGoldenPrompt's.
absl::StatusOr<GoldenResult> CheckGoldenPromptForced(CausalLM& model, const GoldenPrompt& golden, float tolerance,
                                                     int64_t prefill_chunk = 0, int latent_owner = -1);

}  // namespace ferry::model
