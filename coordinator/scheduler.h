// The continuous-batching scheduler. Each step mixes one decode row for every running request
// that has a pending token with chunks of prompts being prefilled, under a token budget; new
// requests are admitted first-come first-served while lanes and budget allow. Sampling happens
// once, on rank 0 of the worker group, and the token goes back to every rank in the next step.
//
// Thread safety: Submit(), Abort() and Snapshot() may be called from any thread; the step loop
// (Start() or RunOnce()) runs on one thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/prompt_cache.h"
#include "coordinator/request.h"
#include "kvpool/page_books.h"
#include "step/step.h"

namespace ferry::coordinator {

// Runs one step on every rank and returns rank 0's sampled tokens (one per segment with
// `sample`, in order). INVALID_ARGUMENT: every rank refused the step before it changed any state
// (the group goes on without it; the step's requests fail). Any other error means the group can
// no longer serve (a rank died or failed).
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual absl::StatusOr<std::vector<step::SampledToken>> RunStep(const step::Step& step) = 0;
};

// What the latent split did so far (docs/owner-split.md), counted by the scheduler.
struct LatentSplitCounts {
  int64_t borrows_ended = 0;   // borrowed fills that gave their pages back
  int64_t borrows_cut = 0;     // borrows ended mid-fill: a rank ran out of latent pages
  int64_t borrowed_pages = 0;  // latent pages lent to fills on ranks other than their owners
  int64_t remote_fills = 0;    // fills that ran without borrowing (their history fetched)
  int64_t carries = 0;         // resumes whose kept rows went to a new owner (its own lacked room)
  int64_t carried_tokens = 0;  // tokens those carries moved
  int64_t recomputed = 0;      // such resumes shorter than carry_min_tokens, run as fresh prompts
};

// Hooks the scheduler calls as things happen (metrics). All optional.
class SchedulerObserver {
 public:
  virtual ~SchedulerObserver() = default;
  // kv_usage: the fraction of the cache in use: pool pages used / pool pages with a page pool,
  // else tokens held by running requests / (max_running * max_context).
  virtual void OnStep(int64_t tokens, int64_t running, int64_t waiting, double seconds, double kv_usage) {}
  // The scheduler's own time in a step: planning it and applying its results (the wait for the
  // workers left out).
  virtual void OnSchedulerTime(double seconds) {}
  virtual void OnFirstToken(const Request& r, double ttft_seconds) {}
  virtual void OnToken(const Request& r, double inter_token_seconds) {}
  virtual void OnScheduled(const Request& r, double queue_seconds) {}
  virtual void OnFinish(const Request& r, FinishReason reason, double e2e_seconds) {}
  virtual void OnPreempt(const Request& r) {}
  // A prompt-cache lookup of `queried` prompt tokens found `hit` of them.
  virtual void OnPrefixLookup(int64_t queried, int64_t hit) {}
  // The latent split, after each step: latent pages in use per rank, and the totals so far.
  virtual void OnLatentBooks(const std::vector<int64_t>& used, const LatentSplitCounts& counts) {}
};

