// The client side of the serving tests (serve_test.cc, serve_faults_test.cc): the tiny
// checkpoints, a greedy request, one call through the gRPC API, the server's running count, a
// polling wait and a request run in the background.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/client.h"

namespace ferry::serve_test {

using ferry::v1::GenerateRequest;

inline const std::string kDsa = std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny";
inline const std::string kNext = std::string(FERRY_TEST_DATA_DIR) + "/glm5next-tiny";

inline GenerateRequest Greedy(const std::vector<int32_t>& prompt, int max_tokens, const std::string& id = "") {
  GenerateRequest req;
  req.set_request_id(id);
  for (int32_t t : prompt) req.add_prompt_token_ids(t);
  req.mutable_sampling()->set_max_tokens(max_tokens);
  req.mutable_sampling()->set_ignore_eos(true);
  return req;
}

inline absl::StatusOr<v1::Finished> Run(const std::string& address, const GenerateRequest& req,
                                        std::vector<int32_t>* streamed = nullptr, int timeout_ms = 60000,
                                        std::vector<v1::TokenLogprobs>* streamed_logprobs = nullptr) {
  return cli::GenerateRemote(address, req, std::chrono::milliseconds(timeout_ms), [&](const v1::TokenChunk& c) {
    if (streamed) streamed->insert(streamed->end(), c.token_ids().begin(), c.token_ids().end());
    if (streamed_logprobs) streamed_logprobs->insert(streamed_logprobs->end(), c.logprobs().begin(), c.logprobs().end());
  });
}

// Running requests on the server, or -1 when it cannot be asked.
inline int Running(const std::string& address) {
  auto info = cli::GetServerInfo(address);
  return info.ok() ? info->running_requests() : -1;
}

// Polls `pred` for up to `ms` milliseconds.
template <typename Pred>
bool Eventually(Pred pred, int ms = 5000) {
  for (int i = 0; i < ms / 10; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// A request run on its own thread until the test stops it. Each call opens a fresh channel; one
// whose connection failed fails at once with UNAVAILABLE, before the server sees the request (seen
// in CI: the request never ran), and is tried again while it has not been seen running. A server
// that stopped serving answers UNAVAILABLE every time: a failure all the same. The destructor
// joins the thread (a REQUIRE that throws past a joinable thread would abort the binary).
struct BackgroundRequest {
  BackgroundRequest(const std::string& address, GenerateRequest req)
      : thread([this, address, req] {
          for (int attempt = 0; attempt < 3; ++attempt) {
            result = Run(address, req);
            if (result.status().code() != absl::StatusCode::kUnavailable || seen_running.load()) break;
          }
          done = true;
        }) {}
  ~BackgroundRequest() {
    if (thread.joinable()) thread.join();
  }
  // Whether the server reports one running request within `ms`.
  bool SeenRunning(const std::string& address, int ms = 15000) {
    seen_running = Eventually([&] { return Running(address) == 1; }, ms);
    return seen_running.load();
  }
  std::string Status() const { return done.load() ? result.status().ToString() : "still out"; }

  std::atomic<bool> done{false}, seen_running{false};
  absl::StatusOr<v1::Finished> result;
  std::thread thread;  // last: it starts once the members it uses exist
};

}  // namespace ferry::serve_test
