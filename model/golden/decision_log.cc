#include "model/golden/decision_log.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace ferry::model {
namespace {

// A row's ids as a sorted set without the -1 padding.
std::vector<int32_t> RowSet(const int32_t* ids, int64_t width) {
  std::vector<int32_t> v;
  for (int64_t j = 0; j < width; ++j) {
    if (ids[j] >= 0) v.push_back(ids[j]);
  }
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

const char* DecisionSiteName(DecisionSite site) {
  switch (site) {
    case DecisionSite::kIndexerTopK:
      return "indexer top-k";
    case DecisionSite::kMoeExperts:
      return "MoE experts";
  }
  return "?";
}

void DecisionLog::Start(Mode mode) {
  mode_ = mode;
  if (mode == Mode::kRecord) {
    entries_.clear();
    steps_.clear();
    fp4_rows_.clear();
  }
  cursor_ = 0;
  step_cursor_ = 0;
  in_step_ = false;
  step_rows_ = 0;
  step_end_ = 0;
  row_differs_.clear();
  stats_ = DecisionStats{};
}

absl::Status DecisionLog::CloseStep() {
  if (!in_step_) return absl::OkStatus();
  if (mode_ != Mode::kRecord && cursor_ != step_end_) {
    return absl::FailedPreconditionError(absl::StrCat("decision log: step ", step_cursor_ - 1, " used ",
                                                      cursor_ - steps_[step_cursor_ - 1].first_entry, " of its ",
                                                      step_end_ - steps_[step_cursor_ - 1].first_entry,
                                                      " recorded decision sites (the runs differ)"));
  }
  stats_.positions += step_rows_;
  for (char d : row_differs_) stats_.positions_differing += d ? 1 : 0;
  in_step_ = false;
  return absl::OkStatus();
}

absl::Status DecisionLog::BeginStep(int64_t rows) {
  if (rows < 0) return absl::InvalidArgumentError(absl::StrCat("decision log: a step of ", rows, " rows"));
  if (absl::Status st = CloseStep(); !st.ok()) return st;
  if (mode_ == Mode::kRecord) {
    const int64_t first_row = steps_.empty() ? 0 : steps_.back().first_row + steps_.back().rows;
    steps_.push_back({rows, entries_.size(), first_row});
  } else {
    if (step_cursor_ >= steps_.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("decision log: step ", step_cursor_, " was not recorded (the tape holds ", steps_.size(),
                       " steps)"));
    }
    const StepMark& m = steps_[step_cursor_];
    if (m.rows != rows) {
      return absl::FailedPreconditionError(absl::StrCat("decision log: step ", step_cursor_, " has ", rows,
                                                        " rows; the recorded one had ", m.rows));
    }
    cursor_ = m.first_entry;
    step_end_ = step_cursor_ + 1 < steps_.size() ? steps_[step_cursor_ + 1].first_entry : entries_.size();
    ++step_cursor_;
  }
  in_step_ = true;
  step_rows_ = rows;
  row_differs_.assign(static_cast<size_t>(rows), 0);
  return absl::OkStatus();
}

absl::StatusOr<bool> DecisionLog::Decide(DecisionSite site, int64_t layer, int64_t rows, int64_t width,
                                         std::span<int32_t> ids) {
  if (!in_step_) return absl::InvalidArgumentError("decision log: a decision outside a step (call BeginStep)");
  if (rows != step_rows_ || width < 0 || static_cast<int64_t>(ids.size()) != rows * width) {
    return absl::InvalidArgumentError(absl::StrCat("decision log: ", DecisionSiteName(site), " at layer ", layer,
                                                   ": ", ids.size(), " ids for ", rows, " rows of ", width,
                                                   " in a step of ", step_rows_, " rows"));
  }
  const int s = static_cast<int>(site);
  if (mode_ == Mode::kRecord) {
    entries_.push_back({site, layer, rows, width, std::vector<int32_t>(ids.begin(), ids.end()), {},
                        steps_.back().first_row});
    stats_.decisions += rows;
    stats_.by_site[s] += rows;
    return false;
  }
  if (cursor_ >= step_end_) {
    return absl::FailedPreconditionError(absl::StrCat("decision log: ", DecisionSiteName(site), " at layer ", layer,
                                                      " was not recorded in step ", step_cursor_ - 1));
  }
  const Entry& e = entries_[cursor_];
  if (e.site != site || e.layer != layer || e.rows != rows || e.width != width) {
    return absl::FailedPreconditionError(absl::StrCat(
        "decision log: step ", step_cursor_ - 1, " asks for ", DecisionSiteName(site), " at layer ", layer, " [", rows,
        " x ", width, "]; the tape holds ", DecisionSiteName(e.site), " at layer ", e.layer, " [", e.rows, " x ",
        e.width, "]"));
  }
  ++cursor_;
  for (int64_t r = 0; r < rows; ++r) {
    if (RowSet(ids.data() + r * width, width) != RowSet(e.ids.data() + r * width, width)) {
      ++stats_.differing;
      ++stats_.differing_by_site[s];
      row_differs_[static_cast<size_t>(r)] = 1;
      stats_.differences.push_back({site, layer, e.first_row + r, e.margins.empty() ? NAN : e.margins[r]});
    }
  }
  stats_.decisions += rows;
  stats_.by_site[s] += rows;
  if (mode_ == Mode::kCompare) return false;
  std::copy(e.ids.begin(), e.ids.end(), ids.begin());
  return true;
}

absl::Status DecisionLog::Append(DecisionSite site, int64_t layer, int64_t width, std::span<const int32_t> ids,
                                 std::span<const float> margins) {
  if (mode_ != Mode::kRecord || !in_step_) {
    return absl::InvalidArgumentError("decision log: Append outside a recording step");
  }
  if (width < 0 || static_cast<int64_t>(ids.size()) != step_rows_ * width ||
      (!margins.empty() && static_cast<int64_t>(margins.size()) != step_rows_)) {
    return absl::InvalidArgumentError(absl::StrCat("decision log: ", DecisionSiteName(site), " at layer ", layer, ": ",
                                                   ids.size(), " ids and ", margins.size(), " margins for ",
                                                   step_rows_, " rows of ", width));
  }
  entries_.push_back({site, layer, step_rows_, width, std::vector<int32_t>(ids.begin(), ids.end()),
                      std::vector<float>(margins.begin(), margins.end()), steps_.back().first_row});
  stats_.decisions += step_rows_;
  stats_.by_site[static_cast<int>(site)] += step_rows_;
  return absl::OkStatus();
}

absl::StatusOr<bool> DecisionLog::Fp4Row(int64_t layer, int64_t mlp, int64_t input, int64_t row,
                                          std::span<float> values) {
  if (!in_step_ || values.size() % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("decision log: an FP4 row of ", values.size(), " values ",
                                                   in_step_ ? "(not whole groups of 16)" : "outside a step"));
  }
  const int64_t step = static_cast<int64_t>(mode_ == Mode::kRecord ? steps_.size() : step_cursor_) - 1;
  const std::array<int64_t, 5> key{step, layer, mlp, input, row};
  if (mode_ == Mode::kRecord) {
    fp4_rows_[key].assign(values.begin(), values.end());
    ++stats_.fp4_rows;
    return false;
  }
  if (fp4_rows_.empty()) return false;
  const auto it = fp4_rows_.find(key);
  if (it == fp4_rows_.end() || it->second.size() != values.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "decision log: step ", step, " layer ", layer, " MLP ", mlp, " input ", input, " row ", row, ": ",
        it == fp4_rows_.end() ? std::string("no FP4 row recorded")
                              : absl::StrCat(it->second.size(), " values recorded, ", values.size(), " here"),
        " (the runs differ)"));
  }
  ++stats_.fp4_rows;
  for (size_t g = 0; g < values.size(); g += 16) {
    // A NaN equals a NaN; +0 and -0 are one value.
    bool same = true;
    for (size_t i = g; i < g + 16 && same; ++i) {
      same = values[i] == it->second[i] || (std::isnan(values[i]) && std::isnan(it->second[i]));
    }
    stats_.fp4_groups_differing += same ? 0 : 1;
  }
  if (mode_ != Mode::kReplay) return false;
  std::copy(it->second.begin(), it->second.end(), values.begin());
  return true;
}

