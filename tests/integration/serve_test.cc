// The serving system as users run it: `ferry serve` (coordinator + worker processes on
// loopback, UCX between the ranks), driven through the gRPC API and the metrics endpoint.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <latch>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "cli/client.h"
#include "model/families/causal_lm.h"
#include "model/families/generate.h"
#include "model/golden/golden.h"
#include "tests/catch.h"
#include "tests/integration/serve_client.h"
#include "tests/testing/files.h"
#include "tests/testing/server_process.h"
#include "tests/testing/workload.h"

namespace ferry {
namespace {

using ferry::testing::Server;
using namespace ferry::serve_test;  // NOLINT: the tests' client helpers

// Sends every workload request at once (greedy) and returns each one's tokens; errors[i] gets
// request i's failure.
std::vector<std::vector<int32_t>> RunConcurrently(const std::string& address, const testing::Workload& w,
                                                  std::vector<std::string>* errors) {
  const size_t n = w.prompts.size();
  std::vector<std::vector<int32_t>> got(n);
  errors->assign(n, "");
  std::vector<std::thread> threads;
  std::latch start(static_cast<std::ptrdiff_t>(n));  // every request sent at once
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      auto res = Run(address, Greedy(w.prompts[i], static_cast<int>(w.max_tokens[i])));
      if (res.ok()) {
        got[i].assign(res->token_ids().begin(), res->token_ids().end());
      } else {
        (*errors)[i] = std::string(res.status().message());
      }
    });
  }
  for (auto& t : threads) t.join();
  return got;
}

// What a rank of glm-dsa-tiny at 2 ranks reports with `shape` (which turns the prompt cache
// off) and 1 GiB of memory: its weights (memory - room), one page's bytes and the latent part.
// The probe serves the replicated layout, whose pool is room / page bytes.
struct RankBytes {
  int64_t weights = 0, page = 0, latent = 0;
};
RankBytes ProbeRank(std::vector<std::string> shape) {
  shape.insert(shape.end(), {"--memory-gib", "1", "--owner-split", "off"});
  Server probe(kDsa, 2, shape);
  REQUIRE(probe.serving());
  auto info = cli::GetServerInfo(probe.address());
  REQUIRE(info.ok());
  RankBytes b{(int64_t{1} << 30) - info->ranks(0).room_bytes(), info->ranks(0).page_bytes(),
              info->ranks(0).latent_page_bytes()};
  CHECK(info->kv_pages() * b.page <= info->ranks(0).room_bytes());
  CHECK(info->prompt_cache_tokens() == 0);  // every shape here passes --prompt-cache-gib 0
  REQUIRE(b.weights > 0);
  REQUIRE(b.page > 0);
  return b;
}

// --memory-gib for `bytes` exactly, printed with every digit it needs.
std::string MemoryGib(int64_t bytes) {
  return absl::StrFormat("%.15f", static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
}

TEST_CASE("serve: every golden prompt at 1 or 2 or 4 ranks gives the golden tokens", "[serve]") {
  for (const std::string& dir : {kDsa, kNext}) {
    auto goldens = model::ReadGolden(dir + "/golden.safetensors");
    REQUIRE(goldens.ok());
    for (int ranks : {1, 2, 4}) {
      Server server(dir, ranks);
      INFO(dir << " at " << ranks << " ranks: " << server.process().Log());
      REQUIRE(server.serving());
      for (const model::GoldenPrompt& g : *goldens) {
        auto res = Run(server.address(), Greedy(g.ids, static_cast<int>(g.greedy.size())));
        REQUIRE(res.ok());
        CHECK(std::vector<int32_t>(res->token_ids().begin(), res->token_ids().end()) == g.greedy);
        CHECK(res->finish_reason() == v1::FINISH_REASON_LENGTH);
        CHECK(res->usage().prompt_tokens() == static_cast<int32_t>(g.ids.size()));
      }
    }
  }
}

TEST_CASE("serve: 16 concurrent requests give exactly what each gives alone", "[serve]") {
  Server server(kNext, 2, {"--max-batch-tokens", "40"});
  REQUIRE(server.serving());
  const testing::Workload w = testing::MakeWorkload(kNext, 16, 9, 1, 70, 1, 12);
  const auto& alone = w.alone;
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 16; ++i) {
    reqs.push_back(Greedy(w.prompts[i], static_cast<int>(w.max_tokens[i])));
    reqs.back().set_stream(i % 2 == 0);
  }
  std::vector<std::vector<int32_t>> got(16);
  std::vector<std::string> errors(16);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      std::vector<int32_t> streamed;
      auto res = Run(server.address(), reqs[i], &streamed);
      if (!res.ok()) {
        errors[i] = std::string(res.status().message());
        return;
      }
      got[i] = reqs[i].stream() ? streamed : std::vector<int32_t>(res->token_ids().begin(), res->token_ids().end());
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 16; ++i) {
    INFO("request " << i << " " << errors[i]);
    CHECK(errors[i].empty());
    CHECK(got[i] == alone[i]);
  }
}