struct SchedulerOptions {
  int64_t max_batch_tokens = 256;  // tokens a step may carry (decode rows + prefill chunks)
  int64_t max_running = 16;        // requests holding a lane at once (--parallel)
  int64_t max_queue = 64;          // requests waiting for a lane; past it Submit() refuses
  int64_t max_context = 4096;      // prompt + generated tokens a request may reach
  // The page pool the scheduler keeps the books of (the workers' arenas hold exactly these
  // pages): 0 leaves each worker's arena to grow on its own, with no preemption.
  int64_t kv_pages = 0;
  int64_t page_size = 512;  // tokens a page
  std::string kv_layout;    // "pages" / "windows" (the plan's; informational)
  // The prompt cache's budget in kept tokens (0: no prompt cache). With a page pool the kept
  // states hold pages too, and give them back before any running request is preempted.
  int64_t prompt_cache_tokens = 0;
  // Whether any prefix of a kept state can be reused (per-token caches only: glm_moe_dsa) or
  // only its whole length (recurrent state: glm5_next).
  bool prompt_cache_any_prefix = true;
  // Pool pages a kept state's fixed (recurrent) state holds besides its rows: the plan gives
  // each lane its fixed state outside the pool, so a state kept past its request is charged to
  // the pool (and to the prompt cache's budget) instead. 0: the family has none.
  int64_t kept_fixed_pages = 0;
  // The latent split (docs/owner-split.md): each conversation's latent rows on
  // one owner rank, chosen at admission (the most free latent pages, ties to the lowest rank); a
  // fresh prompt borrows latent pages on every rank for its fill while they have them. Needs a
  // page pool and world >= 2; latent_pages: pages in each rank's latent arena. A resume whose
  // owner lacks the pages for its fill moves to the rank with the most free latent pages: its
  // kept rows are carried there when it has carry_min_tokens or more, else recomputed.
  bool owner_split = false;
  int world = 1;
  int64_t latent_pages = 0;
  int64_t carry_min_tokens = 2048;
};

struct SchedulerSnapshot {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t steps = 0;
  int64_t live_tokens = 0;  // tokens held in the workers' state by running requests
  bool serving = true;
  std::string failure;
  int64_t used_pages = 0;   // of SchedulerOptions::kv_pages
  int64_t preemptions = 0;  // requests preempted so far
  int64_t kept_states = 0;  // conversations the prompt cache keeps
  std::vector<int64_t> latent_used_pages;  // per rank, with the latent split
  LatentSplitCounts latent;
};

class Scheduler {
 public:
  Scheduler(SchedulerOptions opts, StepRunner* runner, SchedulerObserver* observer = nullptr);
  ~Scheduler();

  // Replaces the options (the pool and cache the plan chose once the workers reported their
  // room). REQUIRES: before Start() or the first RunOnce().
  void Configure(SchedulerOptions opts);

  // Queues a request. RESOURCE_EXHAUSTED when max_queue requests already wait (the request is
  // not queued); UNAVAILABLE once the scheduler has stopped; ALREADY_EXISTS for a live id.
  absl::Status Submit(std::shared_ptr<Request> r);
  // Marks a live request for abort; false when no live request has that id, or it has a caller
  // (Request::caller) other than `caller` (empty: any, for the server's own use).
  bool Abort(const std::string& id, const std::string& caller = {});
  // Ends live request `id` at the next step with finish reason STOP (a stop string found in its
  // text by the API): counted and kept as a request that stopped, not as an aborted one.
  bool EndWithStop(const std::string& id);

  // Runs the step loop on its own thread until Stop().
  void Start();
  // Stops the loop; every live request ends with `reason` (error unless empty: abort).
  void Stop(const std::string& reason);
  // Runs one step if there is work; false when idle. For tests and the loop.
  bool RunOnce();

  SchedulerSnapshot Snapshot() const;
  // A copy: Configure() may replace the options while the server starts.
  SchedulerOptions options() const {
    std::lock_guard<std::mutex> lock(mu_);
    return opts_;
  }

