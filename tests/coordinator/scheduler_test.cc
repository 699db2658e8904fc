// The continuous-batching scheduler against a real model on one in-process rank: batching
// gives each request what it gets alone, and the queue bound, aborts, stop conditions and a
// failing worker group behave as the API promises.
#include "coordinator/scheduler.h"

#include <memory>
#include <random>
#include <string>
#include <thread>

#include "model/causal_lm.h"
#include "model/generate.h"
#include "model/glm_moe_dsa.h"
#include "model/paged_cache.h"
#include "tests/testing/thread_collective.h"
#include "tests/catch.h"
#include "tests/testing/workload.h"
#include "worker/step_executor.h"

namespace ferry::coordinator {
namespace {

const std::string kDsa = std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny";
const std::string kNext = std::string(FERRY_TEST_DATA_DIR) + "/glm5next-tiny";

class LocalRunner final : public StepRunner {
 public:
  explicit LocalRunner(const std::string& dir, model::CacheOptions cache = {}) {
    auto m = model::LoadCausalLM(dir, model::TensorParallel{}, cache);
    REQUIRE(m.ok());
    exec_ = std::make_unique<worker::StepExecutor>(std::move(*m), 0);
  }
  absl::StatusOr<std::vector<int32_t>> RunStep(const worker::Step& step) override {
    ++steps;
    if (fail) return absl::UnavailableError("rank 1 died");
    max_tokens_in_step = std::max<int64_t>(max_tokens_in_step, [&] {
      int64_t n = 0;
      for (const auto& s : step.segments) n += static_cast<int64_t>(s.tokens.size());
      return n;
    }());
    return exec_->Execute(step);
  }
  worker::StepExecutor& exec() { return *exec_; }
  int64_t steps = 0;
  int64_t max_tokens_in_step = 0;
  bool fail = false;

 private:
  std::unique_ptr<worker::StepExecutor> exec_;
};

std::shared_ptr<Request> MakeRequest(const std::string& id, std::vector<int32_t> prompt, int64_t max_tokens,
                                     bool stream = false) {
  auto r = std::make_shared<Request>();
  r->id = id;
  r->prompt = std::move(prompt);
  r->max_tokens = max_tokens;
  r->stream = stream;
  return r;
}

// Drains a finished request's events: its tokens and its end.
RequestEvent Collect(Request& r, std::vector<int32_t>* streamed) {
  while (true) {
    auto e = r.events.Pop(std::chrono::milliseconds(0));
    REQUIRE(e.has_value());
    if (!e->finished) {
      streamed->insert(streamed->end(), e->tokens.begin(), e->tokens.end());
      continue;
    }
    return *e;
  }
}

void RunUntilIdle(Scheduler& s) {
  for (int i = 0; i < 10000 && s.RunOnce(); ++i) {
  }
}

void ConcurrentEqualsAlone(const std::string& dir) {
  LocalRunner runner(dir);
  SchedulerOptions opts;
  opts.max_batch_tokens = 37;  // forces prompts into chunks that share steps with decodes
  opts.max_running = 16;
  Scheduler sched(opts, &runner);
  const ferry::testing::Workload w = ferry::testing::MakeWorkload(dir, 16, 5, 1, 60, 1, 10);
  const auto& alone = w.alone;
  std::vector<std::shared_ptr<Request>> reqs;
  for (int i = 0; i < 16; ++i) {
    reqs.push_back(MakeRequest("r" + std::to_string(i), w.prompts[i], w.max_tokens[i], i % 2 == 0));
    REQUIRE(sched.Submit(reqs.back()).ok());
  }
  RunUntilIdle(sched);
  CHECK(runner.max_tokens_in_step <= 37);
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> streamed;
    RequestEvent end = Collect(*reqs[i], &streamed);
    INFO("request " << i);
    CHECK(end.reason == FinishReason::kLength);
    CHECK((reqs[i]->stream ? streamed : end.tokens) == alone[i]);
    CHECK(end.usage.prompt_tokens == static_cast<int64_t>(reqs[i]->prompt.size()));
    CHECK(end.usage.completion_tokens == static_cast<int64_t>(alone[i].size()));
  }
  CHECK(sched.Snapshot().running == 0);
  CHECK(runner.exec().live_sequences() == 0);  // every state was released
}

TEST_CASE("scheduler: 16 concurrent requests equal each alone (glm_moe_dsa)", "[scheduler]") {
  ConcurrentEqualsAlone(kDsa);
}

TEST_CASE("scheduler: 16 concurrent requests equal each alone (glm5_next)", "[scheduler]") {
  ConcurrentEqualsAlone(kNext);
}

void PreemptionEqualsAlone(const std::string& dir) {
  // 6 pages of 16 tokens for 8 requests of up to 60 tokens: decode rows run out of pages and
  // the newest requests are preempted and recomputed.
  LocalRunner runner(dir, model::CacheOptions{16, 6});
  SchedulerOptions opts;
  opts.max_batch_tokens = 24;
  opts.max_running = 8;
  opts.max_context = 64;
  opts.kv_pages = 6;
  opts.page_size = 16;
  Scheduler sched(opts, &runner);
  const ferry::testing::Workload w = ferry::testing::MakeWorkload(dir, 8, 17, 5, 30, 10, 15);
  const auto& alone = w.alone;
  std::vector<std::shared_ptr<Request>> reqs;
  for (int i = 0; i < 8; ++i) {
    reqs.push_back(MakeRequest("p" + std::to_string(i), w.prompts[i], w.max_tokens[i], true));
    REQUIRE(sched.Submit(reqs.back()).ok());
  }
  RunUntilIdle(sched);
  const SchedulerSnapshot snap = sched.Snapshot();
  INFO("preemptions " << snap.preemptions);
  CHECK(snap.preemptions > 0);
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> streamed;
    RequestEvent end = Collect(*reqs[i], &streamed);
    INFO("request " << i);
    CHECK(end.reason == FinishReason::kLength);
    CHECK(streamed == alone[i]);  // every token once, the same as alone
  }
  CHECK(snap.used_pages == 0);
  CHECK(runner.exec().model().arena().used_pages() == 0);
  CHECK(runner.exec().live_sequences() == 0);
}

