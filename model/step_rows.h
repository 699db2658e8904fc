// The bookkeeping every family's batched Forward() shares: which row of the step is which
// token of which conversation, the embedding gather, and the lm_head on the rows whose logits
// were asked for.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/causal_lm.h"
#include "model/paged_cache.h"
#include "model/weights.h"

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

// The rows whose logits were asked for, in order: each segment's last row, or all its rows with
// all_logits; first_row[s] is where segment s's start in that list (ForwardOutput::first_row; -1
// for an argmax_only segment, whose last row is in argmax_rows instead, at argmax_of[s]).
struct LogitRows {
  std::vector<int32_t> rows;
  std::vector<int64_t> first_row;
  std::vector<int32_t> argmax_rows;
  std::vector<int64_t> argmax_of;  // per segment: its index in argmax_rows, or -1
  // ForwardOutput::argmax from the picked ids (argmax_rows' greedy tokens, in order).
  std::vector<int32_t> ArgmaxOf(std::span<const int32_t> ids) const;
};
LogitRows PickLogitRows(std::span<const ForwardSegment> segments, const StepRows& rows);

// The rows the head (final norm, lm_head) runs on: those whose logits come back, then those whose
// greedy token does (`n_logits` + the argmax rows = rows.size()).
struct HeadRows {
  LogitRows picked;
  std::vector<int32_t> rows;
  int64_t n_logits = 0;
};
HeadRows PlanHeadRows(std::span<const ForwardSegment> segments, const StepRows& rows);

}  // namespace ferry::model