TEST_CASE("serve: seeded sampling with log-probabilities gives the in-process tokens - whatever shares the step",
          "[serve]") {
  for (const std::string& dir : {kDsa, kNext}) {
    Server server(dir, 2);
    INFO(dir << ": " << server.process().Log());
    REQUIRE(server.serving());
    auto local = model::LoadCausalLM(dir);
    REQUIRE(local.ok());
    const int n = 6;
    std::vector<GenerateRequest> reqs;
    std::vector<model::GenerateResult> alone;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> prompt;
      for (int k = 0; k < 5 + 3 * i; ++k) prompt.push_back(static_cast<int32_t>(2 + (k * 31 + i * 7) % 300));
      GenerateRequest req = Greedy(prompt, 8);
      v1::SamplingParams* sp = req.mutable_sampling();
      sp->set_temperature(0.9f);
      sp->set_top_k(i % 2 == 0 ? 0 : 40);
      sp->set_top_p(i % 3 == 0 ? 1.0f : 0.9f);
      sp->set_seed(1000 + static_cast<uint64_t>(i));
      sp->set_logprobs(i != 1);
      sp->set_top_logprobs(i == 1 ? 0 : i % 4);
      req.set_stream(i % 2 == 0);
      reqs.push_back(req);
      model::GenerateOptions opt;
      opt.max_tokens = 8;
      opt.ignore_eos = true;
      opt.seed = sp->seed();
      opt.sampling = {sp->temperature(), sp->top_k(), sp->top_p(), sp->logprobs() ? sp->top_logprobs() : -1};
      auto res = model::Generate(**local, prompt, opt);
      REQUIRE(res.ok());
      alone.push_back(*res);
    }
    std::vector<absl::StatusOr<v1::Finished>> done(n, absl::UnknownError("not run"));
    std::vector<std::vector<int32_t>> streamed(n);
    std::vector<std::vector<v1::TokenLogprobs>> streamed_lp(n);
    std::vector<std::thread> threads;
    std::latch start(n);
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        done[i] = Run(server.address(), reqs[i], &streamed[i], 60000, &streamed_lp[i]);
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < n; ++i) {
      INFO("request " << i);
      REQUIRE(done[i].ok());
      const bool stream = reqs[i].stream();
      const std::vector<int32_t> got =
          stream ? streamed[i] : std::vector<int32_t>(done[i]->token_ids().begin(), done[i]->token_ids().end());
      const std::vector<v1::TokenLogprobs> lp =
          stream ? streamed_lp[i] : std::vector<v1::TokenLogprobs>(done[i]->logprobs().begin(), done[i]->logprobs().end());
      CHECK(got == alone[i].tokens);
      if (!reqs[i].sampling().logprobs()) {
        CHECK(lp.empty());
        continue;
      }
      REQUIRE(lp.size() == got.size());
      REQUIRE(alone[i].logprobs.size() == got.size());
      for (size_t t = 0; t < got.size(); ++t) {
        CHECK(lp[t].token_id() == got[t]);
        CHECK(lp[t].logprob() <= 0.0f);
        CHECK(std::abs(lp[t].logprob() - *alone[i].logprobs[t].logprob) < 1e-4);
        REQUIRE(lp[t].top_logprobs_size() == reqs[i].sampling().top_logprobs());
        for (int j = 0; j < lp[t].top_logprobs_size(); ++j) {
          CHECK(lp[t].top_logprobs(j).token_id() == alone[i].logprobs[t].top[static_cast<size_t>(j)].token);
          if (j > 0) CHECK(lp[t].top_logprobs(j).logprob() <= lp[t].top_logprobs(j - 1).logprob());
        }
      }
    }
  }
}

