#include "coordinator/control_service.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "common/cluster_token.h"
#include "common/log.h"
#include "common/status.h"
#include "coordinator/metrics.h"
#include "step/step_proto.h"

namespace ferry::coordinator {

namespace cpb = ferry::control::v1;

ControlService::ControlService(std::string model_path, int world, int64_t vocab, int64_t page_size,
                               std::chrono::seconds register_timeout, Metrics* metrics)
    : model_path_(std::move(model_path)),
      world_(world),
      vocab_(vocab),
      page_size_(page_size),
      dataplane_nonce_([] {
        std::random_device rd;
        return static_cast<uint64_t>(rd()) << 32 | rd();
      }()),
      register_timeout_(register_timeout),
      metrics_(metrics),
      ranks_(static_cast<size_t>(world)),
      inbox_(static_cast<size_t>(world)) {}

grpc::Status ControlService::CheckToken(const grpc::ServerContext* ctx) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  auto it = md.find(kClusterTokenKey);
  if (it == md.end() || !TokensEqual(std::string_view(it->second.data(), it->second.size()), token_)) {
    FERRY_LOG(WARNING) << "refused a control call from " << ctx->peer() << ": no or a wrong cluster token";
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "control calls need this deployment's cluster token (--token-file or FERRY_CLUSTER_TOKEN)");
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::Register(grpc::ServerContext* ctx, const cpb::RegisterRequest* req,
                                      cpb::RegisterResponse* resp) {
  if (grpc::Status st = CheckToken(ctx); !st.ok()) return st;
  const int rank = req->rank();
  std::unique_lock<std::mutex> lock(mu_);
  if (rank < 0 || rank >= world_) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("rank ", rank, " is outside [0, ", world_, ")"));
  }
  if (ranks_[rank].registered) {
    return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, absl::StrCat("rank ", rank, " is already registered"));
  }
  if (req->world_size() != 0 && req->world_size() != world_) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("rank ", rank, " was started for ", req->world_size(), " ranks; this coordinator serves ",
                                     world_));
  }
  if (shutdown_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down");
  ranks_[rank].registered = true;
  ranks_[rank].pid = req->pid();
  ranks_[rank].address = req->dataplane_address();
  FERRY_LOG(INFO) << "rank " << rank << " registered (pid " << req->pid() << ")";
  cv_.notify_all();
  const auto all = [this] {
    for (const RankState& r : ranks_) {
      if (!r.registered) return false;
    }
    return true;
  };
  // Wake every 100 ms: a worker that went away while waiting gives its slot back.
  const auto deadline = std::chrono::steady_clock::now() + register_timeout_;
  while (!all()) {
    if (shutdown_) {
      ranks_[rank].registered = false;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down");
    }
    if (ctx->IsCancelled() || std::chrono::steady_clock::now() >= deadline) {
      ranks_[rank].registered = false;
      cv_.notify_all();
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("not every rank registered within ", register_timeout_.count(), " s"));
    }
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
  resp->set_model_path(model_path_);
  resp->set_rank(rank);
  resp->set_world_size(world_);
  resp->set_page_size(static_cast<int32_t>(page_size_));
  resp->set_dataplane_nonce(dataplane_nonce_);
  for (const RankState& r : ranks_) resp->add_dataplane_addresses(r.address);
  return grpc::Status::OK;
}

grpc::Status ControlService::Steps(grpc::ServerContext* ctx,
                                   grpc::ServerReaderWriter<cpb::CoordinatorMessage, cpb::WorkerMessage>* stream) {
  if (grpc::Status st = CheckToken(ctx); !st.ok()) return st;
  cpb::WorkerMessage first;
  if (!stream->Read(&first) || !first.has_ready()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the step stream must open with Ready");
  }
  const int rank = first.ready().rank();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (rank < 0 || rank >= world_ || !ranks_[rank].registered || ranks_[rank].ready) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("rank ", rank, " is not registered, or already has a step stream"));
    }
    ranks_[rank].ready = true;
    ranks_[rank].room_bytes = first.ready().room_bytes();
    ranks_[rank].page_bytes = first.ready().page_bytes();
    ranks_[rank].fixed_bytes = first.ready().fixed_bytes();
    ranks_[rank].latent_page_bytes = first.ready().latent_page_bytes();
    ranks_[rank].stream = stream;
    ranks_[rank].ctx = ctx;
    FERRY_LOG(INFO) << "rank " << rank << " ready (" << first.ready().weight_bytes() << " bytes of weights)";
  }
  cv_.notify_all();
  // Read the rank's results as they come (RoundTrip waits for them). The stream's end is the
  // worker's: a death, unless the coordinator ended it (shutdown, CancelAll).
  cpb::WorkerMessage reply;
  bool stray = false;
  while (stream->Read(&reply)) {
    if (!reply.has_result()) {
      stray = true;
      break;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ranks_[rank].failed_step = ranks_[rank].failed_step || !reply.result().error().empty();
      inbox_[rank].push_back(std::move(*reply.mutable_result()));
    }
    cv_.notify_all();
  }
  bool death = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const RankState& r = ranks_[rank];
    // A worker that answered a step with a failure exits after it (its watchdog fired, or the
    // step broke the group): that answer says what failed, not this stream's end.
    death = !shutdown_ && !r.dead && !r.closing && !r.cancelled && !r.failed_step;
  }
  if (death) {
    MarkDead(rank, stray ? "it sent a message that is not a step result; its stream is closed"
                         : "its control stream closed (the worker exited, or its connection or keepalive failed)");
  }
  if (stray) ctx->TryCancel();
  // gRPC destroys the stream when this handler returns: wait until no step uses it.
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ranks_[rank].users == 0; });
  ranks_[rank].stream = nullptr;
  ranks_[rank].ctx = nullptr;
  return grpc::Status::OK;
}

