// One step of the serving system, as the coordinator schedules it and every worker executes it
// (the control plane carries it as ferry.control.v1.StepCommand).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/sampling.h"

namespace ferry::worker {

// One conversation's piece of a step: a prompt chunk or one decode token.
struct StepSegment {
  uint64_t seq_id = 0;
  int64_t start = 0;  // the conversation's length before this piece
  std::vector<int32_t> tokens;
  bool sample = false;  // sample a token after the last position (rank 0 does it)
  kernels::cpu::SamplingParams sampling;
  uint64_t seed = 0;
  // Pages appended to the conversation's table before this piece runs (with a coordinator-
  // managed pool; empty otherwise, and the worker's arena grows on its own).
  std::vector<int32_t> new_pages;
  // A new conversation that starts as a copy of the kept conversation `fork_from` (the prompt
  // cache), rewound to `fork_length` tokens (== start). 0: starts empty.
  uint64_t fork_from = 0;
  int64_t fork_length = 0;
};

struct Step {
  uint64_t step_id = 0;
  std::vector<StepSegment> segments;
  std::vector<uint64_t> release;  // conversations dropped before the step runs
};

}  // namespace ferry::worker
