#include "coordinator/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace ferry::coordinator {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Scheduler::Scheduler(SchedulerOptions opts, StepRunner* runner, SchedulerObserver* observer)
    : runner_(runner), observer_(observer) {
  Configure(opts);
}

void Scheduler::Configure(SchedulerOptions opts) {
  std::lock_guard<std::mutex> lock(mu_);
  opts_ = opts;
  books_.reset();
  cache_.reset();
  latent_books_.clear();
  if (opts_.kv_pages > 0) books_ = std::make_unique<kvpool::PageBooks>(opts_.kv_pages);
  if (books_ && opts_.owner_split && opts_.world > 1) {
    for (int k = 0; k < opts_.world; ++k) {
      latent_books_.push_back(std::make_unique<kvpool::PageBooks>(opts_.latent_pages > 0 ? opts_.latent_pages
                                                                                           : opts_.kv_pages));
    }
  }
  if (opts_.prompt_cache_tokens > 0) {
    cache_ = std::make_unique<PromptCache>(opts_.prompt_cache_tokens, opts_.prompt_cache_any_prefix,
                                           books_ ? opts_.kept_fixed_pages * opts_.page_size : 0);
  }
}

Scheduler::~Scheduler() { Stop(""); }

absl::Status Scheduler::Submit(std::shared_ptr<Request> r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!serving_ || stopping_) {
      return absl::UnavailableError(absl::StrCat("the server is not serving", failure_.empty() ? "" : ": ", failure_));
    }
    if (live_.count(r->id)) {
      return absl::AlreadyExistsError(absl::StrCat("request id '", r->id, "' is already live"));
    }
    // Requests that will take a free lane at the next step do not count against the queue.
    const int64_t free_lanes = std::max<int64_t>(0, opts_.max_running - running_count_);
    if (static_cast<int64_t>(waiting_.size()) >= opts_.max_queue + free_lanes) {
      return absl::ResourceExhaustedError(absl::StrCat("the admission queue is full: ", waiting_.size(),
                                                       " requests wait (--max-queue ", opts_.max_queue, ", ",
                                                       free_lanes, " free lanes); retry later"));
    }
    waiting_.push_back(r);
    live_[r->id] = r;
  }
  cv_.notify_all();
  return absl::OkStatus();
}

bool Scheduler::Abort(const std::string& id, const std::string& caller) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  if (!caller.empty() && !it->second->caller.empty() && it->second->caller != caller) return false;
  it->second->abort_requested = true;
  cv_.notify_all();
  return true;
}

bool Scheduler::EndWithStop(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  it->second->stop_requested = true;
  it->second->abort_requested = true;
  cv_.notify_all();
  return true;
}

SchedulerSnapshot Scheduler::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerSnapshot s;
  s.running = running_count_;
  s.waiting = static_cast<int64_t>(waiting_.size());
  s.steps = steps_;
  s.live_tokens = live_tokens_;
  s.used_pages = used_pages_;
  s.preemptions = preemptions_count_;
  s.kept_states = kept_states_;
  s.latent_used_pages = latent_used_;
  s.latent = latent_counts_copy_;
  s.serving = serving_;
  s.failure = failure_;
  return s;
}