void ControlService::MarkDead(int rank, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ranks_[rank].dead) return;
    ranks_[rank].dead = true;
    ranks_[rank].death = why;
    if (first_dead_ < 0) first_dead_ = rank;
  }
  cv_.notify_all();  // a step waiting for this rank returns
  FERRY_LOG(ERROR) << "rank " << rank << " is dead: " << why;
  if (on_death_) on_death_(rank, why);
}

std::pair<int, std::string> ControlService::FirstDeath() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (first_dead_ < 0) return {-1, ""};
  return {first_dead_, ranks_[first_dead_].death};
}

void ControlService::CancelAll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    for (RankState& r : ranks_) {
      r.cancelled = true;
      if (r.ctx != nullptr) r.ctx->TryCancel();
    }
  }
  cv_.notify_all();
}

absl::Status ControlService::ReadyState() const {
  std::lock_guard<std::mutex> lock(mu_);
  int ready = 0;
  for (int k = 0; k < world_; ++k) {
    if (ranks_[k].dead) return absl::UnavailableError(absl::StrCat("rank ", k, " died: ", ranks_[k].death));
    ready += ranks_[k].ready;
  }
  if (ready == world_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("waiting for ", world_ - ready, " of ", world_, " ranks"));
}

absl::StatusOr<std::vector<step::SampledToken>> ControlService::RunStep(const step::Step& step) {
  cpb::CoordinatorMessage msg;
  step::StepToProto(step, msg.mutable_step());
  FERRY_ASSIGN_OR_RETURN(std::vector<cpb::StepResult> results, RoundTrip(msg, step.step_id, "step"));
  std::vector<step::SampledToken> sampled;
  std::string error;
  int refused = 0;
  for (int k = 0; k < world_; ++k) {
    const cpb::StepResult& r = results[static_cast<size_t>(k)];
    if (k == 0 && r.error().empty()) {
      FERRY_ASSIGN_OR_RETURN(sampled, step::SampledFromProto(r, step, vocab_));
    }
    if (!r.error().empty() && error.empty()) error = absl::StrCat("rank ", k, ": ", r.error());
    refused += !r.error().empty() && r.refused();
    if (metrics_) metrics_->OnRankStep(k, r.step_seconds(), r.dataplane_bytes());
    {
      std::lock_guard<std::mutex> lock(mu_);
      ranks_[k].last_step_seconds = r.step_seconds();
    }
  }
  // Refused by every rank before any state changed: the group is as it was, without this step.
  if (refused == world_) return absl::InvalidArgumentError(absl::StrCat("every rank refused step ", step.step_id, ": ", error));
  if (!error.empty()) return absl::InternalError(error);
  return sampled;
}

