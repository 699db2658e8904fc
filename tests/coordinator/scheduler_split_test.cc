// The scheduler with the latent split (docs/owner-split.md) over W ranks in this process: the
// same tokens as the replicated engine through borrowed fills, cut borrows, remote fills and
// resumes, and no page left behind on any rank.
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "coordinator/scheduler.h"
#include "model/families/causal_lm.h"
#include "model/families/glm_moe_dsa.h"
#include "tests/catch.h"
#include "tests/coordinator/scheduler_helpers.h"
#include "tests/testing/thread_collective.h"
#include "worker/step_executor.h"

namespace ferry::coordinator {
namespace {

using namespace scheduler_testing;

// W ranks in this process: each step runs on every rank's thread (tensor parallel over a
// ThreadGroup); rank 0's tokens come back.
class GroupRunner final : public StepRunner {
 public:
  GroupRunner(const std::string& dir, int world, model::CacheOptions cache) : group_(world) {
    for (int r = 0; r < world; ++r) {
      auto m = model::LoadCausalLM(dir, model::TensorParallel{r, world, group_.rank(r)}, cache);
      REQUIRE(m.ok());
      execs_.push_back(std::make_unique<worker::StepExecutor>(std::move(*m), r));
    }
  }
  absl::StatusOr<std::vector<step::SampledToken>> RunStep(const step::Step& step) override {
    std::vector<absl::StatusOr<std::vector<step::SampledToken>>> out(execs_.size(),
                                                                     std::vector<step::SampledToken>{});
    std::vector<std::thread> threads;
    for (size_t r = 0; r < execs_.size(); ++r) {
      threads.emplace_back([&, r] { out[r] = execs_[r]->Execute(step); });
    }
    for (auto& t : threads) t.join();
    for (const auto& o : out) {
      if (!o.ok()) return o.status();
    }
    return out[0];
  }
  const model::CausalLM& model(int r) const { return execs_[r]->model(); }