TEST_CASE("scheduler: preemption for pages gives the same tokens (glm_moe_dsa)", "[scheduler][paged]") {
  PreemptionEqualsAlone(kDsa);
}

TEST_CASE("scheduler: preemption for pages gives the same tokens (glm5_next)", "[scheduler][paged]") {
  PreemptionEqualsAlone(kNext);
}

TEST_CASE("scheduler: a thousand mixed requests on a small pool leave no page or state behind", "[scheduler][paged]") {
  LocalRunner runner(kDsa, model::CacheOptions{16, 12});
  SchedulerOptions opts;
  opts.max_batch_tokens = 32;
  opts.max_running = 4;
  opts.max_queue = 2000;
  opts.max_context = 64;
  opts.kv_pages = 12;
  opts.page_size = 16;
  Scheduler sched(opts, &runner);
  std::mt19937 rng(99);
  std::vector<std::shared_ptr<Request>> reqs;
  for (int i = 0; i < 1000; ++i) {
    std::vector<int32_t> prompt(1 + rng() % 40);
    for (int32_t& t : prompt) t = static_cast<int32_t>(2 + rng() % 380);
    auto r = MakeRequest("m" + std::to_string(i), prompt, 1 + rng() % 12, i % 3 == 0);
    r->stop_token_ids = {static_cast<int32_t>(2 + rng() % 380)};  // some stop early
    REQUIRE(sched.Submit(r).ok());
    reqs.push_back(r);
    if (i % 7 == 0) sched.Abort(r->id);                     // aborted while queued
    if (i % 11 == 0) (void)sched.RunOnce();                 // or after a step or two
    if (i % 13 == 0 && i > 0) sched.Abort(reqs[i - 1]->id);
  }
  RunUntilIdle(sched);
  int finished = 0, aborted = 0;
  for (auto& r : reqs) {
    std::vector<int32_t> streamed;
    RequestEvent end = Collect(*r, &streamed);
    ++finished;
    aborted += end.reason == FinishReason::kAbort;
  }
  CHECK(finished == 1000);
  CHECK(aborted >= 1000 / 7);
  const SchedulerSnapshot snap = sched.Snapshot();
  CHECK(snap.running == 0);
  CHECK(snap.waiting == 0);
  CHECK(snap.used_pages == 0);
  CHECK(runner.exec().model().arena().used_pages() == 0);
  CHECK(runner.exec().live_sequences() == 0);
}

