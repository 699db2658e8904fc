// Reference outputs made by HuggingFace transformers (tests/data/README.md): for each
// prompt pK in golden.safetensors, `pK.ids` int32 [n], `pK.greedy` int32 [G], and
// `pK.logits` f32 [n + G, vocab] from one teacher-forced forward of prompt + greedy tokens.
// Goldens made by scripts/reference_goldens.py also hold, from that same forward, the
// reference's own selections: `pK.select.L.indexer` / `pK.select.L.experts` int32
// [n + G, width] (ascending ids, -1 padding; the indexer's token positions for glm_moe_dsa, its
// pool ids for glm5_next; the router's experts) and `pK.select.L.<site>_margin` f32 [n + G],
// how near each choice was to another ((s_k - s_k+1) / |s_k| over the row's sorted scores,
// +inf when every candidate was kept).
//
// A selection is discontinuous in its scores: where the reference's own choice was a near tie,
// float32 summation order alone can flip it, and the flipped key or expert moves that position's
// logits by tenths of a logit (and, through the caches and KDA state, every later position's).
// So when the golden holds selections the check replays them (model/golden/decision_log.h) and holds
// the logits to the tolerance; the engine's own choices are compared with them as they are
// replayed, and one that differs where the reference's margin exceeds the near-tie bound is a
// real error, not rounding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/families/causal_lm.h"
#include "model/checkpoint/config.h"
#include "model/golden/decision_log.h"

namespace ferry::model {

// The reference's choices at one decision site of one layer, at every position.
struct GoldenSelection {
  DecisionSite site = DecisionSite::kIndexerTopK;
  int64_t layer = 0;
  int64_t width = 0;
  std::vector<int32_t> ids;    // [positions, width]: ascending ids, then -1
  std::vector<float> margins;  // [positions]: the relative margin of each choice
};

struct GoldenPrompt {
  std::string name;  // "p0", "p1", ...
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy;
  std::vector<float> logits;  // [ids.size() + greedy.size(), vocab]
  int64_t vocab = 0;
  std::vector<GoldenSelection> selections;  // by layer, then site (the forward's order); may be empty
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

// The largest reference margin at which the engine's own selection may differ from the
// reference's in a float32 run: 1e-3, relative. Float32 engines agree with the reference to
// ~1e-5 relative in the scores (logits within 1e-4 of values up to ~6), so only a choice nearer a
// tie than that can flip; the flips met on the transformers-made checkpoints sat at margins of
// 2.4e-5 and 2.6e-4. A bf16 run's scores move by percents: there differences are reported only.
inline constexpr double kSelectionNearTie = 1e-3;

// The golden's selections as a tape of one step over every position (prompt, then greedy), as
// the reference's teacher-forced forward made them; DecisionLog::Recut(GoldenSteps(...)) fits it
// to a check's steps. INVALID_ARGUMENT, naming the tensor, when a selection does not fit the model: a width other
// than the model's (index_topk tokens, index_topk / index_kpool pools, num_experts_per_tok
// experts), an id it cannot take at that position (a token or pool not yet visible, an expert out
// of range, a repeat), a site at a layer that does not make it.
absl::StatusOr<DecisionLog> ReferenceTape(const ModelConfig& config, const GoldenPrompt& golden);

// The steps of CheckGoldenPrompt and CheckGoldenPromptForced over the golden's positions: the
// prompt in pieces of `prefill_chunk` tokens (0: one piece), then one position a step.
std::vector<DecisionLog::RowRange> GoldenSteps(const GoldenPrompt& golden, int64_t prefill_chunk);

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
  // CheckGoldenPinned only: the engine's own selections against the reference's it replayed,
  // and how many of the differing ones sat beyond the near-tie margin (each fails the check).
  bool pinned = false;
  DecisionStats selections;
  int64_t selections_beyond_tie = 0;
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

// CheckGoldenPrompt (forced: CheckGoldenPromptForced) with the golden's selections replayed into
// `model` (ReferenceTape); passes when that check passes and, with `gate_selections` (float32
// runs), no own selection differs from the reference's where its margin exceeds
// kSelectionNearTie (without: they are counted only). A golden without selections runs the
// plain check. The model's decision log is detached after.
absl::StatusOr<GoldenResult> CheckGoldenPinned(CausalLM& model, const GoldenPrompt& golden, float tolerance,
                                               bool forced, bool gate_selections, int64_t prefill_chunk = 0,
                                               int latent_owner = -1);

}  // namespace ferry::model
