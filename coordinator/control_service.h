// The control plane's server side (ferry.control.v1.Control) and the StepRunner that drives the
// workers through it: every step is written to each rank's stream, then each rank's result is
// waited for; rank 0's carries the sampled tokens.
//
// Liveness: a rank whose stream ends (the worker exited, its connection or keepalive failed) is
// dead, unless the coordinator ended it. A step has a deadline (SetStepDeadline): a rank that has
// not answered by then is dead. A rank's answer may name peers its data plane waited for in vain
// (StepResult.waited_for: the worker's own watchdog, which fires first); the first of them that
// has not answered is dead, so the rank named is the one that hung, not the one that gave up.
// The first death is the group's cause of failure (FirstDeath()).
//
// Thread safety: the gRPC handlers run on gRPC's threads; RunStep() and Shutdown() on the
// scheduler's (one at a time). Once its rank is ready, a stream is written only by
// RunStep()/Shutdown() and read only by its handler, which queues the rank's results.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "coordinator/scheduler.h"
#include "ferry/v1/control.grpc.pb.h"

namespace ferry::coordinator {

// The gRPC metadata key of the cluster token workers present on every control call.
inline constexpr char kClusterTokenKey[] = "ferry-cluster-token";

class Metrics;

struct RankState {
  bool registered = false;
  bool ready = false;
  bool dead = false;
  int64_t pid = 0;
  std::string address;
  int64_t room_bytes = 0;
  int64_t page_bytes = 0;   // one KV page of its arena
  int64_t fixed_bytes = 0;  // one conversation's fixed (recurrent) state
  int64_t latent_page_bytes = 0;  // the latent part of page_bytes
  double last_step_seconds = 0;
  std::string death;  // why it is dead
  bool cancelled = false;  // its stream was cancelled by the coordinator (CancelAll): not a death
  bool failed_step = false;  // it answered a step with an error (then exits: not a death of its own)
  grpc::ServerReaderWriter<ferry::control::v1::CoordinatorMessage, ferry::control::v1::WorkerMessage>* stream =
      nullptr;
  grpc::ServerContext* ctx = nullptr;  // of the Steps call, to cancel it
  int users = 0;                       // RunStep/Shutdown calls using `stream` right now
  bool closing = false;                // a Shutdown was written: its end is not a death
};

class ControlService final : public ferry::control::v1::Control::Service, public StepRunner {
 public:
  // `vocab` bounds the tokens rank 0 may return.
  // page_size: tokens a KV page holds on every worker.
  ControlService(std::string model_path, int world, int64_t vocab, int64_t page_size,
                 std::chrono::seconds register_timeout, Metrics* metrics);

  grpc::Status Register(grpc::ServerContext* ctx, const ferry::control::v1::RegisterRequest* req,
                        ferry::control::v1::RegisterResponse* resp) override;
  grpc::Status Steps(grpc::ServerContext* ctx,
                     grpc::ServerReaderWriter<ferry::control::v1::CoordinatorMessage, ferry::control::v1::WorkerMessage>*
                         stream) override;

  // OK once every rank is ready; UNAVAILABLE once a rank died; FAILED_PRECONDITION while waiting.
  absl::Status ReadyState() const;
  // Cancels every rank's step stream (the group has failed: its workers exit), and makes a RunStep
  // waiting on a rank return at once. Cancelled ranks are not marked dead.
  void CancelAll();
  // A step (or arena sizing) not answered by every rank within `d` marks the first rank that has
  // not answered dead. Default: 65 s (the workers' default --step-timeout of 60 s, and 5 s for
  // their own watchdog's report, which names the peer, to arrive first).
  void SetStepDeadline(std::chrono::milliseconds d) { step_deadline_ = d; }
  // The first rank found dead and why ({-1, ""} while none is).
  std::pair<int, std::string> FirstDeath() const;
  absl::StatusOr<std::vector<step::SampledToken>> RunStep(const step::Step& step) override;
  // Once every rank is ready and before the first step: every worker fixes its KV arena at
  // `pages` pages. An error names the rank that could not (its worker's message).
  absl::Status SizeArenas(int64_t pages, int64_t latent_pages = 0);
  // Tells every ready worker to exit and releases the handlers.
  void Shutdown(const std::string& reason);

  // Requires every control call to carry `token` in the "ferry-cluster-token" metadata
  // (UNAUTHENTICATED otherwise); empty: no check. Call before serving.
  void RequireToken(std::string token) { token_ = std::move(token); }

  // Called (outside the lock) when a rank is found dead.
  void OnRankDeath(std::function<void(int rank, const std::string& why)> fn) { on_death_ = std::move(fn); }
  std::vector<RankState> Ranks() const;
  int world() const { return world_; }

 private:
  void MarkDead(int rank, const std::string& why);
  // Writes `msg` to every rank's stream and waits for one StepResult from each (in any order); the
  // results must carry `id` and their rank. UNAVAILABLE when a rank is gone, named by a peer's
  // watchdog, or past the step deadline (it is marked dead); INTERNAL for a mislabelled answer.
  absl::StatusOr<std::vector<ferry::control::v1::StepResult>> RoundTrip(const ferry::control::v1::CoordinatorMessage& msg,
                                                                        uint64_t id, const char* what);
  grpc::Status CheckToken(const grpc::ServerContext* ctx) const;

  const std::string model_path_;
  const int world_;
  const int64_t vocab_;
  const int64_t page_size_;
  const uint64_t dataplane_nonce_;  // random, for this coordinator's lifetime (RegisterResponse)
  const std::chrono::seconds register_timeout_;
  Metrics* metrics_;
  std::function<void(int, const std::string&)> on_death_;
  std::string token_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::chrono::milliseconds step_deadline_{65000};
  std::vector<RankState> ranks_;  // GUARDED_BY(mu_)
  // Results each rank's handler has read and RoundTrip has not taken yet.
  std::vector<std::deque<ferry::control::v1::StepResult>> inbox_;  // GUARDED_BY(mu_)
  int first_dead_ = -1;            // GUARDED_BY(mu_)
  bool shutdown_ = false;         // GUARDED_BY(mu_)
  bool cancelled_ = false;        // GUARDED_BY(mu_): CancelAll() was called
};

}  // namespace ferry::coordinator