void ResumeEqualsCold(const std::string& dir, bool any_prefix, int64_t pool_pages = 0) {
  LocalRunner runner(dir, pool_pages > 0 ? model::CacheOptions{16, pool_pages} : model::CacheOptions{});
  SchedulerOptions opts;
  opts.max_batch_tokens = 64;
  opts.prompt_cache_tokens = 1000;
  opts.prompt_cache_any_prefix = any_prefix;
  if (pool_pages > 0) {
    opts.kv_pages = pool_pages;
    opts.page_size = 16;
    opts.max_context = 128;
  }
  Scheduler sched(opts, &runner);
  auto cold_model = model::LoadCausalLM(dir);
  REQUIRE(cold_model.ok());
  auto cold = [&](const std::vector<int32_t>& prompt, int64_t n) {
    model::GenerateOptions g;
    g.max_tokens = n;
    g.ignore_eos = true;
    auto res = model::Generate(**cold_model, prompt, g);
    REQUIRE(res.ok());
    return res->tokens;
  };
  auto run = [&](const std::string& id, const std::vector<int32_t>& prompt, int64_t n) {
    auto r = MakeRequest(id, prompt, n);
    REQUIRE(sched.Submit(r).ok());
    RunUntilIdle(sched);
    std::vector<int32_t> none;
    return Collect(*r, &none);
  };
  std::mt19937 rng(31);
  std::vector<int32_t> p(40);
  for (int32_t& t : p) t = static_cast<int32_t>(2 + rng() % 380);
  const RequestEvent a = run("a", p, 6);
  CHECK(a.usage.cached_tokens == 0);
  CHECK(sched.Snapshot().kept_states == 1);
  // The conversation goes on: its prompt, the reply, a new turn.
  std::vector<int32_t> b_prompt = p;
  b_prompt.insert(b_prompt.end(), a.tokens.begin(), a.tokens.end());
  for (int i = 0; i < 10; ++i) b_prompt.push_back(static_cast<int32_t>(2 + rng() % 380));
  const RequestEvent b = run("b", b_prompt, 8);
  CHECK(b.usage.cached_tokens == 45);  // the kept state holds the prompt and 5 fed replies
  CHECK(b.tokens == cold(b_prompt, 8));
  // Half the first prompt, then something else.
  std::vector<int32_t> c_prompt(p.begin(), p.begin() + 20);
  for (int i = 0; i < 7; ++i) c_prompt.push_back(static_cast<int32_t>(2 + rng() % 380));
  const RequestEvent c = run("c", c_prompt, 5);
  CHECK(c.usage.cached_tokens == (any_prefix ? 20 : 0));
  CHECK(c.tokens == cold(c_prompt, 5));
  // Every kept state lives on the worker, and nothing else does.
  CHECK(runner.exec().live_sequences() == sched.Snapshot().kept_states);
  if (pool_pages > 0) {
    // The books and the worker's arena agree on every page, shared ones included.
    sched.RunOnce();
    CHECK(sched.Snapshot().used_pages == runner.exec().model().arena().used_pages());
  }
}

TEST_CASE("scheduler: the prompt cache on a page pool shares pages and gives the cold tokens", "[scheduler][prompt_cache]") {
  ResumeEqualsCold(kDsa, true, 24);
  ResumeEqualsCold(kNext, false, 24);
}

TEST_CASE("scheduler: kept states give their pages back before anyone is preempted", "[scheduler][prompt_cache]") {
  LocalRunner runner(kDsa, model::CacheOptions{16, 8});
  SchedulerOptions opts;
  opts.kv_pages = 8;
  opts.page_size = 16;
  opts.max_context = 64;
  opts.max_batch_tokens = 32;
  opts.prompt_cache_tokens = 10000;  // the pool, not the budget, limits what is kept
  Scheduler sched(opts, &runner);
  std::mt19937 rng(41);
  for (int i = 0; i < 40; ++i) {
    std::vector<int32_t> prompt(8 + rng() % 40);
    for (int32_t& t : prompt) t = static_cast<int32_t>(2 + rng() % 380);
    auto r = MakeRequest("k" + std::to_string(i), prompt, 1 + rng() % 10);
    REQUIRE(sched.Submit(r).ok());
    RunUntilIdle(sched);
    const SchedulerSnapshot dbg = sched.Snapshot();
    INFO("i " << i << " waiting " << dbg.waiting << " running " << dbg.running << " used " << dbg.used_pages
              << " kept " << dbg.kept_states << " prompt " << prompt.size());
    REQUIRE(dbg.waiting == 0);
    std::vector<int32_t> none;
    CHECK(Collect(*r, &none).reason == FinishReason::kLength);
  }
  const SchedulerSnapshot s = sched.Snapshot();
  CHECK(s.preemptions == 0);
  CHECK(s.kept_states >= 1);
  sched.RunOnce();
  CHECK(runner.exec().live_sequences() == s.kept_states);
  CHECK(sched.Snapshot().used_pages == runner.exec().model().arena().used_pages());
}