absl::StatusOr<std::vector<cpb::StepResult>> ControlService::RoundTrip(const cpb::CoordinatorMessage& msg, uint64_t id,
                                                                     const char* what) {
  std::vector<grpc::ServerReaderWriter<cpb::CoordinatorMessage, cpb::WorkerMessage>*> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int k = 0; k < world_; ++k) {
      if (ranks_[k].dead || ranks_[k].stream == nullptr || shutdown_ || cancelled_) {
        return absl::UnavailableError(absl::StrCat("rank ", k, " is not serving",
                                                   ranks_[k].death.empty() ? "" : ": " + ranks_[k].death));
      }
    }
    for (int k = 0; k < world_; ++k) {
      streams.push_back(ranks_[k].stream);
      ++ranks_[k].users;  // the handler keeps the stream alive until this drops back
      inbox_[k].clear();  // answers to an earlier, failed round
    }
  }
  struct Release {
    ControlService* self;
    ~Release() {
      {
        std::lock_guard<std::mutex> lock(self->mu_);
        for (RankState& r : self->ranks_) --r.users;
      }
      self->cv_.notify_all();
    }
  } release{this};
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < world_; ++k) {
    if (!streams[k]->Write(msg)) {
      MarkDead(k, absl::StrCat("writing a ", what, " to its control stream failed"));
      return absl::UnavailableError(absl::StrCat("rank ", k, " is gone (writing ", what, " ", id, " failed)"));
    }
  }
  std::vector<cpb::StepResult> results(static_cast<size_t>(world_));
  std::vector<bool> answered(static_cast<size_t>(world_), false);
  std::unique_lock<std::mutex> lock(mu_);
  for (int left = world_; left > 0;) {
    // Take what has arrived.
    for (int k = 0; k < world_; ++k) {
      if (answered[k] || inbox_[k].empty()) continue;
      cpb::StepResult r = std::move(inbox_[k].front());
      inbox_[k].pop_front();
      if (r.step_id() != id || r.rank() != k) {
        // Out of step with the group: it cannot serve in it any more.
        const std::string why = absl::StrCat("it answered ", what, " ", id, " with the result of ", what, " ",
                                             r.step_id(), " as rank ", r.rank());
        lock.unlock();
        MarkDead(k, why);
        return absl::UnavailableError(absl::StrCat("rank ", k, " is dead: ", why));
      }
      results[k] = std::move(r);
      answered[k] = true;
      --left;
    }
    if (left == 0) break;
    // A rank whose data plane waited in vain for peers names them: the first that has not
    // answered is the one that hung.
    for (int k = 0; k < world_; ++k) {
      if (!answered[k]) continue;
      for (int32_t peer : results[k].waited_for()) {
        if (peer < 0 || peer >= world_ || answered[peer]) continue;
        const std::string why = absl::StrCat("rank ", k, " waited for it in vain during ", what, " ", id,
                                             " (stopped, hung or cut off): ", results[k].error());
        lock.unlock();
        MarkDead(peer, why);
        return absl::UnavailableError(absl::StrCat("rank ", peer, " is dead: ", why));
      }
    }
    for (int k = 0; k < world_; ++k) {
      if (!answered[k] && ranks_[k].dead) {
        return absl::UnavailableError(absl::StrCat("rank ", k, " is gone (no result for ", what, " ", id, "): ",
                                                   ranks_[k].death));
      }
    }
    if (cancelled_ || shutdown_) return absl::UnavailableError(absl::StrCat(what, " ", id, ": the group is stopping"));
    if (cv_.wait_until(lock, start + step_deadline_) == std::cv_status::timeout) {
      for (int k = 0; k < world_; ++k) {
        if (answered[k] || !inbox_[k].empty()) continue;
        const std::string why =
            absl::StrCat("it did not answer ", what, " ", id, " within ",
                         std::chrono::duration<double>(step_deadline_).count(), " s (the step deadline)");
        lock.unlock();
        MarkDead(k, why);
        return absl::UnavailableError(absl::StrCat("rank ", k, " is dead: ", why));
      }
    }
  }
  return results;
}

absl::Status ControlService::SizeArenas(int64_t pages, int64_t latent_pages) {
  cpb::CoordinatorMessage msg;
  msg.mutable_arena()->set_pages(pages);
  msg.mutable_arena()->set_latent_pages(latent_pages);
  FERRY_ASSIGN_OR_RETURN(std::vector<cpb::StepResult> results, RoundTrip(msg, 0, "arena"));
  for (size_t k = 0; k < results.size(); ++k) {
    if (!results[k].error().empty()) {
      return absl::ResourceExhaustedError(absl::StrCat("rank ", k, " cannot hold a KV arena of ", pages,
                                                       " pages: ", results[k].error()));
    }
  }
  return absl::OkStatus();
}

void ControlService::Shutdown(const std::string& reason) {
  std::vector<grpc::ServerReaderWriter<cpb::CoordinatorMessage, cpb::WorkerMessage>*> streams;
  std::vector<int> held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    for (int k = 0; k < world_; ++k) {
      RankState& r = ranks_[k];
      if (r.stream != nullptr && !r.dead) {
        streams.push_back(r.stream);
        held.push_back(k);
        ++r.users;
        r.closing = true;  // the worker's exit after this is not a death
      }
    }
  }
  cpb::CoordinatorMessage msg;
  msg.mutable_shutdown()->set_reason(reason);
  for (auto* s : streams) s->Write(msg);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int k : held) --ranks_[k].users;
    shutdown_ = true;
  }
  cv_.notify_all();
}

std::vector<RankState> ControlService::Ranks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_;
}

}  // namespace ferry::coordinator
