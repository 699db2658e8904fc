// RunOnce's planning phases (coordinator/scheduler.h): which pieces of which requests the next
// step carries, and the pages each piece writes. Decode rows come first (a row that finds no
// page makes kept prompt-cache states give way, then preempts the newest running request), then
// the chunks of prompts being filled (which shrink to the pages there are), then admissions from
// the queue (each starting from the longest kept prefix, and under the latent split placed on an
// owner rank, borrowing or carrying as docs/owner-split.md says), all within the step's token
// budget.
#include <algorithm>

#include "coordinator/scheduler.h"

namespace ferry::coordinator {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A request's known tokens are its prompt and what it generated; `fed` of them are in the
// workers' state.
int64_t Known(const Request& r) { return static_cast<int64_t>(r.prompt.size() + r.generated.size()); }

int32_t TokenAt(const Request& r, int64_t i) {
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  return i < n ? r.prompt[static_cast<size_t>(i)] : r.generated[static_cast<size_t>(i - n)];
}

// Its next piece is one decode row.
bool IsDecode(const Request& r) { return !r.generated.empty() && Known(r) - r.fed == 1; }

}  // namespace

Scheduler::StepPlan Scheduler::PlanStep() {
  StepPlan p;
  p.step.step_id = next_step_id_;
  p.budget = opts_.max_batch_tokens;
  step_forks_.clear();
  ScheduleDecodes(p);
  ContinuePrefills(p);
  Admit(p);
  p.step.release = std::move(release_);
  release_.clear();
  p.step.end_borrow = std::move(end_borrow_);
  end_borrow_.clear();
  return p;
}

int Scheduler::MostFreeLatentRank() const {
  int most = 0;
  for (int k = 1; k < static_cast<int>(latent_books_.size()); ++k) {
    if (latent_books_[k]->free_pages() > latent_books_[most]->free_pages()) most = k;
  }
  return most;
}

int64_t Scheduler::TakePages(StepPlan& p, Request& r, int64_t want, std::vector<int32_t>* pages) {
  p.latent.assign(split() ? static_cast<size_t>(opts_.world) : 0, {});
  if (!books_) return want;
  const int64_t P = opts_.page_size;
  const int64_t held = static_cast<int64_t>(r.pages.size());
  int64_t room = (held + books_->free_pages()) * P - r.fed;  // tokens the pages could hold
  auto latent_room = [&](int k) {
    return (static_cast<int64_t>(r.latent_pages[static_cast<size_t>(k)].size()) + latent_books_[k]->free_pages()) * P -
           r.fed;
  };
  if (split()) {
    room = std::min(room, latent_room(r.owner));
    if (r.borrowed) {
      for (int k = 0; k < opts_.world; ++k) {
        if (latent_room(k) < std::min(want, room)) {
          EndBorrow(r, /*cut=*/r.fed + std::min(want, room) < static_cast<int64_t>(r.prompt.size()));
          break;
        }
      }
    }
  }
  const int64_t n = std::min(want, room);
  if (n <= 0) return 0;
  const int64_t need = (r.fed + n + P - 1) / P - held;
  if (need > 0) {
    *pages = *books_->Allocate(need);  // cannot fail: `room` counted the free pages
    r.pages.insert(r.pages.end(), pages->begin(), pages->end());
  }
  for (int k = 0; k < static_cast<int>(p.latent.size()); ++k) {
    if (k != r.owner && !r.borrowed) continue;
    std::vector<int32_t>& mine = r.latent_pages[static_cast<size_t>(k)];
    const int64_t lneed = (r.fed + n + P - 1) / P - static_cast<int64_t>(mine.size());
    if (lneed <= 0) continue;
    p.latent[static_cast<size_t>(k)] = *latent_books_[k]->Allocate(lneed);  // counted above
    if (k != r.owner) latent_counts_.borrowed_pages += lneed;
    mine.insert(mine.end(), p.latent[static_cast<size_t>(k)].begin(), p.latent[static_cast<size_t>(k)].end());
  }
  return n;
}

void Scheduler::AddSegment(StepPlan& p, const std::shared_ptr<Request>& r, int64_t n, std::vector<int32_t> pages) {
  step::StepSegment seg;
  seg.seq_id = r->seq_id;
  seg.start = r->fed;
  seg.sampling = r->sampling;
  seg.seed = r->seed;
  for (int64_t i = r->fed; i < r->fed + n; ++i) seg.tokens.push_back(TokenAt(*r, i));
  seg.sample = r->fed + n == Known(*r);
  seg.new_pages = std::move(pages);
  if (r->owner >= 0) {
    seg.owner = r->owner;
    seg.borrowed = r->borrowed;
    seg.latent_pages = p.latent;
  }
  p.budget -= n;
  p.step.segments.push_back(std::move(seg));
  p.in_step.push_back(r);
}

void Scheduler::ScheduleDecodes(StepPlan& p) {
  for (size_t i = 0; i < running_.size() && p.budget > 0; ++i) {
    const std::shared_ptr<Request> r = running_[i];
    if (!IsDecode(*r)) continue;
    if (r->borrowed) EndBorrow(*r);  // the fill is over: before its first decode round
    std::vector<int32_t> pages;
    while (TakePages(p, *r, 1, &pages) == 0) {
      // No page for this row: kept prompt-cache states give way first, then the newest running
      // request is preempted (it may be this one).
      if (EvictKept()) continue;
      const std::shared_ptr<Request> victim = running_.back();
      Preempt(victim);
      if (victim == r) break;
    }
    if (std::find(running_.begin(), running_.end(), r) == running_.end()) break;  // r itself went
    AddSegment(p, r, 1, std::move(pages));
  }
}

