// Helpers the scheduler tests share: requests, draining their events, running a scheduler
// until it is idle, and a stream of mixed requests (streams, early stops, aborts).
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "coordinator/scheduler.h"
#include "tests/catch.h"

namespace ferry::coordinator::scheduler_testing {

inline const std::string kDsa = std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny";
inline const std::string kNext = std::string(FERRY_TEST_DATA_DIR) + "/glm5next-tiny";

inline std::shared_ptr<Request> MakeRequest(const std::string& id, std::vector<int32_t> prompt, int64_t max_tokens,
                                     bool stream = false) {
  auto r = std::make_shared<Request>();
  r->id = id;
  r->prompt = std::move(prompt);
  r->max_tokens = max_tokens;
  r->stream = stream;
  return r;
}

// Drains a finished request's events: its tokens and its end.
inline RequestEvent Collect(Request& r, std::vector<int32_t>* streamed) {
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

inline void RunUntilIdle(Scheduler& s) {
  for (int i = 0; i < 10000 && s.RunOnce(); ++i) {
  }
}

// n requests of 1..40 random tokens asking 1..12 tokens, a third of them streamed, each with a
// random stop token; every 7th is aborted while queued, every 13th the one before it, and a
// step runs after every `step_every`-th submission.
inline std::vector<std::shared_ptr<Request>> SubmitMixed(Scheduler& sched, int n, uint32_t seed, int step_every) {
  std::mt19937 rng(seed);
  std::vector<std::shared_ptr<Request>> reqs;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt(1 + rng() % 40);
    for (int32_t& t : prompt) t = static_cast<int32_t>(2 + rng() % 380);
    auto r = MakeRequest("m" + std::to_string(i), prompt, 1 + rng() % 12, i % 3 == 0);
    r->stop_token_ids = {static_cast<int32_t>(2 + rng() % 380)};  // some stop early
    REQUIRE(sched.Submit(r).ok());
    reqs.push_back(r);
    if (i % 7 == 0) sched.Abort(r->id);  // aborted while queued
    if (i % step_every == 0) (void)sched.RunOnce();
    if (i % 13 == 0 && i > 0) sched.Abort(reqs[i - 1]->id);
  }
  return reqs;
}

}  // namespace ferry::coordinator::scheduler_testing