 private:
  // RunOnce in phases: end what was aborted; plan the step (coordinator/step_plan.cc: decode rows,
  // then the chunks of prompts being filled, then admissions, each with the pages it writes);
  // run it on every rank; apply what came back (tokens to their requests, the ends of finished,
  // refused or failed ones) and publish the books.
  struct StepPlan {
    step::Step step;
    std::vector<std::shared_ptr<Request>> in_step;  // the request of each segment
    int64_t budget = 0;                             // tokens the step may still take
    // With the latent split: the latent pages the last TakePages handed out, by rank.
    std::vector<std::vector<int32_t>> latent;
  };
  void FinishAborted();
  StepPlan PlanStep();
  void ScheduleDecodes(StepPlan& p);
  void ContinuePrefills(StepPlan& p);
  void Admit(StepPlan& p);
  // Tokens of r (up to `want`) whose pages can be had now; takes those pages into `pages`, and
  // with the latent split the latent pages of the ranks holding r's rows into p.latent (the
  // owner's, and every rank's while r borrows; a borrower that runs out ends the borrow).
  int64_t TakePages(StepPlan& p, Request& r, int64_t want, std::vector<int32_t>* pages);
  void AddSegment(StepPlan& p, const std::shared_ptr<Request>& r, int64_t n, std::vector<int32_t> pages);
  // The latent split's owner for a conversation that starts or moves: the rank with the most free
  // latent pages, ties to the lowest.
  int MostFreeLatentRank() const;
  // false when the group can no longer serve (every live request has then failed).
  bool ApplyResults(StepPlan& p, absl::StatusOr<std::vector<step::SampledToken>>& tokens, Clock::time_point t0,
                    Clock::time_point t1);
  void Finish(const std::shared_ptr<Request>& r, FinishReason reason, const std::string& error = {});
  void ReleasePages(Request& r);
  // Releases a kept state: its conversation on the workers, its pages in the books.
  void DropKept(uint64_t seq_id);
  // Evicts the least recently used kept state that no admission of the step being built forks
  // from (step_forks_); false when there is none.
  bool EvictKept();
  void Preempt(const std::shared_ptr<Request>& r);
  // The latent split: ends r's borrow (the other ranks' latent pages go back to their books;
  // the workers drop their copies before the next step, unless r is not on them yet).
  // cut: the borrow ends before the fill does (a rank ran out of latent pages).
  void EndBorrow(Request& r, bool cut = false);
  bool split() const { return latent_books_.size() > 1; }
  void FailAll(const std::string& error);
  void Loop();

  SchedulerOptions opts_;  // fixed once the loop runs
  StepRunner* runner_;
  SchedulerObserver* observer_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> waiting_;             // GUARDED_BY(mu_)
  std::map<std::string, std::shared_ptr<Request>> live_;     // GUARDED_BY(mu_): waiting + running
  bool stopping_ = false;                                    // GUARDED_BY(mu_)
  bool serving_ = true;                                      // GUARDED_BY(mu_)
  std::string failure_;                                      // GUARDED_BY(mu_)
  int64_t steps_ = 0;                                        // GUARDED_BY(mu_)
  int64_t running_count_ = 0, live_tokens_ = 0;              // GUARDED_BY(mu_): copies for Snapshot()
  int64_t used_pages_ = 0, preemptions_count_ = 0;           // GUARDED_BY(mu_): copies for Snapshot()
  int64_t kept_states_ = 0;                                  // GUARDED_BY(mu_): copy for Snapshot()
  std::vector<int64_t> latent_used_;                         // GUARDED_BY(mu_): copy for Snapshot()
  LatentSplitCounts latent_counts_copy_;                     // GUARDED_BY(mu_): copy for Snapshot()

  // Step-loop state (loop thread only).
  std::vector<std::shared_ptr<Request>> running_;
  std::vector<uint64_t> release_;
  std::unique_ptr<kvpool::PageBooks> books_;  // null without a page pool
  std::unique_ptr<PromptCache> cache_;        // null without a prompt cache
  std::map<uint64_t, std::vector<int32_t>> kept_pages_;  // pool pages of kept states
  // The latent split: each rank's latent books; a kept state's owner and its latent pages there.
  std::vector<std::unique_ptr<kvpool::PageBooks>> latent_books_;
  std::map<uint64_t, std::pair<int, std::vector<int32_t>>> kept_latent_;
  std::vector<uint64_t> end_borrow_;
  // Kept states the step being built forks from: they must reach the workers intact.
  std::vector<uint64_t> step_forks_;
  LatentSplitCounts latent_counts_;
  int64_t preemptions_ = 0;
  uint64_t next_seq_id_ = 1;
  uint64_t next_step_id_ = 1;
  std::thread thread_;
};

}  // namespace ferry::coordinator