TEST_CASE("serve: --nvfp4-numerics w4a4 gives a calibrated NVFP4 checkpoint's in-process W4A4 tokens - and refuses a "
          "weight-only one naming why",
          "[serve]") {
  testing::TempDir tmp;
  const std::string calibrated = tmp.File("calibrated"), weights_only = tmp.File("weights-only");
  std::ofstream(tmp.File("ids")) << "5 6 7 8 9 10 11\n100 3 250 17\n";
  for (const std::string& cmd :
       {absl::StrCat(testing::BinDir(), "/ferry quantize --format nvfp4 --calibration-ids ", tmp.File("ids"), " ", kDsa,
                     " ", calibrated, " > ", tmp.File("log"), " 2>&1"),
        absl::StrCat(testing::BinDir(), "/ferry quantize --format nvfp4 ", kDsa, " ", weights_only, " > ",
                     tmp.File("log"), " 2>&1")}) {
    INFO(cmd);
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  Server server(calibrated, 2, {"--nvfp4-numerics", "w4a4"});
  INFO(server.process().Log());
  REQUIRE(server.serving());
  auto local = model::LoadCausalLM(calibrated, {}, {}, model::Nvfp4Numerics::kW4A4);
  REQUIRE(local.ok());
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> prompt;
    for (int k = 0; k < 6 + 5 * i; ++k) prompt.push_back(static_cast<int32_t>(3 + (k * 29 + i * 11) % 380));
    model::GenerateOptions opt;
    opt.max_tokens = 8;
    opt.ignore_eos = true;
    auto alone = model::Generate(**local, prompt, opt);
    REQUIRE(alone.ok());
    auto got = Run(server.address(), Greedy(prompt, 8));
    REQUIRE(got.ok());
    CHECK(std::vector<int32_t>(got->token_ids().begin(), got->token_ids().end()) == alone->tokens);
  }
  Server refused(weights_only, 1, {"--nvfp4-numerics", "w4a4"});
  CHECK_FALSE(refused.serving());
  CHECK(refused.process().Log().find("without an input_scale") != std::string::npos);
}

TEST_CASE("serve: top_logprobs outside 0 to 20 or without logprobs is refused with the numbers", "[serve]") {
  Server server(kDsa, 1);
  REQUIRE(server.serving());
  GenerateRequest req = Greedy({1, 2, 3}, 2);
  req.mutable_sampling()->set_top_logprobs(3);
  auto res = Run(server.address(), req);
  REQUIRE_FALSE(res.ok());
  CHECK(res.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(res.status().message()).find("top_logprobs is 3 without sampling.logprobs") != std::string::npos);
  req.mutable_sampling()->set_logprobs(true);
  req.mutable_sampling()->set_top_logprobs(21);
  res = Run(server.address(), req);
  REQUIRE_FALSE(res.ok());
  CHECK(std::string(res.status().message()).find("top_logprobs is 21; it must be in [0, 20]") != std::string::npos);
  req.mutable_sampling()->set_top_logprobs(20);
  res = Run(server.address(), req);
  REQUIRE(res.ok());
  REQUIRE(res->logprobs_size() == 2);
  CHECK(res->logprobs(0).top_logprobs_size() == 20);
  CHECK(res->logprobs(0).top_logprobs(0).token_id() == res->token_ids(0));  // greedy: the top one
}