 private:
  ferry::testing::ThreadGroup group_;
  std::vector<std::unique_ptr<worker::StepExecutor>> execs_;
};

struct SplitRun {
  std::vector<std::vector<int32_t>> tokens;
  SchedulerSnapshot snap;
  model::OwnerSplitStats stats;  // rows_shipped and rows_carried summed over the ranks
};

// The options of these runs: pages of 16 tokens, `pages` in the pool and, with the split,
// `latent_pages` latent pages on each rank; a prompt cache that keeps everything.
SchedulerOptions SplitOptions(const std::string& dir, int world, bool split, int64_t pages, int64_t latent_pages) {
  SchedulerOptions opts;
  opts.kv_pages = pages;
  opts.page_size = 16;
  opts.prompt_cache_tokens = 100000;
  opts.prompt_cache_any_prefix = dir == kDsa;
  opts.owner_split = split;
  opts.world = world;
  opts.latent_pages = latent_pages;
  return opts;
}

// Every request's tokens (each must end without an error), the snapshot and the ranks' traffic.
SplitRun Gather(const GroupRunner& runner, const Scheduler& sched, const std::vector<std::shared_ptr<Request>>& reqs,
                int world) {
  SplitRun out;
  for (auto& r : reqs) {
    std::vector<int32_t> none;
    RequestEvent e = Collect(*r, &none);
    INFO(r->id << ": " << e.error);
    CHECK(e.error.empty());
    out.tokens.push_back(e.tokens);
  }
  out.snap = sched.Snapshot();
  for (int r = 0; r < world; ++r) {
    out.stats.rows_shipped += runner.model(r).owner_split_stats().rows_shipped;
    out.stats.rows_carried += runner.model(r).owner_split_stats().rows_carried;
  }
  return out;
}

// 10 requests (prompts of 20 to 60 tokens, past index_topk 16), then 3 resumes of finished
// conversations through the prompt cache, on a pool of `pages` pages of 16 tokens (and, with
// the split, `latent_pages` latent pages on each rank).
SplitRun RunSplit(const std::string& dir, int world, bool split, int64_t pages, int64_t latent_pages) {
  GroupRunner runner(dir, world, model::CacheOptions{16, pages});
  SchedulerOptions opts = SplitOptions(dir, world, split, pages, latent_pages);
  opts.max_context = 96;
  opts.max_batch_tokens = 40;
  opts.max_running = 6;
  Scheduler sched(opts, &runner);
  std::mt19937 rng(53);
  std::vector<std::shared_ptr<Request>> reqs;
  for (int i = 0; i < 10; ++i) {
    std::vector<int32_t> prompt(20 + rng() % 41);
    for (int32_t& t : prompt) t = static_cast<int32_t>(2 + rng() % 380);
    reqs.push_back(MakeRequest("s" + std::to_string(i), prompt, 3 + rng() % 8));
    REQUIRE(sched.Submit(reqs.back()).ok());
  }
  RunUntilIdle(sched);
  for (int i = 0; i < 3; ++i) {
    // Resume conversation i: its prompt, its reply and a new suffix.
    std::vector<int32_t> p = reqs[i]->prompt;
    p.insert(p.end(), reqs[i]->generated.begin(), reqs[i]->generated.end());
    for (int k = 0; k < 7; ++k) p.push_back(static_cast<int32_t>(5 + (k * 13 + i) % 370));
    reqs.push_back(MakeRequest("r" + std::to_string(i), p, 5));
    REQUIRE(sched.Submit(reqs.back()).ok());
    RunUntilIdle(sched);
  }
  return Gather(runner, sched, reqs, world);
}

TEST_CASE("scheduler: the latent split gives the replicated engine's tokens through borrow - cut borrow - "
          "remote fill and resume (both families)", "[scheduler][owner_split]") {
  for (const std::string& dir : {kDsa, kNext}) {
  for (int world : {2, 4}) {
    for (int64_t latent : {64, 10}) {
      INFO(dir << " W=" << world << ", " << latent << " latent pages a rank");
      const SplitRun rep = RunSplit(dir, world, false, 64, 64);
      const SplitRun split = RunSplit(dir, world, true, 64, latent);
      REQUIRE(rep.tokens.size() == split.tokens.size());
      for (size_t i = 0; i < rep.tokens.size(); ++i) {
        INFO("request " << i);
        CHECK(!split.tokens[i].empty());
        CHECK(split.tokens[i] == rep.tokens[i]);
      }
      CHECK(rep.stats.rows_shipped == 0);
      CHECK(split.stats.rows_shipped > 0);
      CHECK(split.snap.latent.borrows_ended > 0);    // fills that borrowed and gave the pages back
      CHECK(split.snap.latent.borrowed_pages >= (world - 1) * split.snap.latent.borrows_ended);
      CHECK(split.snap.latent.remote_fills >= 1);    // resumes (and cut borrows) run without one
      CHECK(static_cast<int>(split.snap.latent_used_pages.size()) == world);
      // 10 latent pages a rank cannot hold every fill on every rank: borrows are cut mid-fill.
      if (latent == 10) CHECK(split.snap.latent.borrows_cut > 0);
    }
  }
  }
}

// A resume whose owner lacks the latent pages for its fill: conversation X (60 prompt tokens, 4
// generated) is kept on rank 0 (4 of its 8 latent pages); its resume with 50 more tokens needs 5
// more pages there, while rank 1 has all 8 free. With carry_min_tokens <= 63 its 63 kept rows are
// carried to rank 1; above, the resume is recomputed as a fresh prompt.
SplitRun RunCarry(const std::string& dir, int world, bool split, int64_t carry_min_tokens) {
  GroupRunner runner(dir, world, model::CacheOptions{16, 64});
  SchedulerOptions opts = SplitOptions(dir, world, split, 64, 8);
  opts.max_context = 128;
  opts.max_batch_tokens = 48;
  opts.max_running = 4;
  opts.carry_min_tokens = carry_min_tokens;
  Scheduler sched(opts, &runner);
  std::vector<int32_t> prompt(60);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + (i * 29) % 370);
  std::vector<std::shared_ptr<Request>> reqs = {MakeRequest("x", prompt, 4)};
  REQUIRE(sched.Submit(reqs[0]).ok());
  RunUntilIdle(sched);
  std::vector<int32_t> resume = prompt;
  resume.insert(resume.end(), reqs[0]->generated.begin(), reqs[0]->generated.end());
  for (int k = 0; k < 50; ++k) resume.push_back(static_cast<int32_t>(7 + (k * 31) % 360));
  reqs.push_back(MakeRequest("x2", resume, 6));
  REQUIRE(sched.Submit(reqs[1]).ok());
  RunUntilIdle(sched);
  return Gather(runner, sched, reqs, world);
}

TEST_CASE("scheduler: a resume whose owner lacks room is carried to a new owner - or recomputed when short - "
          "with the replicated engine's tokens (both families)", "[scheduler][owner_split]") {
  for (const std::string& dir : {kDsa, kNext}) {
    for (int world : {2, 4}) {
      INFO(dir << " W=" << world);
      const SplitRun rep = RunCarry(dir, world, false, 32);
      const SplitRun carried = RunCarry(dir, world, true, 32);
      const SplitRun recomputed = RunCarry(dir, world, true, 64);
      REQUIRE(rep.tokens.size() == 2);
      CHECK(rep.tokens[1].size() == 6);
      CHECK(carried.tokens == rep.tokens);
      CHECK(recomputed.tokens == rep.tokens);
      CHECK(carried.snap.latent.carries == 1);
      CHECK(carried.snap.latent.carried_tokens == 63);
      CHECK(carried.snap.latent.recomputed == 0);
      CHECK(carried.stats.rows_carried == 63);  // the new owner received every kept row (all layers)
      CHECK(recomputed.snap.latent.carries == 0);
      CHECK(recomputed.snap.latent.recomputed == 1);
      CHECK(recomputed.stats.rows_carried == 0);
      CHECK(rep.snap.latent.carries == 0);
    }
  }
}

TEST_CASE("scheduler: with the latent split - 400 mixed requests on small pools leave no page behind on any rank",
          "[scheduler][owner_split]") {
  GroupRunner runner(kDsa, 2, model::CacheOptions{16, 12});
  SchedulerOptions opts;
  opts.max_batch_tokens = 32;
  opts.max_running = 4;
  opts.max_queue = 1000;
  opts.max_context = 64;
  opts.kv_pages = 12;
  opts.page_size = 16;
  opts.owner_split = true;
  opts.world = 2;
  opts.latent_pages = 8;
  Scheduler sched(opts, &runner);
  const std::vector<std::shared_ptr<Request>> reqs = SubmitMixed(sched, 400, 101, 5);
  RunUntilIdle(sched);
  for (auto& r : reqs) {
    std::vector<int32_t> streamed;
    RequestEvent end = Collect(*r, &streamed);
    INFO(r->id << ": " << end.error);
    CHECK(end.error.empty());
  }
  const SchedulerSnapshot snap = sched.Snapshot();
  CHECK(snap.used_pages == 0);
  REQUIRE(snap.latent_used_pages.size() == 2);
  CHECK(snap.latent_used_pages[0] == 0);
  CHECK(snap.latent_used_pages[1] == 0);
  CHECK(snap.latent.borrows_ended > 0);
  CHECK(snap.latent.borrows_cut + snap.preemptions > 0);
  for (int r = 0; r < 2; ++r) {
    const auto& m = dynamic_cast<const model::GlmMoeDsa&>(runner.model(r));
    CHECK(m.arena().used_pages() == 0);
    CHECK(m.latent_arena().used_pages() == 0);
  }
}

TEST_CASE("step executor: a borrow that ends on a conversation the rank does not hold is refused",
          "[scheduler][owner_split]") {
  auto m = model::LoadCausalLM(kDsa);
  REQUIRE(m.ok());
  worker::StepExecutor exec(std::move(*m), 0);
  step::Step step;
  step.step_id = 3;
  step.end_borrow = {42};
  auto out = exec.Execute(step);
  CHECK(out.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(out.status().message()).find("sequence 42 cannot end a borrow") != std::string::npos);
  // Ending the borrow of a conversation released in the same step is no error.
  step.release = {42};
  CHECK(exec.Execute(step).ok());
}

TEST_CASE("step executor: a carry from a rank that does not own the kept conversation is refused before any "
          "exchange", "[scheduler][owner_split]") {
  auto m = model::LoadCausalLM(kDsa);
  REQUIRE(m.ok());
  worker::StepExecutor exec(std::move(*m), 0);
  step::Step fill;
  fill.step_id = 1;
  step::StepSegment kept;
  kept.seq_id = 5;
  kept.tokens = {3, 4, 5, 6, 7, 8};
  kept.owner = 0;  // its rows live here, on rank 0
  fill.segments.push_back(kept);
  REQUIRE(exec.Execute(fill).ok());
  step::Step carry;
  carry.step_id = 2;
  step::StepSegment resume;
  resume.seq_id = 6;
  resume.start = 6;
  resume.tokens = {9};
  resume.fork_from = 5;
  resume.fork_length = 6;
  resume.owner = 2;
  resume.carry_from = 1;  // but rank 0 owns them
  carry.segments.push_back(resume);
  auto out = exec.Execute(carry);
  CHECK(out.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(out.status().message()) ==
        "step 2: sequence 6 cannot carry rows from rank 1 to owner 2: the kept conversation 5 is not owned by rank 1");
  CHECK(exec.live_sequences() == 1);  // nothing was created
}

}  // namespace
}  // namespace ferry::coordinator