TEST_CASE("scheduler: a kept glm5_next state holds pool pages for its fixed state", "[scheduler][prompt_cache]") {
  LocalRunner runner(kNext, model::CacheOptions{16, 12});
  SchedulerOptions opts;
  opts.kv_pages = 12;
  opts.page_size = 16;
  opts.max_context = 64;
  opts.max_batch_tokens = 32;
  opts.kept_fixed_pages = 2;
  opts.prompt_cache_tokens = 10000;  // the pool limits what is kept
  Scheduler sched(opts, &runner);
  std::mt19937 rng(43);
  int64_t most_kept = 0;
  for (int i = 0; i < 25; ++i) {
    std::vector<int32_t> prompt(8 + rng() % 30);
    for (int32_t& t : prompt) t = static_cast<int32_t>(2 + rng() % 380);
    auto r = MakeRequest("f" + std::to_string(i), prompt, 1 + rng() % 6);
    REQUIRE(sched.Submit(r).ok());
    RunUntilIdle(sched);
    std::vector<int32_t> none;
    CHECK(Collect(*r, &none).reason == FinishReason::kLength);
    sched.RunOnce();  // carries the releases of evicted states
    const SchedulerSnapshot snap = sched.Snapshot();
    INFO("i " << i << " kept " << snap.kept_states);
    // The books hold every kept state's row pages (as the arena does) plus its 2 fixed pages.
    CHECK(snap.used_pages == runner.exec().model().arena().used_pages() + 2 * snap.kept_states);
    CHECK(snap.used_pages <= 12);
    most_kept = std::max(most_kept, snap.kept_states);
  }
  CHECK(sched.Snapshot().preemptions == 0);
  CHECK(most_kept >= 2);
  // The fixed pages count against the prompt cache's budget too: 40 tokens keep no state that
  // costs 2 x 16 token rows for its fixed state and 10 or more for its rows.
  LocalRunner runner2(kNext, model::CacheOptions{16, 12});
  opts.prompt_cache_tokens = 40;
  Scheduler small(opts, &runner2);
  auto r = MakeRequest("g", std::vector<int32_t>(12, 7), 3);
  REQUIRE(small.Submit(r).ok());
  RunUntilIdle(small);
  CHECK(small.Snapshot().kept_states == 0);
}

TEST_CASE("scheduler: a resumed conversation gives the tokens of a cold run (glm_moe_dsa)", "[scheduler][prompt_cache]") {
  ResumeEqualsCold(kDsa, true);
}

TEST_CASE("scheduler: a resumed conversation gives the tokens of a cold run (glm5_next)", "[scheduler][prompt_cache]") {
  ResumeEqualsCold(kNext, false);
}

TEST_CASE("scheduler: the prompt cache evicts within its budget and frees the states", "[scheduler][prompt_cache]") {
  LocalRunner runner(kDsa);
  SchedulerOptions opts;
  opts.prompt_cache_tokens = 100;
  Scheduler sched(opts, &runner);
  std::mt19937 rng(37);
  for (int i = 0; i < 30; ++i) {
    std::vector<int32_t> prompt(10 + rng() % 30);
    for (int32_t& t : prompt) t = static_cast<int32_t>(2 + rng() % 380);
    REQUIRE(sched.Submit(MakeRequest("e" + std::to_string(i), prompt, 4)).ok());
    RunUntilIdle(sched);
  }
  const SchedulerSnapshot s = sched.Snapshot();
  CHECK(s.kept_states >= 1);
  CHECK(s.kept_states <= 100 / 13 + 1);
  // The evicted states were released on the worker (one more step carries the last releases).
  sched.RunOnce();
  CHECK(runner.exec().live_sequences() == s.kept_states);
}

