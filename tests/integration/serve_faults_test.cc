// The serving system's failure and refusal paths, as users meet them: cancellation and Abort,
// bad requests, a full admission queue, a killed, stopped or dead worker or coordinator (real
// coordinator and worker processes on loopback, through the gRPC API). Who may join and where the
// processes listen: serve_security_test.cc.
#include <algorithm>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "ferry/v1/ferry.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/catch.h"
#include "tests/integration/serve_client.h"
#include "tests/testing/files.h"
#include "tests/testing/server_process.h"

namespace ferry {
namespace {

using ferry::testing::Server;
using namespace ferry::serve_test;  // NOLINT: the tests' client helpers

TEST_CASE("serve: cancellation and Abort end a request within a step and free it", "[serve]") {
  Server server(kDsa, 2);
  REQUIRE(server.serving());
  const std::vector<int32_t> prompt = {5, 6, 7, 8};
  // A client deadline cancels the call; the request is aborted on the server.
  GenerateRequest slow = Greedy(prompt, 4000, "slow");
  slow.set_stream(true);
  auto res = Run(server.address(), slow, nullptr, 300);
  INFO(res.status().ToString());
  CHECK(res.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(Eventually([&] { return testing::MetricValue(testing::ScrapeMetrics(server.metrics_port()),
                                                     "ferry:request_success_total{finished_reason=\"abort\"}") == 1; }));
  CHECK(Eventually([&] { return Running(server.address()) == 0; }));
  CHECK(Eventually([&] {
    return testing::MetricValue(testing::ScrapeMetrics(server.metrics_port()), "ferry:kv_cache_usage_perc") == 0;
  }));

  // Abort by id.
  BackgroundRequest victim(server.address(), Greedy(prompt, 4000, "victim"));
  const bool running = victim.SeenRunning(server.address());
  INFO("the request: " << victim.Status());
  REQUIRE(running);
  {
    // Over another connection a client-chosen id is not found, and the request runs on.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto stub = v1::Ferry::NewStub(grpc::CreateCustomChannel(server.address(), grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext ctx;
    v1::AbortRequest other;
    other.set_request_id("victim");
    v1::AbortResponse resp;
    REQUIRE(stub->Abort(&ctx, other, &resp).ok());
    CHECK_FALSE(resp.found());
    CHECK(Running(server.address()) == 1);
  }
  auto found = cli::AbortRemote(server.address(), "victim");
  REQUIRE(found.ok());
  CHECK(*found);
  CHECK(Eventually([&] { return victim.done.load(); }, 2000));
  victim.thread.join();
  REQUIRE(victim.result.ok());
  CHECK(victim.result->finish_reason() == v1::FINISH_REASON_ABORT);
  CHECK(victim.result->usage().completion_tokens() < 4000);
  CHECK(Eventually([&] { return Running(server.address()) == 0; }));
  auto again = cli::AbortRemote(server.address(), "victim");
  REQUIRE(again.ok());
  CHECK_FALSE(*again);
}

// One call of `method` (full name) with raw `bytes` as its request, through gRPC's generic API: the
// final status (responses, if any, are read and dropped).
grpc::Status RawCall(const std::string& address, const std::string& method, const std::string& bytes) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::CompletionQueue cq;
  void* tag = nullptr;
  bool ok = false;
  auto call = stub.PrepareCall(&ctx, method, &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  call->WritesDone(reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  for (;;) {  // until the stream ends
    grpc::ByteBuffer response;
    call->Read(&response, reinterpret_cast<void*>(4));
    cq.Next(&tag, &ok);
    if (!ok) break;
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  cq.Next(&tag, &ok);
  return status;
}

TEST_CASE("serve: request bytes that are not the message get INVALID_ARGUMENT naming it - and serving goes on",
          "[serve]") {
  Server server(kDsa, 1);
  REQUIRE(server.serving());
  const std::string junk("\xff\xff\xff\xff", 4);  // a field key whose varint never ends
  for (const auto& [method, message] : std::vector<std::pair<std::string, std::string>>{
           {"/ferry.v1.Ferry/Generate", "ferry.v1.GenerateRequest"},
           {"/ferry.v1.Ferry/Abort", "ferry.v1.AbortRequest"},
           {"/ferry.v1.Ferry/GetModelInfo", "ferry.v1.GetModelInfoRequest"},
           {"/ferry.v1.Ferry/GetServerInfo", "ferry.v1.GetServerInfoRequest"}}) {
    const grpc::Status st = RawCall(server.address(), method, junk);
    INFO(method << ": " << st.error_code() << " " << st.error_message());
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(st.error_message() == "the request's 4 bytes are not a valid " + message);
  }
  // Valid bytes through the same path are served.
  ferry::v1::GenerateRequest ok = Greedy({5, 6, 7}, 4);
  CHECK(RawCall(server.address(), "/ferry.v1.Ferry/Generate", ok.SerializeAsString()).ok());
  auto r = Run(server.address(), Greedy({5, 6, 7}, 4));
  REQUIRE(r.ok());
  CHECK(r->token_ids_size() == 4);
}

TEST_CASE("serve: bad requests get INVALID_ARGUMENT with the numbers - and serving goes on", "[serve]") {
  Server server(kDsa, 1, {"--context", "64"});
  REQUIRE(server.serving());
  auto expect = [&](GenerateRequest req, const std::string& what) {
    auto res = Run(server.address(), req);
    REQUIRE_FALSE(res.ok());
    CHECK(res.status().code() == absl::StatusCode::kInvalidArgument);
    INFO(res.status().message());
    CHECK(std::string(res.status().message()).find(what) != std::string::npos);
  };
  expect(Greedy({}, 4), "the prompt is empty: give prompt_token_ids or prompt (text)");
  expect(Greedy({5, 384}, 4), "prompt_token_ids[1] = 384 is outside the vocabulary [0, 384)");
  expect(Greedy({5, -2}, 4), "prompt_token_ids[1] = -2");
  expect(Greedy(std::vector<int32_t>(60, 5), 10), "the prompt (60 tokens) + max_tokens (10) = 70 exceeds the context length 64");
  expect(Greedy(std::vector<int32_t>(64, 5), 1), "the prompt has 64 tokens; the context holds 64");
  expect(Greedy({5}, 0), "sampling.max_tokens is 0; it must be >= 1");
  GenerateRequest t = Greedy({5}, 4);
  t.mutable_sampling()->set_temperature(-1);
  expect(t, "sampling.temperature is -1");
  GenerateRequest p = Greedy({5}, 4);
  p.mutable_sampling()->set_top_p(1.5f);
  expect(p, "sampling.top_p is 1.5; it must be in (0, 1]");
  GenerateRequest k = Greedy({5}, 4);
  k.mutable_sampling()->set_top_k(-3);
  expect(k, "sampling.top_k is -3");
  GenerateRequest s = Greedy({5}, 4);
  s.mutable_sampling()->add_stop_token_ids(999);
  expect(s, "sampling.stop_token_ids[0] = 999");
  // A message far past what a valid request at this context can be is refused before it is
  // parsed (1 MiB + 10 bytes a context token here), with both sizes.
  auto big = Run(server.address(), Greedy(std::vector<int32_t>(600000, 383), 1));
  REQUIRE_FALSE(big.ok());
  CHECK(big.status().code() == absl::StatusCode::kResourceExhausted);
  INFO(big.status().message());
  CHECK(std::string(big.status().message()).find("1049216") != std::string::npos);
  auto ok = Run(server.address(), Greedy({5, 6}, 3));
  INFO(ok.status().ToString());
  REQUIRE(ok.ok());
  CHECK(ok->token_ids_size() == 3);
}

// A copy of glm-dsa-tiny whose lm_head holds finite but huge weights (bf16 1.7e38): every logit
// overflows float32 to an infinity or a NaN.
std::string OverflowingCheckpoint(const testing::TempDir& dir) {
  for (const auto& e : std::filesystem::directory_iterator(kDsa)) {
    std::filesystem::copy_file(e.path(), dir.File(e.path().filename().string()));
  }
  std::fstream f(dir.File("model.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  const nlohmann::json h = nlohmann::json::parse(header);
  const auto& t = h.at("lm_head.weight");
  REQUIRE(t.at("dtype") == "BF16");
  const int64_t begin = t.at("data_offsets")[0], end = t.at("data_offsets")[1];
  const std::string huge(static_cast<size_t>(end - begin), '\0');
  std::string bytes = huge;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    bytes[i] = 0x00;
    bytes[i + 1] = 0x7f;  // bf16 0x7f00 = 1.7e38, finite
  }
  f.seekp(static_cast<std::streamoff>(8 + header_len + begin));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return dir.path();
}

TEST_CASE("serve: a request whose logits turn non-finite ends with ERROR saying so - and serving goes on",
          "[serve]") {
  testing::TempDir dir;
  Server server(OverflowingCheckpoint(dir), 2);
  INFO(server.process().Log());
  REQUIRE(server.serving());
  for (float temperature : {0.0f, 0.8f}) {
    GenerateRequest req = Greedy({5, 6, 7}, 4);
    req.mutable_sampling()->set_temperature(temperature);
    auto res = Run(server.address(), req);
    REQUIRE(res.ok());
    CHECK(res->finish_reason() == v1::FINISH_REASON_ERROR);
    CHECK(res->token_ids_size() == 0);
    CHECK(res->error() == "the model's logits after 3 tokens hold a NaN or an infinity; no token was sampled");
  }
  CHECK(Running(server.address()) == 0);
}

TEST_CASE("serve: a full admission queue answers RESOURCE_EXHAUSTED at once", "[serve]") {
  Server server(kDsa, 1, {"--parallel", "1", "--max-queue", "1"});
  REQUIRE(server.serving());
  // Requests a and b hold the lane and the queue; whatever fails below, they are aborted and
  // their threads joined (a REQUIRE that throws past a joinable thread would abort the binary).
  std::vector<std::thread> holders;
  struct Cleanup {
    const std::string address;
    std::vector<std::thread>& threads;
    ~Cleanup() {
      for (const char* id : {"b", "a"}) (void)cli::AbortRemote(address, id);
      for (auto& t : threads) t.join();
    }
  } cleanup{server.address(), holders};
  holders.emplace_back([&] { (void)Run(server.address(), Greedy({5, 6}, 4000, "a")); });
  REQUIRE(Eventually([&] { return Running(server.address()) == 1; }));
  holders.emplace_back([&] { (void)Run(server.address(), Greedy({5, 6}, 4000, "b")); });
  REQUIRE(Eventually([&] {
    auto i = cli::GetServerInfo(server.address());
    return i.ok() && i->waiting_requests() == 1;
  }));
  const auto t0 = std::chrono::steady_clock::now();
  auto c = Run(server.address(), Greedy({5, 6}, 4, "c"));
  CHECK(c.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(c.status().message()).find("--max-queue 1") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  auto ab = cli::AbortRemote(server.address(), "b");
  auto aa = cli::AbortRemote(server.address(), "a");
  CHECK((ab.ok() && *ab));
  CHECK((aa.ok() && *aa));
  for (auto& t : holders) t.join();
  holders.clear();
  auto d = Run(server.address(), Greedy({5, 6}, 2, "d"));
  CHECK(d.ok());
}

TEST_CASE("serve: a killed worker is reported - serve exits non-zero", "[serve]") {
  Server server(kDsa, 2);
  REQUIRE(server.serving());
  auto info = cli::GetServerInfo(server.address());
  REQUIRE(info.ok());
  REQUIRE(info->ranks_size() == 2);
  kill(static_cast<pid_t>(info->ranks(1).pid()), SIGKILL);
  int status = 0;
  REQUIRE(server.process().Wait(std::chrono::seconds(15), &status));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(server.process().Log().find("worker rank 1 (pid " + std::to_string(info->ranks(1).pid()) +
                                    ") was killed by signal 9") != std::string::npos);
}

// The data plane's watchdog: a worker stopped with SIGSTOP takes no part in the next step's
// reductions; its peer gives up after --step-timeout, exits 1 naming the step and the rank it
// waited for, and serve stops the group (the stopped worker included) and exits 1.
// Stops one rank of a running group (SIGSTOP: its process lives, its sockets stay open) and
// returns serve's log once serve has exited, with its exit status and how long that took.
struct StoppedRun {
  std::string log;
  int status = 0;
  double seconds = 0;
  pid_t stopped = 0, other = 0;
};
StoppedRun StopRankAndWait(int world, int victim, const std::vector<std::string>& flags) {
  Server server(kDsa, world, flags);
  REQUIRE(server.serving());
  auto info = cli::GetServerInfo(server.address());
  REQUIRE(info.ok());
  REQUIRE(info->ranks_size() == world);
  StoppedRun run;
  run.stopped = static_cast<pid_t>(info->ranks(victim).pid());
  run.other = world > 1 ? static_cast<pid_t>(info->ranks(1 - victim).pid()) : 0;
  REQUIRE(kill(run.stopped, SIGSTOP) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  BackgroundRequest stuck(server.address(), Greedy({5, 6, 7}, 8));
  REQUIRE(server.process().Wait(std::chrono::seconds(40), &run.status));
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.log = server.process().Log();
  stuck.thread.join();
  CHECK_FALSE((stuck.result.ok() && stuck.result->finish_reason() == v1::FINISH_REASON_LENGTH));
  return run;
}

TEST_CASE("serve: a stopped worker is caught by the step timeout - named - and no process is left", "[serve]") {
  for (int victim : {1, 0}) {
    const StoppedRun run = StopRankAndWait(2, victim, {"--step-timeout", "2"});
    const int other = 1 - victim;
    INFO("stopped rank " << victim << ": " << run.log);
    CHECK(WIFEXITED(run.status));
    CHECK(WEXITSTATUS(run.status) == 1);
    // The live rank's watchdog fires and names the stopped one.
    CHECK(run.log.find(absl::StrCat("rank ", other, ": step ")) != std::string::npos);
    CHECK(run.log.find("aborted after --step-timeout 2 s") != std::string::npos);
    CHECK(run.log.find(absl::StrCat("waiting for: receive from rank ", victim)) != std::string::npos);
    // The coordinator holds the stopped rank dead, not the one that gave up waiting, and serve
    // says so (from the coordinator's health, or when the live worker exits blaming a peer).
    CHECK(run.log.find(absl::StrCat("ferry serve: the coordinator ")) != std::string::npos);
    CHECK(run.log.find(absl::StrCat(": rank ", victim, " is dead: rank ", other, " waited for it in vain during step")) !=
          std::string::npos);
    CHECK(run.log.find(absl::StrCat("rank ", other, " is dead")) == std::string::npos);
    // Detected within the timeout (and serve's stop of the others), not at the 60 s default.
    CHECK(run.seconds < 20);
    // serve reaped every child: none is left, the stopped one included.
    CHECK((kill(run.stopped, 0) == -1 && errno == ESRCH));
    CHECK((kill(run.other, 0) == -1 && errno == ESRCH));
  }
}

TEST_CASE("serve: a rank that answers no step is dead at the coordinator's step deadline", "[serve]") {
  // One rank: no peer's watchdog can name it; the coordinator's deadline (--step-timeout + 5 s)
  // does, well before keepalive (30 s here) would.
  const StoppedRun run = StopRankAndWait(1, 0, {"--step-timeout", "1", "--keepalive-s", "30"});
  INFO(run.log);
  CHECK(WIFEXITED(run.status));
  CHECK(WEXITSTATUS(run.status) == 1);
  CHECK(run.log.find("rank 0 is dead: it did not answer step ") != std::string::npos);
  CHECK(run.log.find("within 6 s (the step deadline)") != std::string::npos);
  CHECK(run.seconds < 25);
  CHECK((kill(run.stopped, 0) == -1 && errno == ESRCH));
}

TEST_CASE("serve: a stopped coordinator is found by the workers' keepalive - they exit and serve names it",
          "[serve]") {
  Server server(kDsa, 2, {"--keepalive-s", "1"});
  REQUIRE(server.serving());
  auto info = cli::GetServerInfo(server.address());
  REQUIRE(info.ok());
  const pid_t w0 = static_cast<pid_t>(info->ranks(0).pid()), w1 = static_cast<pid_t>(info->ranks(1).pid());
  const pid_t coordinator = server.CoordinatorPid();
  REQUIRE(coordinator > 0);
  REQUIRE(kill(coordinator, SIGSTOP) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  REQUIRE(server.process().Wait(std::chrono::seconds(40), &status));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = server.process().Log();
  INFO(log);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(log.find("exited with status 4: it lost the coordinator") != std::string::npos);
  CHECK(secs < 25);  // keepalive 1 s: the workers notice within seconds; serve then stops everyone
  for (pid_t p : {w0, w1, coordinator}) CHECK((kill(p, 0) == -1 && errno == ESRCH));
}

TEST_CASE("coordinator: health is NOT_SERVING from its first answer until the workers are up - and Watch streams "
          "the change",
          "[serve]") {
  const int port = testing::FreePortRun(2);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const std::string control = "127.0.0.1:" + std::to_string(port + 1);
  const std::string bin = testing::BinDir();
  const std::string coord_log = testing::TempLog("ferry-coord"), w0_log = testing::TempLog("ferry-w0");
  testing::Process coord({bin + "/ferry-coordinator", "--model", kDsa, "--ranks", "1", "--port", std::to_string(port),
                          "--control-port", std::to_string(port + 1), "--metrics-port", "0", "--http-port", "0"},
                         coord_log);
  INFO(coord.Log());
  // Asked as fast as it answers from the moment it starts: never SERVING without a worker (the
  // built-in gRPC service said SERVING for "" until the coordinator first set it).
  int answers = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < until) {
    for (const char* service : {"", "ferry.v1.Ferry"}) {
      auto s = cli::CheckServing(address, std::chrono::milliseconds(100), service);
      if (!s.ok()) continue;  // not listening yet
      ++answers;
      INFO("service '" << service << "' after " << answers << " answers");
      REQUIRE_FALSE(*s);
    }
  }
  CHECK(answers > 0);
  auto unknown = cli::CheckServing(address, std::chrono::seconds(5), "no.such.Service");
  CHECK(unknown.status().code() == absl::StatusCode::kNotFound);

  // A Watch opened now sees NOT_SERVING, then SERVING once the worker registers.
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext watch_ctx;
  grpc::health::v1::HealthCheckRequest req;
  std::vector<int> seen;
  std::atomic<bool> watch_done{false};
  std::thread watcher([&] {
    auto reader = stub->Watch(&watch_ctx, req);
    grpc::health::v1::HealthCheckResponse resp;
    while (reader->Read(&resp)) {
      seen.push_back(resp.status());
      if (resp.status() == grpc::health::v1::HealthCheckResponse::SERVING) break;
    }
    watch_done = true;
  });
  testing::Process w0({bin + "/ferry-worker", "--coordinator", control, "--rank", "0", "--world", "1"}, w0_log);
  CHECK(Eventually([&] { return watch_done.load(); }, 30000));
  if (!watch_done) watch_ctx.TryCancel();
  watcher.join();
  REQUIRE(seen.size() >= 2);
  CHECK(seen.front() == grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  CHECK(seen.back() == grpc::health::v1::HealthCheckResponse::SERVING);
  auto serving = cli::CheckServing(address, std::chrono::seconds(5));
  REQUIRE(serving.ok());
  CHECK(*serving);
  // An open Watch does not hold the coordinator up at SIGTERM.
  grpc::ClientContext open_ctx;
  auto open_watch = stub->Watch(&open_ctx, req);
  grpc::health::v1::HealthCheckResponse first;
  REQUIRE(open_watch->Read(&first));
  coord.Signal(SIGTERM);
  int status = 0;
  REQUIRE(coord.Wait(std::chrono::seconds(10), &status));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  while (open_watch->Read(&first)) {
  }
  int w0_status = 0;
  CHECK(w0.Wait(std::chrono::seconds(10), &w0_status));
}

TEST_CASE("coordinator: a dead worker turns health NOT_SERVING and fails requests instead of hanging",
          "[serve]") {
  const int port = testing::FreePortRun(2);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const std::string control = "127.0.0.1:" + std::to_string(port + 1);
  const std::string bin = testing::BinDir();
  const std::string coord_log = testing::TempLog("ferry-coord"), w0_log = testing::TempLog("ferry-w0"),
                    w1_log = testing::TempLog("ferry-w1");
  testing::Process coord({bin + "/ferry-coordinator", "--model", kDsa, "--ranks", "2", "--port", std::to_string(port),
                          "--control-port", std::to_string(port + 1), "--metrics-port", "0", "--http-port", "0"},
                         coord_log);
  testing::Process w0({bin + "/ferry-worker", "--coordinator", control, "--rank", "0", "--world", "2"}, w0_log);
  testing::Process w1({bin + "/ferry-worker", "--coordinator", control, "--rank", "1", "--world", "2"}, w1_log);
  INFO(coord.Log() << w0.Log() << w1.Log());
  REQUIRE(Eventually([&] { auto s = cli::CheckServing(address, std::chrono::milliseconds(200)); return s.ok() && *s; },
                     30000));
  // The public service answers by its own name too.
  auto by_name = cli::CheckServing(address, std::chrono::seconds(5), "ferry.v1.Ferry");
  INFO(by_name.status().ToString());
  REQUIRE(by_name.ok());
  CHECK(*by_name);
  BackgroundRequest inflight(address, Greedy({5, 6}, 4000));
  const bool running = inflight.SeenRunning(address);
  INFO("the request: " << inflight.Status());
  REQUIRE(running);
  w1.Signal(SIGKILL);
  CHECK(Eventually([&] { return inflight.done.load(); }, 15000));
  inflight.thread.join();
  // The request ends with a finished message that says error, never a hang.
  REQUIRE(inflight.result.ok());
  CHECK(inflight.result->finish_reason() == v1::FINISH_REASON_ERROR);
  CHECK(inflight.result->error().find("rank 1") != std::string::npos);
  CHECK(Eventually([&] { auto s = cli::CheckServing(address, std::chrono::milliseconds(200)); return s.ok() && !*s; }));
  CHECK(Eventually([&] {
    auto s = cli::CheckServing(address, std::chrono::milliseconds(200), "ferry.v1.Ferry");
    return s.ok() && !*s;
  }));
  int w0_status = 0;
  CHECK(w0.Wait(std::chrono::seconds(10), &w0_status));  // its stream was cancelled: it exits
  auto late = Run(address, Greedy({5}, 2));
  CHECK(late.status().code() == absl::StatusCode::kUnavailable);
  auto info = cli::GetServerInfo(address);
  REQUIRE(info.ok());
  CHECK(info->ranks(1).state() == "dead");
  coord.Signal(SIGTERM);
  int status = 0;
  REQUIRE(coord.Wait(std::chrono::seconds(10), &status));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);  // it served, then lost a rank
  for (const std::string& f : {coord_log, w0_log, w1_log}) std::remove(f.c_str());
}

}  // namespace
}  // namespace ferry
