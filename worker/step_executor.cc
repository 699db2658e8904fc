#include "worker/step_executor.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/cache/paged_cache.h"
#include "model/families/step_rows.h"

namespace ferry::worker {

absl::Status FailedAfterChanges(absl::string_view context, const absl::Status& st) {
  const absl::Status out = context.empty() ? st : WithContext(context, st);
  if (absl::IsInvalidArgument(out)) return absl::InternalError(out.message());
  return out;
}

StepExecutor::StepExecutor(std::unique_ptr<model::CausalLM> model, int rank) : model_(std::move(model)), rank_(rank) {}

int64_t StepExecutor::state_bytes() const {
  int64_t n = 0;
  for (const auto& [id, s] : seqs_) n += s->bytes();
  return n;
}

const std::vector<int32_t>& StepExecutor::my_latent(const StepSegment& seg) const {
  static const std::vector<int32_t> kNone;
  return static_cast<size_t>(rank_) < seg.latent_pages.size() ? seg.latent_pages[static_cast<size_t>(rank_)] : kNone;
}

absl::StatusOr<std::vector<step::SampledToken>> StepExecutor::Execute(const Step& step) {
  // Validate the whole step before touching any state.
  std::set<uint64_t> released(step.release.begin(), step.release.end());
  for (const StepSegment& seg : step.segments) {
    auto it = seqs_.find(seg.seq_id);
    const bool is_new = it == seqs_.end() || released.count(seg.seq_id);
    int64_t have = is_new ? 0 : it->second->length();
    if (seg.fork_from != 0) {
      auto src = seqs_.find(seg.fork_from);
      if (!is_new || src == seqs_.end() || released.count(seg.fork_from) ||
          seg.fork_length > src->second->length() || seg.fork_length < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", step.step_id, ": sequence ", seg.seq_id, " cannot fork ", seg.fork_length, " tokens of sequence ",
            seg.fork_from, src == seqs_.end() ? " (unknown)" : ""));
      }
      have = seg.fork_length;
    }
    // A carry must name the rank that really holds the kept rows: every rank knows the kept
    // conversation's owner, so all refuse alike, before any exchange.
    if (seg.carry_from >= 0) {
      auto src = seqs_.find(seg.fork_from);
      const bool from_owner = src != seqs_.end() && src->second->latent_owner() == seg.carry_from &&
                              !src->second->latent_borrowed();
      if (seg.fork_from == 0 || seg.owner < 0 || seg.borrowed || seg.owner == seg.carry_from || !from_owner) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", step.step_id, ": sequence ", seg.seq_id, " cannot carry rows from rank ", seg.carry_from,
            " to owner ", seg.owner,
            seg.fork_from == 0 ? " without a kept conversation"
                               : (from_owner ? "" : absl::StrCat(": the kept conversation ", seg.fork_from,
                                                                 " is not owned by rank ", seg.carry_from))));
      }
    }
    if (seg.start != have) {
      return absl::InvalidArgumentError(absl::StrCat("step ", step.step_id, ": sequence ", seg.seq_id, " starts at ",
                                                     seg.start, " but this rank holds ", have, " of its tokens"));
    }
    const int64_t vocab = model_->config().vocab_size;
    for (size_t i = 0; i < seg.tokens.size(); ++i) {
      if (seg.tokens[i] < 0 || seg.tokens[i] >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("step ", step.step_id, ": sequence ", seg.seq_id, " token ", i,
                                                       " is ", seg.tokens[i], ", outside the vocabulary [0, ", vocab,
                                                       ")"));
      }
    }
  }
  for (uint64_t id : step.end_borrow) {
    auto it = seqs_.find(id);
    if (released.count(id)) continue;  // dropped anyway
    if (it == seqs_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("step ", step.step_id, ": sequence ", id,
                                                     " cannot end a borrow: this rank does not hold it"));
    }
  }
  for (uint64_t id : step.release) seqs_.erase(id);
  for (uint64_t id : step.end_borrow) {
    if (released.count(id)) continue;
    model::SequenceState& s = *seqs_.at(id);
    if (absl::Status st = s.SetLatentOwner(s.latent_owner(), false); !st.ok()) {
      return absl::InternalError(absl::StrCat("step ", step.step_id, ": sequence ", id, ": ", st.message()));
    }
  }
  if (step.segments.empty()) return std::vector<step::SampledToken>{};

  std::vector<model::ForwardSegment> fwd;
  std::vector<model::LatentCarry> carries;
  std::vector<uint64_t> created;
  for (const StepSegment& seg : step.segments) {
    auto it = seqs_.find(seg.seq_id);
    if (it == seqs_.end()) {
      std::unique_ptr<model::SequenceState> state;
      if (seg.fork_from != 0) {
        // The prompt cache: the kept conversation's first fork_length tokens (whole pages
        // shared; with a page pool the partial one is copied into the segment's first new page).
        // A carry's latent table starts empty: all of its latent pages are adopted below.
        const int64_t P = model_->arena().page_size();
        int32_t copy_page = -1, latent_copy = -1;
        if (seg.fork_length % P != 0 && !seg.new_pages.empty()) copy_page = seg.new_pages.front();
        if (seg.fork_length % P != 0 && !my_latent(seg).empty()) latent_copy = my_latent(seg).front();
        const model::SequenceState& kept = *seqs_.at(seg.fork_from);
        absl::StatusOr<std::unique_ptr<model::SequenceState>> copy =
            seg.carry_from >= 0 ? kept.ForkCarriedAt(seg.fork_length, copy_page, seg.owner)
                                : kept.ForkSplitAt(seg.fork_length, copy_page, latent_copy);
        absl::Status st = copy.status();
        if (!st.ok()) {
          for (uint64_t id : created) seqs_.erase(id);
          return absl::InternalError(absl::StrCat("step ", step.step_id, ": fork of sequence ", seg.fork_from, ": ",
                                                  st.message()));
        }
        state = std::move(*copy);
      } else {
        state = model_->NewSequence();
        if (absl::Status st = state->SetLatentOwner(seg.owner, seg.borrowed); !st.ok()) {
          for (uint64_t id : created) seqs_.erase(id);
          return absl::InternalError(absl::StrCat("step ", step.step_id, ": sequence ", seg.seq_id, ": ", st.message()));
        }
      }
      it = seqs_.emplace(seg.seq_id, std::move(state)).first;
      created.push_back(seg.seq_id);
    }
    // A fork's copy page is already in its table; the rest are appended.
    std::span<const int32_t> adopt(seg.new_pages);
    if (seg.fork_from != 0 && seg.fork_length % model_->arena().page_size() != 0 && !adopt.empty()) {
      adopt = adopt.subspan(1);
    }
    std::span<const int32_t> adopt_latent(my_latent(seg));
    if (seg.fork_from != 0 && seg.carry_from < 0 && seg.fork_length % model_->arena().page_size() != 0 &&
        !adopt_latent.empty()) {
      adopt_latent = adopt_latent.subspan(1);
    }
    if (!adopt_latent.empty()) {
      // Only the ranks holding the rows get latent pages, so only they can fail here while the
      // others go on into the step's exchanges: INTERNAL (the group cannot go on), not the
      // INVALID_ARGUMENT every rank would return alike.
      if (absl::Status st = it->second->AdoptLatentPages(adopt_latent); !st.ok()) {
        for (uint64_t id : created) seqs_.erase(id);
        return absl::InternalError(absl::StrCat("step ", step.step_id, ": sequence ", seg.seq_id, ": ", st.message()));
      }
    }
    if (!adopt.empty()) {
      if (absl::Status st = it->second->AdoptPages(adopt); !st.ok()) {
        for (uint64_t id : created) seqs_.erase(id);
        return absl::InternalError(absl::StrCat("step ", step.step_id, ": sequence ", seg.seq_id, ": ", st.message()));
      }
    }
    if (seg.carry_from >= 0 && std::find(created.begin(), created.end(), seg.seq_id) != created.end()) {
      carries.push_back({seqs_.at(seg.fork_from).get(), it->second.get(), seg.carry_from, seg.owner, seg.fork_length});
    }
    // The model samples where the logits are: no logits come to the host.
    std::optional<kernels::RowSampler> sampler;
    if (seg.sample) sampler = model::SamplerAt(seg.sampling, seg.seed, seg.start + static_cast<int64_t>(seg.tokens.size()));
    fwd.push_back(model::ForwardSegment{it->second.get(), seg.tokens, false, sampler});
  }
  // Carried rows arrive before the forward reads them (every rank runs this exchange).
  if (absl::Status st = model_->CarryLatent(carries); !st.ok()) {
    for (uint64_t id : created) seqs_.erase(id);
    return FailedAfterChanges(absl::StrCat("step ", step.step_id, ": carrying latent rows"), st);
  }
  auto out = model_->Forward(fwd);
  if (!out.ok()) {
    for (uint64_t id : created) seqs_.erase(id);
    return FailedAfterChanges("", out.status());
  }
  std::vector<step::SampledToken> tokens;
  if (rank_ != 0) return tokens;
  for (size_t s = 0; s < step.segments.size(); ++s) {
    if (step.segments[s].sample) tokens.push_back(model::SampledOf(out->picks[s], step.segments[s].sampling.top_logprobs));
  }
  return tokens;
}

}  // namespace ferry::worker