TEST_CASE("scheduler: a full queue refuses at once", "[scheduler]") {
  LocalRunner runner(kDsa);
  SchedulerOptions opts;
  opts.max_queue = 2;
  opts.max_running = 1;
  Scheduler sched(opts, &runner);
  // One request for the free lane, two for the queue; the fourth is refused.
  REQUIRE(sched.Submit(MakeRequest("a", {5, 6}, 3)).ok());
  REQUIRE(sched.Submit(MakeRequest("b", {5, 6}, 3)).ok());
  REQUIRE(sched.Submit(MakeRequest("c", {5, 6}, 3)).ok());
  absl::Status st = sched.Submit(MakeRequest("d", {5, 6}, 3));
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(st.message()).find("3 requests wait (--max-queue 2, 1 free lanes)") != std::string::npos);
  CHECK(sched.Submit(MakeRequest("a", {5}, 1)).code() == absl::StatusCode::kAlreadyExists);
  RunUntilIdle(sched);
  CHECK(sched.Submit(MakeRequest("d", {5, 6}, 3)).ok());  // room again
}

TEST_CASE("scheduler: an abort ends the request within one step and frees its state", "[scheduler]") {
  LocalRunner runner(kDsa);
  Scheduler sched(SchedulerOptions{}, &runner);
  auto r = MakeRequest("x", {5, 6, 7, 8}, 1000, true);
  auto other = MakeRequest("y", {9, 10}, 3);
  REQUIRE(sched.Submit(r).ok());
  REQUIRE(sched.Submit(other).ok());
  REQUIRE(sched.RunOnce());
  REQUIRE(sched.RunOnce());
  CHECK(sched.Snapshot().running == 2);
  CHECK(sched.Abort("x"));
  CHECK_FALSE(sched.Abort("nope"));
  REQUIRE(sched.RunOnce());
  std::vector<int32_t> streamed;
  RequestEvent end = Collect(*r, &streamed);
  CHECK(end.reason == FinishReason::kAbort);
  CHECK(streamed.size() == 2);  // the two steps before the abort
  RunUntilIdle(sched);
  CHECK(sched.Snapshot().running == 0);
  CHECK(runner.exec().live_sequences() == 0);
  CHECK_FALSE(sched.Abort("x"));
}

TEST_CASE("scheduler: stop tokens and the context limit end a request", "[scheduler]") {
  LocalRunner runner(kDsa);
  SchedulerOptions opts;
  opts.max_context = 10;
  Scheduler sched(opts, &runner);
  // Greedy from this prompt: find its first token, then ask to stop on it.
  auto probe = MakeRequest("probe", {5, 6, 7, 8}, 3);
  REQUIRE(sched.Submit(probe).ok());
  RunUntilIdle(sched);
  std::vector<int32_t> none;
  const RequestEvent p = Collect(*probe, &none);
  REQUIRE(p.tokens.size() == 3);
  auto stop = MakeRequest("stop", {5, 6, 7, 8}, 50);
  stop->stop_token_ids = {p.tokens[1]};
  auto ctx = MakeRequest("ctx", {5, 6, 7, 8}, 50);
  REQUIRE(sched.Submit(stop).ok());
  REQUIRE(sched.Submit(ctx).ok());
  RunUntilIdle(sched);
  const RequestEvent s = Collect(*stop, &none);
  CHECK(s.reason == FinishReason::kStop);
  CHECK(s.tokens == std::vector<int32_t>{p.tokens[0], p.tokens[1]});
  const RequestEvent c = Collect(*ctx, &none);
  CHECK(c.reason == FinishReason::kLength);
  CHECK(c.tokens.size() == 6);  // 4 + 6 = the 10-token context
}