void Scheduler::ContinuePrefills(StepPlan& p) {
  for (size_t i = 0; i < running_.size() && p.budget > 0; ++i) {
    const std::shared_ptr<Request> r = running_[i];
    if (IsDecode(*r) || std::find(p.in_step.begin(), p.in_step.end(), r) != p.in_step.end()) continue;
    std::vector<int32_t> pages;
    int64_t n = TakePages(p, *r, std::min(p.budget, Known(*r) - r->fed), &pages);
    while (n <= 0) {
      // Kept states give way first; then a newer request not in this step is preempted, so
      // that prompts being filled can never hold every page between them and stall.
      if (!EvictKept()) {
        size_t v = running_.size();
        while (v > i + 1 && std::find(p.in_step.begin(), p.in_step.end(), running_[v - 1]) != p.in_step.end()) --v;
        if (v <= i + 1) break;
        Preempt(running_[v - 1]);
      }
      n = TakePages(p, *r, std::min(p.budget, Known(*r) - r->fed), &pages);
    }
    if (n > 0) AddSegment(p, r, n, std::move(pages));
  }
}

void Scheduler::Admit(StepPlan& p) {
  const int64_t P = opts_.page_size;
  while (p.budget > 0 && static_cast<int64_t>(running_.size()) < opts_.max_running) {
    std::shared_ptr<Request> r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (waiting_.empty()) break;
      r = waiting_.front();
    }
    // The prompt cache: start from the longest kept prefix, sharing its whole pages.
    PromptCache::Match hit;
    if (cache_ && r->generated.empty() && r->fed == 0) hit = cache_->Lookup(r->prompt);
    // The latent split: a resume stays with the owner of its kept rows when that owner has the
    // latent pages for the rest of its prompt. Otherwise it moves to the rank with the most free
    // latent pages (when that one has them all): its rows are carried there from a length of
    // carry_min_tokens, and below it the prompt runs as a fresh one (recomputed, borrowing).
    int carry_from = -1;
    bool recomputed = false;
    if (split() && hit.seq_id != 0) {
      const int owner = kept_latent_.at(hit.seq_id).first, most = MostFreeLatentRank();
      const int64_t all_pages = (Known(*r) + P - 1) / P;
      if (latent_books_[owner]->free_pages() < all_pages - hit.length / P && most != owner &&
          latent_books_[most]->free_pages() >= all_pages) {
        if (hit.length >= opts_.carry_min_tokens) {
          carry_from = owner;
        } else {
          hit = {};
          recomputed = true;
        }
      }
    }
    std::vector<int32_t> shared, shared_latent;
    if (books_ && hit.seq_id != 0) {
      const std::vector<int32_t>& kp = kept_pages_.at(hit.seq_id);
      shared.assign(kp.begin(), kp.begin() + hit.length / P);
    }
    r->fed = hit.length;  // as if admitted; undone below when it is not
    r->pages = shared;
    if (split()) {
      // A resumed state stays with the owner of its rows, or moves with them when carried (no
      // borrow: the others lack its history); a fresh prompt goes to the rank with the most free
      // latent pages and borrows.
      r->latent_pages.assign(static_cast<size_t>(opts_.world), {});
      if (hit.seq_id != 0 && carry_from >= 0) {
        r->owner = MostFreeLatentRank();  // as chosen above: every latent page is new there
        r->borrowed = false;
      } else if (hit.seq_id != 0) {
        const auto& [owner, lp] = kept_latent_.at(hit.seq_id);
        r->owner = owner;
        shared_latent.assign(lp.begin(), lp.begin() + hit.length / P);
        r->latent_pages[static_cast<size_t>(owner)] = shared_latent;
        r->borrowed = false;
      } else {
        r->owner = MostFreeLatentRank();
        r->borrowed = true;
      }
    }
    std::vector<int32_t> pages;
    int64_t n = TakePages(p, *r, std::min(p.budget, Known(*r) - r->fed), &pages);
    if (hit.seq_id != 0) step_forks_.push_back(hit.seq_id);
    while (n <= 0 && EvictKept()) n = TakePages(p, *r, std::min(p.budget, Known(*r) - r->fed), &pages);
    if (n <= 0) {  // no page for a new request: it keeps its place in the queue
      r->fed = 0;
      r->pages.clear();
      r->latent_pages.clear();
      r->owner = -1;
      r->borrowed = false;
      break;
    }
    if (!shared.empty()) (void)books_->AddRef(shared);
    if (!shared_latent.empty()) (void)latent_books_[static_cast<size_t>(r->owner)]->AddRef(shared_latent);
    if (split() && !r->borrowed) ++latent_counts_.remote_fills;
    if (carry_from >= 0) {
      ++latent_counts_.carries;
      latent_counts_.carried_tokens += hit.length;
    }
    if (recomputed) ++latent_counts_.recomputed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      waiting_.pop_front();
    }
    r->seq_id = next_seq_id_++;
    if (cache_ && r->generated.empty()) {
      if (observer_) observer_->OnPrefixLookup(static_cast<int64_t>(r->prompt.size()), hit.length);
      r->cached = hit.length;
    }
    if (!r->first_scheduled) {
      r->first_scheduled = Clock::now();
      if (observer_) observer_->OnScheduled(*r, Seconds(*r->first_scheduled - r->arrival));
    }
    running_.push_back(r);
    AddSegment(p, r, n, std::move(pages));
    p.step.segments.back().fork_from = hit.seq_id;
    p.step.segments.back().fork_length = hit.length;
    p.step.segments.back().carry_from = carry_from;
  }
}

}  // namespace ferry::coordinator