TEST_CASE("serve: a small page pool preempts and recomputes - and the tokens do not change", "[serve]") {
  // 8 pages of 16 tokens on each of 2 ranks for 8 concurrent requests of up to ~70 tokens.
  Server server(kDsa, 2, {"--kv-pool-pages", "8", "--page-size", "16", "--context", "96", "--max-batch-tokens", "32"});
  REQUIRE(server.serving());
  const testing::Workload w = testing::MakeWorkload(kDsa, 8, 23, 10, 40, 8, 20);
  const auto& alone = w.alone;
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    reqs.push_back(Greedy(w.prompts[i], static_cast<int>(w.max_tokens[i])));
    reqs.back().set_stream(true);
  }
  std::vector<std::vector<int32_t>> got(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { (void)Run(server.address(), reqs[i], &got[i]); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 8; ++i) {
    INFO("request " << i);
    CHECK(got[i] == alone[i]);
  }
  const std::string m = testing::ScrapeMetrics(server.metrics_port());
  CHECK(testing::MetricValue(m, "ferry:num_preemptions_total") > 0);
  CHECK(Eventually([&] {
    return testing::MetricValue(testing::ScrapeMetrics(server.metrics_port()), "ferry:kv_cache_usage_perc") == 0;
  }));
}

TEST_CASE("serve: the memory plan sizes the pool from the workers' room - and a tight one still serves exactly",
          "[serve][kvpool]") {
  // The replicated layout's plan (the split's is the next tests').
  const std::vector<std::string> shape = {"--page-size", "16", "--context", "96", "--max-batch-tokens", "32",
                                          "--parallel", "4", "--prompt-cache-gib", "0", "--owner-split", "off"};
  // First learn what a rank's weights and a page take (the worker reports room = memory - weights).
  const RankBytes b = ProbeRank(shape);
  // Room for 12.5 pages: the engine's own window (96 / 16 + 1 = 7 pages), a page for each of the
  // 3 other lanes, 2 more so the pool holds the rows of the 2 windows the room would hold: 8
  // requests of up to ~70 tokens must preempt, and still give their tokens alone.
  std::vector<std::string> args = shape;
  args.insert(args.end(), {"--memory-gib", MemoryGib(b.weights + 12 * b.page + b.page / 2)});
  Server server(kDsa, 2, args);
  REQUIRE(server.serving());
  auto info = cli::GetServerInfo(server.address());
  REQUIRE(info.ok());
  CHECK(info->kv_layout() == "pages");
  CHECK(info->kv_pages() == 12);
  const testing::Workload w = testing::MakeWorkload(kDsa, 8, 23, 10, 40, 8, 20);
  // Preemption needs the requests to overlap, which the machine's load decides (a busy 2-core
  // machine once served them one after another): up to 4 rounds of the same requests, every
  // round's tokens checked, until one has preempted.
  double preemptions = 0;
  for (int round = 0; round < 4 && preemptions == 0; ++round) {
    std::vector<std::string> errors;
    const std::vector<std::vector<int32_t>> got = RunConcurrently(server.address(), w, &errors);
    for (int i = 0; i < 8; ++i) {
      INFO("round " << round << ", request " << i << ": " << errors[i]);
      CHECK(got[i] == w.alone[i]);
    }
    preemptions = testing::MetricValue(testing::ScrapeMetrics(server.metrics_port()), "ferry:num_preemptions_total");
  }
  CHECK(preemptions > 0);
}

