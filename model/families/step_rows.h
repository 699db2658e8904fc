// The bookkeeping every family's batched Forward() shares: which row of the step is which
// token of which conversation, the embedding gather, and the lm_head on the rows whose logits
// were asked for.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/sampler.h"
#include "model/families/causal_lm.h"
#include "model/cache/paged_cache.h"
#include "model/checkpoint/weights.h"
#include "step/sampling.h"

namespace ferry::model {

// Row r of a step is token pos[r] of segment seg_of[r]; segment s's rows start at seg_begin[s].
struct StepRows {
  std::vector<int64_t> pos;
  std::vector<int64_t> seg_of;
  std::vector<int64_t> seg_begin;
  int64_t count() const { return static_cast<int64_t>(pos.size()); }
};

// lengths[s]: segment s's conversation length before the step.
StepRows PlanStepRows(std::span<const ForwardSegment> segments, std::span<const int64_t> lengths);

// Grows every table to hold new tokens (table i: lengths[i] + adds[i]). When the arena runs out,
// the tables grown so far give their new pages back, so a refused step leaves every conversation
// and the arena as they were; the arena's error is returned.
absl::Status ReserveRows(std::span<PagedRows* const> tables, std::span<const int64_t> lengths,
                         std::span<const int64_t> adds);

// The rows whose logits come back, in order: each segment's last row (none for a sampled segment),
// or all its rows with all_logits; first_row[s] is where segment s's start in that list
// (ForwardOutput::first_row; -1 for none). The rows sampled after: sample_rows, with their
// samplers, at sample_of[s] for a segment with `sample` (-1 otherwise).
struct LogitRows {
  std::vector<int32_t> rows;
  std::vector<int64_t> first_row;
  std::vector<int32_t> sample_rows;
  std::vector<kernels::RowSampler> samplers;
  std::vector<int64_t> sample_of;
  // ForwardOutput::picks from the sampled rows' results (in sample_rows' order).
  std::vector<kernels::SampledToken> PicksOf(std::span<const kernels::SampledToken> sampled) const;
};
LogitRows PickLogitRows(std::span<const ForwardSegment> segments, const StepRows& rows);

// The rows the head (final norm, lm_head) runs on: those whose logits come back, then those
// sampled (`n_logits` + the sampled rows = rows.size()).
struct HeadRows {
  LogitRows picked;
  std::vector<int32_t> rows;
  int64_t n_logits = 0;
};
HeadRows PlanHeadRows(std::span<const ForwardSegment> segments, const StepRows& rows);

// The sampler of the token after `position` tokens of a request seeded `seed` (its draw is
// step::SamplingUniform's, so the pick depends on nothing else in the step).
kernels::RowSampler SamplerAt(const step::SamplingParams& p, uint64_t seed, int64_t position);

// A pick as a step returns it: the log-probabilities only when the request asked for them.
step::SampledToken SampledOf(const kernels::SampledToken& t, int32_t top_logprobs);

}  // namespace ferry::model
