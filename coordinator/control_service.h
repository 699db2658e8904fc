// The control plane's server side (ferry.control.v1.Control) and the StepRunner that drives the
// workers through it: every step is written to each rank's stream, then each rank's result is
// read back; rank 0's carries the sampled tokens.
//
// Thread safety: the gRPC handlers run on gRPC's threads; RunStep() and Shutdown() on the
// scheduler's (one at a time). A stream is written and read only by RunStep()/Shutdown() once
// its rank is ready; its handler just keeps the call open and watches for cancellation.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
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
  // Cancels every rank's step stream, so that a RunStep blocked on a rank returns at once.
  void CancelAll();
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
  // Writes `msg` to every rank's stream and reads one StepResult from each, in rank order; the
  // results must carry `id` and their rank. UNAVAILABLE when a rank is gone (it is marked dead).
  absl::StatusOr<std::vector<ferry::control::v1::StepResult>> RoundTrip(const ferry::control::v1::CoordinatorMessage& msg,
                                                                        uint64_t id, const char* what);
  grpc::Status CheckToken(const grpc::ServerContext* ctx) const;

  const std::string model_path_;
  const int world_;
  const int64_t vocab_;
  const int64_t page_size_;
  const std::chrono::seconds register_timeout_;
  Metrics* metrics_;
  std::function<void(int, const std::string&)> on_death_;
  std::string token_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RankState> ranks_;  // GUARDED_BY(mu_)
  bool shutdown_ = false;         // GUARDED_BY(mu_)
};

}  // namespace ferry::coordinator
