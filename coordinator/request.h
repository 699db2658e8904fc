// A generation request as the coordinator tracks it, and the event channel through which the
// scheduler hands its tokens and its end to the RPC that is waiting for them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "step/sampling.h"

namespace ferry::coordinator {

using Clock = std::chrono::steady_clock;

enum class FinishReason { kStop, kLength, kAbort, kError };
const char* FinishReasonName(FinishReason r);  // "stop", "length", "abort", "error"

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

struct Timings {
  double queue_seconds = 0;
  double time_to_first_token_seconds = 0;
  double e2e_seconds = 0;
};

// What the scheduler tells a request's RPC: some tokens, or the end.
struct RequestEvent {
  std::vector<int32_t> tokens;
  std::vector<step::SampledToken> logprobs;  // one for each of tokens, with sampling.top_logprobs >= 0
  bool finished = false;
  FinishReason reason = FinishReason::kStop;
  std::string error;
  Usage usage;
  Timings timings;
};

// A single-producer (scheduler), single-consumer (RPC thread) queue of events.
// Thread safety: all methods are safe to call concurrently.
class EventChannel {
 public:
  void Push(RequestEvent e);
  // The next event, or nullopt if none arrived within `timeout`.
  std::optional<RequestEvent> Pop(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;  // GUARDED_BY(mu_)
};

struct Request {
  // Set at submission, then read-only.
  std::string id;
  std::vector<int32_t> prompt;
  step::SamplingParams sampling;
  uint64_t seed = 0;
  int64_t max_tokens = 0;                // >= 1
  std::vector<int32_t> stop_token_ids;   // eos included unless ignore_eos
  bool stream = false;
  // Who may abort it by id: for a client-chosen id, the connection that sent it (gRPC's peer);
  // empty for a server-assigned id (unguessable: whoever holds it may).
  std::string caller;
  Clock::time_point arrival = Clock::now();
  EventChannel events;
  // Set by Abort() or a cancelled RPC from any thread; the scheduler acts on it at the next step.
  std::atomic<bool> abort_requested{false};
  // Set with abort_requested by EndWithStop(): the request ends as if a stop token had come
  // (a stop string in its text): finish reason STOP, its state kept like any finished one.
  std::atomic<bool> stop_requested{false};

  // Owned by the scheduler thread.
  uint64_t seq_id = 0;
  int64_t fed = 0;                 // tokens already in the workers' state
  std::vector<int32_t> generated;  // sampled tokens (the last one not yet fed)
  std::vector<step::SampledToken> logprobs;  // with sampling.top_logprobs >= 0: generated's
  std::vector<int32_t> pages;      // pool pages holding its fed tokens (with a page pool)
  // The latent split: the rank holding its latent rows (-1: every rank), whether every rank
  // holds them for now (a borrowed fill), and each rank's latent pages (indexed by rank).
  int owner = -1;
  bool borrowed = false;
  std::vector<std::vector<int32_t>> latent_pages;
  int64_t cached = 0;              // prompt tokens reused from the prompt cache
  std::optional<Clock::time_point> first_scheduled, first_token, last_token;
};

}  // namespace ferry::coordinator