TEST_CASE("serve: with the latent split (on by default from 2 ranks) - 2 ranks give the replicated tokens and "
          "report per-rank books", "[serve][owner_split]") {
  for (const std::string& dir : {kDsa, kNext}) {
  INFO(dir);
  Server server(dir, 2, {"--page-size", "16", "--context", "128", "--max-batch-tokens", "48"});
  REQUIRE(server.serving());
  const testing::Workload w = testing::MakeWorkload(dir, 8, 29, 20, 60, 4, 12);
  std::vector<std::string> errors;
  const std::vector<std::vector<int32_t>> got = RunConcurrently(server.address(), w, &errors);
  for (int i = 0; i < 8; ++i) {
    INFO("request " << i << ": " << errors[i]);
    CHECK(got[i] == w.alone[i]);
  }
  auto info = cli::GetServerInfo(server.address());
  REQUIRE(info.ok());
  CHECK(info->owner_split());
  CHECK(info->borrows_ended() > 0);
  // The kept conversations (prompt cache) hold their latent pages on their owners only.
  int64_t latent = 0;
  for (const auto& rank : info->ranks()) latent += rank.latent_used_pages();
  CHECK(latent > 0);
  CHECK(latent < 2 * info->kv_used_pages());
  // Queries crossed the data plane, and the metrics say so.
  const std::string m = testing::ScrapeMetrics(server.metrics_port());
  CHECK(testing::MetricValue(m, "ferry:rank_dataplane_bytes_total{rank=\"0\"}") > 0);
  CHECK(testing::MetricValue(m, "ferry:latent_borrows_ended_total") == info->borrows_ended());
  CHECK(testing::MetricValue(m, "ferry:latent_carries_total") == info->carries());
  CHECK(info->borrowed_pages() > 0);
  CHECK(testing::MetricValue(m, "ferry:latent_borrowed_pages_total") == info->borrowed_pages());
  CHECK(testing::MetricValue(m, "ferry:latent_carry_recomputes_total") == info->carry_recomputes());
  CHECK(testing::MetricValue(m, "ferry:latent_pages_used{rank=\"0\"}") + testing::MetricValue(m, "ferry:latent_pages_used{rank=\"1\"}") == latent);
  const std::string w1 = testing::ScrapeMetrics(server.metrics_port() + 2);
  CHECK(testing::MetricValue(w1, "ferry_worker:owner_rows_shipped_total{rank=\"1\"}") +
            testing::MetricValue(testing::ScrapeMetrics(server.metrics_port() + 1), "ferry_worker:owner_rows_shipped_total{rank=\"0\"}") >
        0);
  CHECK(testing::MetricValue(w1, "ferry_worker:owner_exchange_seconds_count{rank=\"1\"}") > 0);
}
}

TEST_CASE("serve: the latent split serves - in a room the replicated layout refuses - the tokens of one rank",
          "[serve][owner_split][kvpool]") {
  const std::vector<std::string> shape = {"--page-size", "16", "--context", "96", "--parallel", "4",
                                          "--prompt-cache-gib", "0", "--max-batch-tokens", "48"};
  const RankBytes b = ProbeRank(shape);
  REQUIRE(b.latent > 0);
  REQUIRE(b.latent < b.page);
  // Replicated: the engine's window (96 / 16 + 1 = 7 pages) and a page for each of 3 other lanes,
  // 10 whole pages. Split: 10 key pages and 7 latent pages (a window on its owner). In between:
  const int64_t key_bytes = b.page - b.latent;
  const int64_t room = (10 * b.page + 10 * key_bytes + 7 * b.latent) / 2;
  REQUIRE(room < 10 * b.page);
  std::vector<std::string> args = shape;
  args.insert(args.end(), {"--memory-gib", MemoryGib(b.weights + room)});
  {
    std::vector<std::string> replicated = args;
    replicated.insert(replicated.end(), {"--owner-split", "off"});
    Server refused(kDsa, 2, replicated);
    CHECK_FALSE(refused.serving());
  }
  Server server(kDsa, 2, args);  // the split is the default from two ranks
  REQUIRE(server.serving());
  // A conversation of 70 + 20 tokens: its latent rows fill 6 of its owner's 7 latent pages.
  const testing::Workload w = testing::MakeWorkload(kDsa, 1, 71, 70, 1, 20, 1);
  auto res = Run(server.address(), Greedy(w.prompts[0], static_cast<int>(w.max_tokens[0])));
  REQUIRE(res.ok());
  CHECK(std::vector<int32_t>(res->token_ids().begin(), res->token_ids().end()) == w.alone[0]);
  auto info = cli::GetServerInfo(server.address());
  REQUIRE(info.ok());
  CHECK(info->kv_pages() >= 10);
}

