// The continuous-batching scheduler against a real model on one in-process rank: batching
// gives each request what it gets alone, and the queue bound, aborts, stop conditions and a
// failing worker group behave as the API promises.
#include "coordinator/scheduler.h"

#include <functional>

#include <memory>
#include <random>
#include <string>

#include "model/families/causal_lm.h"
#include "model/families/generate.h"
#include "model/cache/paged_cache.h"
#include "tests/catch.h"
#include "tests/coordinator/scheduler_helpers.h"
#include "tests/testing/workload.h"
#include "worker/step_executor.h"

namespace ferry::coordinator {
namespace {

using namespace scheduler_testing;

class LocalRunner final : public StepRunner {
 public:
  explicit LocalRunner(const std::string& dir, model::CacheOptions cache = {}) {
    auto m = model::LoadCausalLM(dir, model::TensorParallel{}, cache);
    REQUIRE(m.ok());
    exec_ = std::make_unique<worker::StepExecutor>(std::move(*m), 0);
  }
  absl::StatusOr<std::vector<step::SampledToken>> RunStep(const step::Step& step) override {
    ++steps;
    if (fail) return absl::UnavailableError("rank 1 died");
    max_tokens_in_step = std::max<int64_t>(max_tokens_in_step, [&] {
      int64_t n = 0;
      for (const auto& s : step.segments) n += static_cast<int64_t>(s.tokens.size());
      return n;
    }());
    if (tamper) {
      step::Step changed = step;
      tamper(changed);
      tamper = nullptr;
      return exec_->Execute(changed);
    }
    return exec_->Execute(step);
  }
  worker::StepExecutor& exec() { return *exec_; }
  int64_t steps = 0;
  int64_t max_tokens_in_step = 0;
  bool fail = false;
  std::function<void(step::Step&)> tamper;  // changes the next step before the executor sees it

 private:
  std::unique_ptr<worker::StepExecutor> exec_;
};

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
  const std::vector<std::shared_ptr<Request>> reqs = SubmitMixed(sched, 1000, 99, 11);
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

TEST_CASE("scheduler: a kept state a resume forks from is not evicted for a later admission of the same step",
          "[scheduler][prompt_cache]") {
  // X (40 tokens, 2 generated) is kept in 3 of the 5 pages. Its resume A (62 tokens) takes the
  // other 2; B, admitted in the same step, finds none. Evicting X for B would release X in the
  // step that forks A from it (the workers refuse that step and the group stops serving): B
  // must wait instead, and every request end as a cold run would.
  LocalRunner runner(kDsa, model::CacheOptions{16, 5});
  SchedulerOptions opts;
  opts.kv_pages = 5;
  opts.page_size = 16;
  opts.max_context = 80;
  opts.max_batch_tokens = 64;
  opts.prompt_cache_tokens = 10000;
  Scheduler sched(opts, &runner);
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(5 + (i * 17) % 370);
  auto x = MakeRequest("x", prompt, 2);
  REQUIRE(sched.Submit(x).ok());
  RunUntilIdle(sched);
  std::vector<int32_t> resume = prompt;
  resume.insert(resume.end(), x->generated.begin(), x->generated.end());
  for (int k = 0; k < 20; ++k) resume.push_back(static_cast<int32_t>(9 + k * 7));
  std::vector<int32_t> other(30, 77);
  auto a = MakeRequest("a", resume, 3);
  auto b = MakeRequest("b", other, 3);
  REQUIRE(sched.Submit(a).ok());
  REQUIRE(sched.Submit(b).ok());
  RunUntilIdle(sched);
  const SchedulerSnapshot snap = sched.Snapshot();
  INFO(snap.failure);
  CHECK(snap.serving);
  std::vector<int32_t> none;
  for (auto* r : {a.get(), b.get()}) {
    RequestEvent e = Collect(*r, &none);
    INFO(r->id << ": " << e.error);
    CHECK(e.error.empty());
    CHECK(e.tokens.size() == 3);
  }
  CHECK(a->cached == 41);  // it did resume from X (all it kept)
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

TEST_CASE("scheduler: a step every rank refuses unchanged fails its requests and serving goes on", "[scheduler]") {
  LocalRunner runner(kDsa, model::CacheOptions{16, 64});
  SchedulerOptions opts;
  opts.page_size = 16;
  opts.kv_pages = 64;
  Scheduler sched(opts, &runner);
  auto a = MakeRequest("a", {5, 6, 7}, 6), b = MakeRequest("b", {9, 8}, 6);
  REQUIRE(sched.Submit(a).ok());
  REQUIRE(sched.RunOnce());
  REQUIRE(sched.RunOnce());  // a is decoding
  // The next step carries a token the executor refuses (outside the vocabulary): nothing of it
  // is applied on the rank, and its request fails alone.
  runner.tamper = [](step::Step& s) { s.segments.front().tokens.front() = 1 << 20; };
  REQUIRE(sched.RunOnce());
  std::vector<int32_t> none;
  const RequestEvent ea = Collect(*a, &none);
  CHECK(ea.reason == FinishReason::kError);
  CHECK(ea.error.find("was refused") != std::string::npos);
  CHECK(ea.error.find("outside the vocabulary [0, 384)") != std::string::npos);
  CHECK(sched.Snapshot().serving);
  // Serving goes on: b gets exactly what it gets alone, and nothing is left behind.
  REQUIRE(sched.Submit(b).ok());
  RunUntilIdle(sched);
  const RequestEvent eb = Collect(*b, &none);
  CHECK(eb.reason == FinishReason::kLength);
  LocalRunner alone_runner(kDsa, model::CacheOptions{16, 64});
  Scheduler alone(opts, &alone_runner);
  auto b2 = MakeRequest("b2", {9, 8}, 6);
  REQUIRE(alone.Submit(b2).ok());
  RunUntilIdle(alone);
  CHECK(eb.tokens == Collect(*b2, &none).tokens);
  CHECK(runner.exec().live_sequences() == 0);
  CHECK(sched.Snapshot().used_pages == 0);
  CHECK(runner.exec().model().arena().used_pages() == 0);
}

}  // namespace
}  // namespace ferry::coordinator
