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

void GatherEmbeddings(std::span<const ForwardSegment> segments, const Weight& embed, float* x) {
  const int64_t D = embed.cols;
  int64_t r = 0;
  for (const ForwardSegment& seg : segments) {
    for (int32_t t : seg.tokens) std::copy_n(embed.ptr() + t * D, D, x + (r++) * D);
  }
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

std::vector<int32_t> LogitRows::ArgmaxOf(std::span<const int32_t> ids) const {
  std::vector<int32_t> out(argmax_of.size(), -1);
  for (size_t s = 0; s < argmax_of.size(); ++s) {
    if (argmax_of[s] >= 0) out[s] = ids[static_cast<size_t>(argmax_of[s])];
  }
  return out;
}

ForwardOutput ProjectLogits(std::span<const ForwardSegment> segments, const StepRows& rows, const float* normed,
                            const Weight& lm_head) {
  const int64_t D = lm_head.cols, V = lm_head.rows;
  ForwardOutput out;
  out.vocab = V;
  LogitRows pick = PickLogitRows(segments, rows);
  // The logit rows, then the argmax rows (their logits are picked from, then dropped).
  std::vector<int32_t> picked = pick.rows;
  picked.insert(picked.end(), pick.argmax_rows.begin(), pick.argmax_rows.end());
  const int64_t n_out = static_cast<int64_t>(pick.rows.size()), n_all = static_cast<int64_t>(picked.size());
  std::vector<float> h(static_cast<size_t>(n_all * D));
  for (int64_t j = 0; j < n_all; ++j) std::copy_n(normed + picked[j] * D, D, h.data() + j * D);
  out.logits.resize(static_cast<size_t>(n_all * V));
  kernels::cpu::Linear(h.data(), n_all, D, lm_head.ptr(), V, out.logits.data());
  std::vector<int32_t> ids;
  for (int64_t j = n_out; j < n_all; ++j) ids.push_back(kernels::cpu::ArgMax(out.logits.data() + j * V, V));
  out.logits.resize(static_cast<size_t>(n_out * V));
  out.argmax = pick.ArgmaxOf(ids);
  out.first_row = std::move(pick.first_row);
  return out;
}

}  // namespace ferry::model