TEST_CASE("scheduler: a failing worker group ends every request with an error", "[scheduler]") {
  LocalRunner runner(kDsa);
  Scheduler sched(SchedulerOptions{}, &runner);
  auto a = MakeRequest("a", {5, 6}, 10), b = MakeRequest("b", {7}, 10);
  REQUIRE(sched.Submit(a).ok());
  REQUIRE(sched.RunOnce());
  REQUIRE(sched.Submit(b).ok());
  runner.fail = true;
  CHECK_FALSE(sched.RunOnce());
  std::vector<int32_t> none;
  for (auto* r : {a.get(), b.get()}) {
    RequestEvent e = Collect(*r, &none);
    CHECK(e.reason == FinishReason::kError);
    CHECK(e.error.find("rank 1 died") != std::string::npos);
  }
  CHECK_FALSE(sched.Snapshot().serving);
  CHECK(sched.Submit(MakeRequest("c", {5}, 1)).code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ferry::coordinator

namespace ferry::coordinator {
namespace {

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
  absl::StatusOr<std::vector<int32_t>> RunStep(const worker::Step& step) override {
    std::vector<absl::StatusOr<std::vector<int32_t>>> out(execs_.size(), std::vector<int32_t>{});
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
  int64_t shipped = 0;
};

// 10 requests (prompts of 20 to 60 tokens, past index_topk 16), then 3 resumes of finished
// conversations through the prompt cache, on a pool of `pages` pages of 16 tokens (and, with
// the split, `latent_pages` latent pages on each rank).
SplitRun RunSplit(const std::string& dir, int world, bool split, int64_t pages, int64_t latent_pages) {
  GroupRunner runner(dir, world, model::CacheOptions{16, pages});
  SchedulerOptions opts;
  opts.kv_pages = pages;
  opts.page_size = 16;
  opts.max_context = 96;
  opts.max_batch_tokens = 40;
  opts.max_running = 6;
  opts.prompt_cache_tokens = 100000;
  opts.owner_split = split;
  opts.prompt_cache_any_prefix = dir == kDsa;
  opts.world = world;
  opts.latent_pages = latent_pages;
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
  SplitRun out;
  for (int i = 0; i < 3; ++i) {
    // Resume conversation i: its prompt, its reply and a new suffix.
    std::vector<int32_t> p = reqs[i]->prompt;
    p.insert(p.end(), reqs[i]->generated.begin(), reqs[i]->generated.end());
    for (int k = 0; k < 7; ++k) p.push_back(static_cast<int32_t>(5 + (k * 13 + i) % 370));
    reqs.push_back(MakeRequest("r" + std::to_string(i), p, 5));
    REQUIRE(sched.Submit(reqs.back()).ok());
    RunUntilIdle(sched);
  }
  for (auto& r : reqs) {
    std::vector<int32_t> none;
    RequestEvent e = Collect(*r, &none);
    INFO(e.error);
    CHECK(e.error.empty());
    out.tokens.push_back(e.tokens);
  }
  out.snap = sched.Snapshot();
  for (int r = 0; r < world; ++r) out.shipped += runner.model(r).owner_split_stats().rows_shipped;
  return out;
}

TEST_CASE("scheduler: the latent split gives the replicated engine's tokens through borrow, cut borrow, "
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
      CHECK(rep.shipped == 0);
      CHECK(split.shipped > 0);
      CHECK(split.snap.borrows_ended > 0);    // fills that borrowed and gave the pages back
      CHECK(split.snap.remote_fills >= 1);    // resumes (and cut borrows) run without one
      CHECK(static_cast<int>(split.snap.latent_used_pages.size()) == world);
      // 10 latent pages a rank cannot hold every fill on every rank: borrows are cut mid-fill.
      if (latent == 10) CHECK(split.snap.borrows_cut > 0);
    }
  }
  }
}

TEST_CASE("scheduler: with the latent split, 400 mixed requests on small pools leave no page behind on any rank",
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
  std::mt19937 rng(101);
  std::vector<std::shared_ptr<Request>> reqs;
  for (int i = 0; i < 400; ++i) {
    std::vector<int32_t> prompt(1 + rng() % 40);
    for (int32_t& t : prompt) t = static_cast<int32_t>(2 + rng() % 380);
    auto r = MakeRequest("o" + std::to_string(i), prompt, 1 + rng() % 12, i % 3 == 0);
    r->stop_token_ids = {static_cast<int32_t>(2 + rng() % 380)};
    REQUIRE(sched.Submit(r).ok());
    reqs.push_back(r);
    if (i % 7 == 0) sched.Abort(r->id);
    if (i % 5 == 0) (void)sched.RunOnce();
    if (i % 13 == 0 && i > 0) sched.Abort(reqs[i - 1]->id);
  }
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
  CHECK(snap.borrows_ended > 0);
  CHECK(snap.borrows_cut + snap.preemptions > 0);
  for (int r = 0; r < 2; ++r) {
    const auto& m = dynamic_cast<const model::GlmMoeDsa&>(runner.model(r));
    CHECK(m.arena().used_pages() == 0);
    CHECK(m.latent_arena().used_pages() == 0);
  }
}

}  // namespace
}  // namespace ferry::coordinator