TEST_CASE("serve: a room the plan cannot serve is refused at start with the numbers", "[serve][kvpool]") {
  Server server(kDsa, 2, {"--memory-gib", "0.0001", "--context", "96", "--page-size", "16"});
  CHECK_FALSE(server.serving());
  int status = 0;
  CHECK(server.process().Wait(std::chrono::seconds(20), &status));
  const std::string log = server.process().Log();
  INFO(log);
  CHECK(log.find("cannot serve this configuration") != std::string::npos);
  CHECK(log.find("--context 96 needs") != std::string::npos);
  CHECK(log.find("leaves 0.00 GiB") != std::string::npos);
  // serve names the process that failed (the coordinator), not a worker it told to stop.
  const size_t blamed = log.find("ferry serve: ");
  REQUIRE(blamed != std::string::npos);
  CHECK(log.find("ferry serve: the coordinator (pid") == blamed);
}

TEST_CASE("serve: the prompt cache resumes a conversation with the tokens of a cold run", "[serve]") {
  for (const std::string& dir : {kDsa, kNext}) {
    Server server(dir, 2, {"--prompt-cache-tokens", "4096"});
    REQUIRE(server.serving());
    auto local = model::LoadCausalLM(dir);
    REQUIRE(local.ok());
    std::vector<int32_t> p;
    for (int i = 0; i < 30; ++i) p.push_back(static_cast<int32_t>(3 + (i * 37) % 370));
    auto a = Run(server.address(), Greedy(p, 6));
    REQUIRE(a.ok());
    std::vector<int32_t> b_prompt = p;
    b_prompt.insert(b_prompt.end(), a->token_ids().begin(), a->token_ids().end());
    for (int i = 0; i < 9; ++i) b_prompt.push_back(static_cast<int32_t>(5 + i * 11));
    auto b = Run(server.address(), Greedy(b_prompt, 7));
    REQUIRE(b.ok());
    INFO(dir);
    CHECK(b->usage().cached_tokens() == 35);
    model::GenerateOptions opt;
    opt.max_tokens = 7;
    opt.ignore_eos = true;
    auto cold = model::Generate(**local, b_prompt, opt);
    REQUIRE(cold.ok());
    CHECK(std::vector<int32_t>(b->token_ids().begin(), b->token_ids().end()) == cold->tokens);
    const std::string m = testing::ScrapeMetrics(server.metrics_port());
    CHECK(testing::MetricValue(m, "ferry:prefix_cache_hits_total") == 35);
    CHECK(testing::MetricValue(m, "ferry:prefix_cache_queries_total") == 30 + 45);
  }
}

