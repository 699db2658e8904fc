// Executes the coordinator's steps on one rank: holds each conversation's state by sequence id,
// runs one batched forward per step and, on rank 0, samples the requested tokens.
// Plain C++ (no gRPC), so it runs the same in the worker process and in in-process tests.
//
// Thread safety: not thread-safe; the worker's step loop drives it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/families/causal_lm.h"
#include "step/step.h"

namespace ferry::worker {

using step::Step;
using step::StepSegment;

// A step that fails once it has changed state (releases, pages, carried rows) with `st`, after
// "context: " (none when empty): INVALID_ARGUMENT, which the coordinator takes for a clean
// refusal alike on every rank, becomes INTERNAL; every other code is kept with its payloads (a
// data-plane timeout's names the peer waited for: the worker's exit status and report use it).
absl::Status FailedAfterChanges(absl::string_view context, const absl::Status& st);

class StepExecutor {
 public:
  StepExecutor(std::unique_ptr<model::CausalLM> model, int rank);

  // Drops the released conversations, creates new ones (a segment at start 0 with an unknown id),
  // runs the step, and returns the sampled tokens (rank 0; empty elsewhere), one per segment
  // with `sample`, in segment order. The token drawn for a position depends only on the logits,
  // the sampling parameters, the seed and the position, never on the rest of the batch.
  // Errors: INVALID_ARGUMENT only from the validation that comes before any change (no release
  // applied, nothing created), alike on every rank and before any exchange: a segment whose start
  // is not the conversation's length, a token outside the vocabulary, a fork or carry of a
  // conversation this group does not keep as named, or a borrow ended on an unknown conversation.
  // Anything later is another code (INTERNAL, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, ...): the
  // step changed state, or failed on some ranks only, and the group cannot go on.
  absl::StatusOr<std::vector<step::SampledToken>> Execute(const Step& step);

  // Fixes the model's KV arena at `pages` pages (CausalLM::SizeArena), before the first step.
  absl::Status SizeArena(int64_t pages) { return model_->SizeArena(pages); }
  absl::Status SizeArenas(int64_t pages, int64_t latent_pages) { return model_->SizeArenas(pages, latent_pages); }

  int64_t live_sequences() const { return static_cast<int64_t>(seqs_.size()); }
  int64_t state_bytes() const;
  const model::CausalLM& model() const { return *model_; }

 private:
  // This rank's latent pages of a segment (empty when none).
  const std::vector<int32_t>& my_latent(const StepSegment& seg) const;

  std::unique_ptr<model::CausalLM> model_;
  int rank_;
  std::map<uint64_t, std::unique_ptr<model::SequenceState>> seqs_;
};

}  // namespace ferry::worker
