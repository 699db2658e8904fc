#include "model/step_rows.h"

#include <algorithm>

#include "kernels/cpu/ops.h"

namespace ferry::model {

StepRows PlanStepRows(std::span<const ForwardSegment> segments, std::span<const int64_t> lengths) {
  StepRows rows;
  for (size_t s = 0; s < segments.size(); ++s) {
    rows.seg_begin.push_back(rows.count());
    for (size_t i = 0; i < segments[s].tokens.size(); ++i) {
      rows.pos.push_back(lengths[s] + static_cast<int64_t>(i));
      rows.seg_of.push_back(static_cast<int64_t>(s));
    }
  }
  return rows;
}

absl::Status ReserveRows(std::span<PagedRows* const> tables, std::span<const int64_t> lengths,
                         std::span<const int64_t> adds) {
  for (size_t s = 0; s < tables.size(); ++s) {
    absl::Status st = tables[s]->Reserve(lengths[s] + adds[s]);
    if (!st.ok()) {
      for (size_t k = 0; k < s; ++k) (void)tables[k]->Truncate(lengths[k]);
      return st;
    }
  }
  return absl::OkStatus();
}

LogitRows PickLogitRows(std::span<const ForwardSegment> segments, const StepRows& rows) {
  LogitRows out;
  for (size_t s = 0; s < segments.size(); ++s) {
    const int64_t n = static_cast<int64_t>(segments[s].tokens.size());
    if (segments[s].argmax_only && !segments[s].all_logits) {
      out.first_row.push_back(-1);
      out.argmax_of.push_back(static_cast<int64_t>(out.argmax_rows.size()));
      out.argmax_rows.push_back(static_cast<int32_t>(rows.seg_begin[s] + n - 1));
      continue;
    }
    out.argmax_of.push_back(-1);
    out.first_row.push_back(static_cast<int64_t>(out.rows.size()));
    for (int64_t i = segments[s].all_logits ? 0 : n - 1; i < n; ++i) {
      out.rows.push_back(static_cast<int32_t>(rows.seg_begin[s] + i));
    }
  }
  return out;
}

HeadRows PlanHeadRows(std::span<const ForwardSegment> segments, const StepRows& rows) {
  HeadRows h;
  h.picked = PickLogitRows(segments, rows);
  h.rows = h.picked.rows;
  h.rows.insert(h.rows.end(), h.picked.argmax_rows.begin(), h.picked.argmax_rows.end());
  h.n_logits = static_cast<int64_t>(h.picked.rows.size());
  return h;
}

std::vector<int32_t> LogitRows::ArgmaxOf(std::span<const int32_t> ids) const {
  std::vector<int32_t> out(argmax_of.size(), -1);
  for (size_t s = 0; s < argmax_of.size(); ++s) {
    if (argmax_of[s] >= 0) out[s] = ids[static_cast<size_t>(argmax_of[s])];
  }
  return out;
}

}  // namespace ferry::model
