// One step of the serving system, as the coordinator schedules it and every worker executes it
// (the control plane carries it as ferry.control.v1.StepCommand: step_proto.h). The coordinator and
// the workers share this module; it depends on nothing of theirs.
#pragma once

#include <cstdint>
#include <vector>

#include "step/sampling.h"

namespace ferry::step {

// One conversation's piece of a step: a prompt chunk or one decode token.
struct StepSegment {
  uint64_t seq_id = 0;
  int64_t start = 0;  // the conversation's length before this piece
  std::vector<int32_t> tokens;
  bool sample = false;  // sample a token after the last position (rank 0 does it)
  SamplingParams sampling;
  uint64_t seed = 0;
  // Pages appended to the conversation's table before this piece runs (with a coordinator-
  // managed pool; empty otherwise, and the worker's arena grows on its own).
  std::vector<int32_t> new_pages;
  // A new conversation that starts as a copy of the kept conversation `fork_from` (the prompt
  // cache), rewound to `fork_length` tokens (== start). 0: starts empty.
  uint64_t fork_from = 0;
  int64_t fork_length = 0;
  // The latent split (docs/owner-split.md), read when the conversation is created here: its
  // latent rows live on rank `owner` only (-1: on every rank, the replicated layout), or on every
  // rank while `borrowed` (a fill), until the step that lists it in Step::end_borrow.
  int owner = -1;
  bool borrowed = false;
  // With an owner: latent_pages[k] are pages of rank k's latent arena appended to the
  // conversation's latent table there (a fork's partial page copy first, as for new_pages);
  // new_pages then go to the replicated part only. Indexed by rank; missing or empty: none.
  std::vector<std::vector<int32_t>> latent_pages;
  // A carry (with fork_from and an owner): the kept conversation's latent rows live on rank
  // carry_from, not on `owner`; the fork's first fork_length rows are sent from there to the
  // owner (into the start of its latent_pages, all of them fresh) before the step runs. -1: none.
  int carry_from = -1;
};

struct Step {
  uint64_t step_id = 0;
  std::vector<StepSegment> segments;
  std::vector<uint64_t> release;  // conversations dropped before the step runs
  // Conversations whose borrowed fill is over: every rank but the owner drops its latent rows
  // before the step runs.
  std::vector<uint64_t> end_borrow;
};

}  // namespace ferry::step
