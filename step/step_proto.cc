#include "step/step_proto.h"

#include "absl/strings/str_cat.h"

namespace ferry::step {

namespace cpb = control::v1;

void StepToProto(const Step& step, cpb::StepCommand* cmd) {
  cmd->set_step_id(step.step_id);
  for (uint64_t id : step.release) cmd->add_release(id);
  for (const StepSegment& s : step.segments) {
    cpb::Segment* seg = cmd->add_segments();
    seg->set_seq_id(s.seq_id);
    seg->set_start(s.start);
    for (int32_t t : s.tokens) seg->add_tokens(t);
    seg->set_sample(s.sample);
    seg->set_temperature(s.sampling.temperature);
    seg->set_top_k(s.sampling.top_k);
    seg->set_top_p(s.sampling.top_p);
    seg->set_seed(s.seed);
    if (s.sampling.top_logprobs >= 0) {
      seg->set_logprobs(true);
      seg->set_top_logprobs(s.sampling.top_logprobs);
    }
    for (int32_t p : s.new_pages) seg->add_new_pages(p);
    seg->set_fork_from(s.fork_from);
    seg->set_fork_length(s.fork_length);
    if (s.owner < 0) continue;
    seg->set_split(true);
    seg->set_owner(s.owner);
    seg->set_borrowed(s.borrowed);
    if (s.carry_from >= 0) {
      seg->set_carried(true);
      seg->set_carry_from(s.carry_from);
    }
    for (size_t k = 0; k < s.latent_pages.size(); ++k) {
      if (s.latent_pages[k].empty()) continue;
      cpb::RankPages* rp = seg->add_latent_pages();
      rp->set_rank(static_cast<int32_t>(k));
      for (int32_t p : s.latent_pages[k]) rp->add_pages(p);
    }
  }
  for (uint64_t id : step.end_borrow) cmd->add_end_borrow(id);
}

absl::StatusOr<Step> StepFromProto(const cpb::StepCommand& cmd, int rank, int world) {
  Step step;
  step.step_id = cmd.step_id();
  step.release.assign(cmd.release().begin(), cmd.release().end());
  step.end_borrow.assign(cmd.end_borrow().begin(), cmd.end_borrow().end());
  auto outside = [&](const char* what, int value) {
    return absl::InvalidArgumentError(absl::StrCat("step ", step.step_id, ": ", what, " rank ", value,
                                                   " outside [0, ", world, ")"));
  };
  for (const cpb::Segment& s : cmd.segments()) {
    StepSegment seg;
    seg.seq_id = s.seq_id();
    seg.start = s.start();
    seg.tokens.assign(s.tokens().begin(), s.tokens().end());
    seg.sample = s.sample();
    seg.sampling.temperature = s.temperature();
    seg.sampling.top_k = s.top_k();
    seg.sampling.top_p = s.top_p();
    seg.seed = s.seed();
    if (s.logprobs()) {
      if (s.top_logprobs() < 0 || s.top_logprobs() > kMaxTopLogprobs) {
        return absl::InvalidArgumentError(absl::StrCat("step ", step.step_id, ": sequence ", s.seq_id(), " asks for ",
                                                       s.top_logprobs(), " top log-probabilities; at most ",
                                                       kMaxTopLogprobs));
      }
      seg.sampling.top_logprobs = s.top_logprobs();
    }
    seg.new_pages.assign(s.new_pages().begin(), s.new_pages().end());
    seg.fork_from = s.fork_from();
    seg.fork_length = s.fork_length();
    if (s.split()) {
      if (s.owner() < 0 || s.owner() >= world) return outside("owner", s.owner());
      seg.owner = s.owner();
      seg.borrowed = s.borrowed();
      if (s.carried()) {
        if (s.carry_from() < 0 || s.carry_from() >= world) return outside("carry source", s.carry_from());
        seg.carry_from = s.carry_from();
      }
      seg.latent_pages.resize(static_cast<size_t>(world));
      for (const cpb::RankPages& rp : s.latent_pages()) {
        if (rp.rank() == rank) seg.latent_pages[static_cast<size_t>(rank)].assign(rp.pages().begin(), rp.pages().end());
      }
    }
    step.segments.push_back(std::move(seg));
  }
  return step;
}

void SampledToProto(std::span<const SampledToken> sampled, cpb::StepResult* res) {
  for (const SampledToken& t : sampled) {
    res->add_tokens(t.token);
    if (!t.logprob.has_value()) continue;
    cpb::SampledLogprobs* lp = res->add_logprobs();
    lp->set_logprob(*t.logprob);
    for (const TokenLogprob& top : t.top) {
      lp->add_top_ids(top.token);
      lp->add_top_logprobs(top.logprob);
    }
  }
}

absl::StatusOr<std::vector<SampledToken>> SampledFromProto(const cpb::StepResult& res, const Step& step,
                                                           int64_t vocab) {
  auto broken = [&](auto... why) {
    return absl::InternalError(absl::StrCat("rank ", res.rank(), "'s result of step ", step.step_id, ": ", why...));
  };
  std::vector<SampledToken> out;
  int next_logprobs = 0;
  for (const StepSegment& seg : step.segments) {
    if (!seg.sample) continue;
    const int i = static_cast<int>(out.size());
    if (i >= res.tokens_size()) return broken(res.tokens_size(), " tokens for more sampled segments");
    SampledToken t;
    t.token = res.tokens(i);
    if (t.token < -1 || t.token >= vocab) return broken("token ", t.token, " is outside the vocabulary [0, ", vocab, ")");
    if (seg.sampling.top_logprobs >= 0 && t.token >= 0) {
      if (next_logprobs >= res.logprobs_size()) return broken("no log-probabilities for sequence ", seg.seq_id);
      const cpb::SampledLogprobs& lp = res.logprobs(next_logprobs++);
      if (lp.top_ids_size() != lp.top_logprobs_size() || lp.top_ids_size() > seg.sampling.top_logprobs) {
        return broken(lp.top_ids_size(), " top ids and ", lp.top_logprobs_size(), " log-probabilities for ",
                      seg.sampling.top_logprobs, " asked");
      }
      t.logprob = lp.logprob();
      for (int j = 0; j < lp.top_ids_size(); ++j) {
        if (lp.top_ids(j) < 0 || lp.top_ids(j) >= vocab) {
          return broken("top token ", lp.top_ids(j), " is outside the vocabulary [0, ", vocab, ")");
        }
        t.top.push_back({lp.top_ids(j), lp.top_logprobs(j)});
      }
    }
    out.push_back(std::move(t));
  }
  if (static_cast<int>(out.size()) != res.tokens_size() || next_logprobs != res.logprobs_size()) {
    return broken(res.tokens_size(), " tokens and ", res.logprobs_size(), " log-probability entries for ",
                  out.size(), " sampled segments and ", next_logprobs, " that asked");
  }
  return out;
}

}  // namespace ferry::step