TEST_CASE("serve: the metrics endpoint counts what completes", "[serve]") {
  Server server(kDsa, 2, {"--served-model-name", "tiny-dsa"});
  REQUIRE(server.serving());
  // Clients that connect and say nothing do not hold up a scrape.
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(testing::ConnectLoopback(server.metrics_port()));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string before = testing::ScrapeMetrics(server.metrics_port());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1500));
  for (int fd : idle) CHECK(fd >= 0);
  for (int fd : idle) close(fd);
  REQUIRE_FALSE(before.empty());
  CHECK(before.find("ferry:num_requests_running{model_name=\"tiny-dsa\"} ") != std::string::npos);
  for (const char* name : {"ferry:num_requests_running", "ferry:num_requests_waiting", "ferry:kv_cache_usage_perc",
                           "ferry:prompt_tokens_total", "ferry:generation_tokens_total",
                           "ferry:time_to_first_token_seconds_count", "ferry:inter_token_latency_seconds_count",
                           "ferry:e2e_request_latency_seconds_count", "ferry:request_queue_time_seconds_count",
                           "ferry:iteration_tokens_total_count", "ferry:rank_step_time_seconds_count{rank=\"1\"}",
                           "ferry:rank_dataplane_bytes_total{rank=\"1\"}"}) {
    INFO(name);
    CHECK(testing::MetricValue(before, name) >= 0);
  }
  // Every rank reported its room; the coordinator planned the pool for the smallest and sized
  // the arenas with it (pages at two ranks; the prompt cache on by default).
  auto info = cli::GetServerInfo(server.address());
  REQUIRE(info.ok());
  for (const auto& rank : info->ranks()) {
    CHECK(rank.room_bytes() > 0);
    CHECK(rank.page_bytes() > 0);
  }
  CHECK(info->kv_layout() == "pages");
  CHECK(info->kv_pages() > 0);
  CHECK(info->prompt_cache_tokens() > 0);
  CHECK(server.process().Log().find("KV plan (pages, ") != std::string::npos);
  REQUIRE(Run(server.address(), Greedy({5, 6, 7}, 5)).ok());
  const std::string after = testing::ScrapeMetrics(server.metrics_port());
  auto delta = [&](const std::string& series) {
    return testing::MetricValue(after, series) - testing::MetricValue(before, series);
  };
  CHECK(delta("ferry:generation_tokens_total") == 5);
  CHECK(delta("ferry:prompt_tokens_total") == 3);
  CHECK(delta("ferry:request_success_total{finished_reason=\"length\"}") == 1);
  CHECK(delta("ferry:time_to_first_token_seconds_count") == 1);
  CHECK(delta("ferry:inter_token_latency_seconds_count") == 4);
  CHECK(delta("ferry:e2e_request_latency_seconds_count") == 1);
  CHECK(delta("ferry:iteration_tokens_total_count") >= 5);
  CHECK(delta("ferry:rank_dataplane_bytes_total{rank=\"1\"}") > 0);
  // The request's phases and sizes; inter-token latency has buckets below 10 ms.
  CHECK(delta("ferry:request_prefill_time_seconds_count") == 1);
  CHECK(delta("ferry:request_decode_time_seconds_count") == 1);
  CHECK(delta("ferry:request_prompt_tokens_sum") == 3);
  CHECK(delta("ferry:request_generation_tokens_sum") == 5);
  CHECK(delta("ferry:request_generation_tokens_bucket{le=\"4\"}") == 0);
  CHECK(delta("ferry:request_generation_tokens_bucket{le=\"8\"}") == 1);
  CHECK(testing::MetricValue(after, "ferry:inter_token_latency_seconds_bucket{le=\"0.001\"}") >= 0);
  // Each worker serves its own /metrics on the port after the coordinator's (+1 + rank).
  const std::string w1 = testing::ScrapeMetrics(server.metrics_port() + 2);
  CHECK(testing::MetricValue(w1, "ferry_worker:step_time_seconds_count{rank=\"1\"}") >= 5);
  CHECK(testing::MetricValue(w1, "ferry_worker:dataplane_bytes_total{rank=\"1\"}") > 0);
  // The finished conversation stays on the workers for the prompt cache, holding pool pages.
  CHECK(Eventually([&] {
    return testing::MetricValue(testing::ScrapeMetrics(server.metrics_port() + 2),
                                "ferry_worker:live_sequences{rank=\"1\"}") == 1;
  }));
  auto after_info = cli::GetServerInfo(server.address());
  REQUIRE(after_info.ok());
  CHECK(after_info->kv_used_pages() == 1);
}

}  // namespace
}  // namespace ferry
