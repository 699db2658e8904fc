#include "model/families/step_rows.h"

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
    const ForwardSegment& seg = segments[s];
    const int64_t n = static_cast<int64_t>(seg.tokens.size());
    const int32_t last = static_cast<int32_t>(rows.seg_begin[s] + n - 1);
    out.sample_of.push_back(-1);
    if (seg.sample.has_value()) {
      out.sample_of.back() = static_cast<int64_t>(out.sample_rows.size());
      out.sample_rows.push_back(last);
      out.samplers.push_back(*seg.sample);
    }
    out.first_row.push_back(-1);
    if (seg.sample.has_value() && !seg.all_logits) continue;
    out.first_row.back() = static_cast<int64_t>(out.rows.size());
    for (int64_t i = seg.all_logits ? 0 : n - 1; i < n; ++i) {
      out.rows.push_back(static_cast<int32_t>(rows.seg_begin[s] + i));
    }
  }
  return out;
}

HeadRows PlanHeadRows(std::span<const ForwardSegment> segments, const StepRows& rows) {
  HeadRows h;
  h.picked = PickLogitRows(segments, rows);
  h.rows = h.picked.rows;
  h.rows.insert(h.rows.end(), h.picked.sample_rows.begin(), h.picked.sample_rows.end());
  h.n_logits = static_cast<int64_t>(h.picked.rows.size());
  return h;
}

std::vector<kernels::SampledToken> LogitRows::PicksOf(std::span<const kernels::SampledToken> sampled) const {
  std::vector<kernels::SampledToken> out(sample_of.size());
  for (size_t s = 0; s < sample_of.size(); ++s) {
    if (sample_of[s] >= 0) out[s] = sampled[static_cast<size_t>(sample_of[s])];
  }
  return out;
}

kernels::RowSampler SamplerAt(const step::SamplingParams& p, uint64_t seed, int64_t position) {
  kernels::RowSampler s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.top_logprobs = p.top_logprobs;
  s.uniform = step::SamplingUniform(seed, position);
  return s;
}

step::SampledToken SampledOf(const kernels::SampledToken& t, int32_t top_logprobs) {
  step::SampledToken out;
  out.token = t.token;
  if (top_logprobs < 0 || t.token < 0) return out;
  out.logprob = t.logprob;
  for (int32_t j = 0; j < t.n_top; ++j) out.top.push_back({t.top_ids[j], t.top_logprobs[j]});
  return out;
}

}  // namespace ferry::model