void Scheduler::Finish(const std::shared_ptr<Request>& r, FinishReason reason, const std::string& error) {
  const Clock::time_point now = Clock::now();
  RequestEvent e;
  e.finished = true;
  e.reason = reason;
  e.error = error;
  if (!r->stream) {
    e.tokens = r->generated;
    e.logprobs = r->logprobs;
  }
  e.usage.prompt_tokens = static_cast<int64_t>(r->prompt.size());
  e.usage.completion_tokens = static_cast<int64_t>(r->generated.size());
  e.usage.cached_tokens = r->cached;
  e.timings.queue_seconds = Seconds((r->first_scheduled ? *r->first_scheduled : now) - r->arrival);
  e.timings.time_to_first_token_seconds = r->first_token ? Seconds(*r->first_token - r->arrival) : 0.0;
  e.timings.e2e_seconds = Seconds(now - r->arrival);
  if (observer_) observer_->OnFinish(*r, reason, e.timings.e2e_seconds);
  {
    // Not live any more before its client hears the end: the id can be reused at once.
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(r->id);
  }
  r->events.Push(std::move(e));
  if (r->seq_id != 0) {
    // A kept fixed state holds pool pages of its own: other kept states give way for them.
    std::vector<int32_t> fixed;
    const bool keep = cache_ && (reason == FinishReason::kStop || reason == FinishReason::kLength) && r->fed > 0;
    if (keep && r->borrowed) EndBorrow(*r);  // a kept state holds its latent rows on its owner only
    if (keep && books_ && opts_.kept_fixed_pages > 0) {
      while (books_->free_pages() < opts_.kept_fixed_pages && EvictKept()) {
      }
      if (books_->free_pages() >= opts_.kept_fixed_pages) fixed = *books_->Allocate(opts_.kept_fixed_pages);
    }
    if (keep && static_cast<int64_t>(fixed.size()) == (books_ ? opts_.kept_fixed_pages : 0)) {
      // Keep its state for later prompts: the tokens its state holds are the first `fed` known.
      std::vector<int32_t> tokens(r->prompt.begin(), r->prompt.end());
      tokens.insert(tokens.end(), r->generated.begin(), r->generated.end());
      tokens.resize(static_cast<size_t>(r->fed));
      const std::vector<uint64_t> dropped = cache_->Insert(std::move(tokens), r->seq_id);
      // The kept state holds its rows' pages (first, in token order) and its fixed pages.
      kept_pages_[r->seq_id] = std::move(r->pages);
      r->pages.clear();
      kept_pages_[r->seq_id].insert(kept_pages_[r->seq_id].end(), fixed.begin(), fixed.end());
      if (split() && r->owner >= 0) {
        kept_latent_[r->seq_id] = {r->owner, std::move(r->latent_pages[static_cast<size_t>(r->owner)])};
        r->latent_pages[static_cast<size_t>(r->owner)].clear();
      }
      for (uint64_t id : dropped) DropKept(id);
    } else {
      if (books_ && !fixed.empty()) (void)books_->Release(fixed);
      release_.push_back(r->seq_id);
    }
  }
  ReleasePages(*r);
}

void Scheduler::DropKept(uint64_t seq_id) {
  release_.push_back(seq_id);
  auto it = kept_pages_.find(seq_id);
  if (it == kept_pages_.end()) return;
  if (books_ && !it->second.empty()) (void)books_->Release(it->second);
  kept_pages_.erase(it);
  if (auto lt = kept_latent_.find(seq_id); lt != kept_latent_.end()) {
    if (!lt->second.second.empty()) (void)latent_books_[static_cast<size_t>(lt->second.first)]->Release(lt->second.second);
    kept_latent_.erase(lt);
  }
}

void Scheduler::EndBorrow(Request& r, bool cut) {
  if (cut) ++latent_counts_.borrows_cut;
  for (size_t k = 0; k < r.latent_pages.size(); ++k) {
    if (static_cast<int>(k) == r.owner || r.latent_pages[k].empty()) continue;
    (void)latent_books_[k]->Release(r.latent_pages[k]);
    r.latent_pages[k].clear();
  }
  r.borrowed = false;
  ++latent_counts_.borrows_ended;
  if (r.seq_id != 0) end_borrow_.push_back(r.seq_id);
}

bool Scheduler::EvictKept() {
  if (!cache_) return false;
  const uint64_t id = cache_->EvictLru(step_forks_);
  if (id == 0) return false;
  DropKept(id);
  return true;
}

void Scheduler::ReleasePages(Request& r) {
  if (books_ && !r.pages.empty()) (void)books_->Release(r.pages);
  r.pages.clear();
  for (size_t k = 0; k < r.latent_pages.size(); ++k) {
    if (!r.latent_pages[k].empty()) (void)latent_books_[k]->Release(r.latent_pages[k]);
  }
  r.latent_pages.clear();
  r.owner = -1;
  r.borrowed = false;
}

void Scheduler::Preempt(const std::shared_ptr<Request>& r) {
  // Its state is dropped on every rank and recomputed from its known tokens when it is admitted
  // again, at the head of the queue; the tokens it already generated stay (and are not resent).
  running_.erase(std::find(running_.begin(), running_.end(), r));
  release_.push_back(r->seq_id);
  end_borrow_.erase(std::remove(end_borrow_.begin(), end_borrow_.end(), r->seq_id), end_borrow_.end());
  ReleasePages(*r);
  r->seq_id = 0;
  r->fed = 0;
  ++preemptions_;
  if (observer_) observer_->OnPreempt(*r);
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.push_front(r);
}