absl::Status DecisionLog::Finish() {
  if (absl::Status st = CloseStep(); !st.ok()) return st;
  if (mode_ != Mode::kRecord && step_cursor_ != steps_.size()) {
    return absl::FailedPreconditionError(absl::StrCat("decision log: ", step_cursor_, " of ", steps_.size(),
                                                      " recorded steps were replayed (the runs differ)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DecisionLog> DecisionLog::Recut(std::span<const RowRange> steps) const {
  int64_t total = 0;
  for (const StepMark& m : steps_) total += m.rows;
  DecisionLog out;
  for (size_t i = 0; i < steps.size(); ++i) {
    const RowRange& want = steps[i];
    if (want.first < 0 || want.count < 0 || want.first + want.count > total) {
      return absl::InvalidArgumentError(absl::StrCat("decision log: new step ", i, " (rows ", want.first, " to ",
                                                     want.first + want.count, ") leaves the tape's ", total,
                                                     " rows"));
    }
    out.steps_.push_back({want.count, out.entries_.size(),
                          out.steps_.empty() ? 0 : out.steps_.back().first_row + out.steps_.back().rows});
    if (want.count == 0) continue;  // a step of no rows: no decisions to replay
    // The recorded step holding the range's first row: rows [base, base + steps_[k].rows).
    size_t k = 0;
    int64_t base = 0;
    while (base + steps_[k].rows <= want.first) base += steps_[k++].rows;
    if (want.first + want.count > base + steps_[k].rows) {
      return absl::InvalidArgumentError(absl::StrCat("decision log: new step ", i, " (rows ", want.first, " to ",
                                                     want.first + want.count, ") straddles recorded steps"));
    }
    const int64_t at = want.first - base, n = want.count;
    const size_t end = k + 1 < steps_.size() ? steps_[k + 1].first_entry : entries_.size();
    for (size_t e = steps_[k].first_entry; e < end; ++e) {
      const Entry& from = entries_[e];
      Entry to{from.site, from.layer, n, from.width, {}, {}, from.first_row + at};
      to.ids.assign(from.ids.begin() + at * from.width, from.ids.begin() + (at + n) * from.width);
      if (!from.margins.empty()) to.margins.assign(from.margins.begin() + at, from.margins.begin() + at + n);
      out.entries_.push_back(std::move(to));
    }
  }
  return out;
}

void PinnedRouteWeights(const float* logits, std::span<const int32_t> experts, const kernels::cpu::RoutingParams& p,
                        float* weights) {
  float sum = 0.0f;
  for (int32_t e : experts) sum += 1.0f / (1.0f + std::exp(-logits[e]));
  for (size_t i = 0; i < experts.size(); ++i) {
    float w = 1.0f / (1.0f + std::exp(-logits[experts[i]]));
    if (p.norm_topk_prob) w /= (sum + 1e-20f);
    weights[i] = w * p.routed_scaling_factor;
  }
}

}  // namespace ferry::model