void Scheduler::FailAll(const std::string& error) {
  std::vector<std::shared_ptr<Request>> all = running_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.insert(all.end(), waiting_.begin(), waiting_.end());
    waiting_.clear();
  }
  running_.clear();
  for (auto& r : all) Finish(r, error.empty() ? FinishReason::kAbort : FinishReason::kError, error);
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_count_ = 0;
    live_tokens_ = 0;
  }
  if (observer_) observer_->OnStep(0, 0, 0, 0.0, 0);  // the gauges show the empty state
}

bool Scheduler::RunOnce() {
  const Clock::time_point start = Clock::now();
  FinishAborted();
  StepPlan p = PlanStep();
  if (p.step.segments.empty() && p.step.release.empty() && p.step.end_borrow.empty()) return false;
  ++next_step_id_;
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<std::vector<step::SampledToken>> tokens = runner_->RunStep(p.step);
  const Clock::time_point t1 = Clock::now();
  step_forks_.clear();  // the workers forked them: they may go now
  const bool ran = ApplyResults(p, tokens, t0, t1);
  if (observer_) observer_->OnSchedulerTime(Seconds((t0 - start) + (Clock::now() - t1)));
  return ran;
}

void Scheduler::FinishAborted() {
  for (size_t i = 0; i < running_.size();) {
    if (running_[i]->abort_requested) {
      auto r = running_[i];
      running_.erase(running_.begin() + static_cast<long>(i));
      Finish(r, r->stop_requested ? FinishReason::kStop : FinishReason::kAbort);
    } else {
      ++i;
    }
  }
  std::vector<std::shared_ptr<Request>> aborted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if ((*it)->abort_requested) {
        aborted.push_back(*it);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& r : aborted) Finish(r, r->stop_requested ? FinishReason::kStop : FinishReason::kAbort);
}

bool Scheduler::ApplyResults(StepPlan& p, absl::StatusOr<std::vector<step::SampledToken>>& tokens,
                             Clock::time_point t0, Clock::time_point t1) {
  if (absl::IsInvalidArgument(tokens.status())) {
    // Refused unchanged by every rank: its requests fail, the rest go on. What the step would have
    // created on the workers does not exist there; Finish releases the rest as usual.
    const std::string why = absl::StrCat("step ", p.step.step_id, " was refused: ", tokens.status().message());
    FERRY_LOG(ERROR) << why << "; its requests fail, serving goes on";
    std::vector<std::shared_ptr<Request>> failed;
    for (const auto& r : p.in_step) {
      if (std::find(failed.begin(), failed.end(), r) == failed.end()) failed.push_back(r);
    }
    // Nothing of the step was applied: its releases go with the next one, and its ended borrows
    // too unless they were all it carried (then they are what was refused).
    release_.insert(release_.begin(), p.step.release.begin(), p.step.release.end());
    if (!p.step.segments.empty()) end_borrow_.insert(end_borrow_.begin(), p.step.end_borrow.begin(), p.step.end_borrow.end());
    for (const auto& r : failed) {
      running_.erase(std::find(running_.begin(), running_.end(), r));
      Finish(r, FinishReason::kError, why);
    }
    return true;
  }
  if (!tokens.ok()) {
    const std::string why = absl::StrCat("step ", p.step.step_id, " failed: ", tokens.status().message());
    FERRY_LOG(ERROR) << why << "; the scheduler stops serving";
    {
      std::lock_guard<std::mutex> lock(mu_);
      serving_ = false;
      failure_ = why;
    }
    FailAll(why);
    return false;
  }

  // 4. Hand out the sampled tokens and finish what is done.
  int64_t step_tokens = 0;
  size_t next_token = 0;
  std::vector<std::shared_ptr<Request>> done;
  std::vector<FinishReason> reasons;
  std::vector<std::string> errors;
  for (size_t s = 0; s < p.step.segments.size(); ++s) {
    const step::StepSegment& seg = p.step.segments[s];
    const auto& r = p.in_step[s];
    step_tokens += static_cast<int64_t>(seg.tokens.size());
    r->fed += static_cast<int64_t>(seg.tokens.size());
    if (!seg.sample) continue;
    if (next_token >= tokens->size()) {
      // A runner that returns too few tokens is a broken invariant of the control plane.
      const std::string why =
          absl::StrCat("step ", p.step.step_id, " returned ", tokens->size(), " tokens for more sampled segments");
      {
        std::lock_guard<std::mutex> lock(mu_);
        serving_ = false;
        failure_ = why;
      }
      FailAll(why);
      return false;
    }
    step::SampledToken& sampled = (*tokens)[next_token++];
    const int32_t tok = sampled.token;
    if (tok < 0) {
      // Nothing was picked: this request fails alone; the others in the step go on.
      done.push_back(r);
      reasons.push_back(FinishReason::kError);
      errors.push_back(absl::StrCat("the model's logits after ", r->fed,
                                    " tokens hold a NaN or an infinity; no token was sampled"));
      continue;
    }
    r->generated.push_back(tok);
    if (r->sampling.top_logprobs >= 0) r->logprobs.push_back(sampled);
    if (!r->first_token) {
      r->first_token = t1;
      if (observer_) observer_->OnFirstToken(*r, Seconds(t1 - r->arrival));
    } else if (observer_) {
      observer_->OnToken(*r, Seconds(t1 - *r->last_token));
    }
    r->last_token = t1;
    if (r->stream) {
      RequestEvent e;
      e.tokens = {tok};
      if (r->sampling.top_logprobs >= 0) e.logprobs = {std::move(sampled)};
      r->events.Push(std::move(e));
    }
    const int64_t total = static_cast<int64_t>(r->prompt.size() + r->generated.size());
    if (std::find(r->stop_token_ids.begin(), r->stop_token_ids.end(), tok) != r->stop_token_ids.end()) {
      done.push_back(r);
      reasons.push_back(FinishReason::kStop);
      errors.emplace_back();
    } else if (static_cast<int64_t>(r->generated.size()) >= r->max_tokens || total >= opts_.max_context) {
      done.push_back(r);
      reasons.push_back(FinishReason::kLength);
      errors.emplace_back();
    }
  }
  for (size_t i = 0; i < done.size(); ++i) {
    running_.erase(std::find(running_.begin(), running_.end(), done[i]));
    Finish(done[i], reasons[i], errors[i]);
  }
  int64_t live_tokens = 0;
  for (const auto& r : running_) live_tokens += r->fed;
  int64_t waiting = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++steps_;
    running_count_ = static_cast<int64_t>(running_.size());
    live_tokens_ = live_tokens;
    used_pages_ = books_ ? books_->used_pages() : 0;
    kept_states_ = cache_ ? cache_->kept_states() : 0;
    latent_used_.clear();
    for (const auto& b : latent_books_) latent_used_.push_back(b->used_pages());
    latent_counts_copy_ = latent_counts_;
    preemptions_count_ = preemptions_;
    waiting = static_cast<int64_t>(waiting_.size());
  }
  if (observer_) {
    const double usage = books_ ? static_cast<double>(books_->used_pages()) / static_cast<double>(books_->num_pages())
                                : static_cast<double>(live_tokens) /
                                      static_cast<double>(opts_.max_running * opts_.max_context);
    observer_->OnStep(step_tokens, static_cast<int64_t>(running_.size()), waiting, Seconds(t1 - t0), usage);
    if (split()) {
      std::vector<int64_t> used;
      for (const auto& b : latent_books_) used.push_back(b->used_pages());
      observer_->OnLatentBooks(used, latent_counts_);
    }
  }
  return true;
}

void Scheduler::Loop() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ || !serving_) break;
    }
    if (RunOnce()) continue;
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_ || !serving_) break;
    // Idle: wait for a submission or an abort (aborts of waiting requests need a pass too).
    cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
}

void Scheduler::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || thread_.joinable()) return;
  thread_ = std::thread([this] { Loop(); });
}

void Scheduler::Stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (failure_.empty()) failure_ = reason;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  FailAll(reason);
}

}  // namespace ferry::coordinator
