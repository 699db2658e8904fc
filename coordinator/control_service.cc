#include "coordinator/control_service.h"

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "coordinator/metrics.h"

namespace ferry::coordinator {

namespace cpb = ferry::control::v1;

ControlService::ControlService(std::string model_path, int world, std::chrono::seconds register_timeout,
                               Metrics* metrics)
    : model_path_(std::move(model_path)),
      world_(world),
      register_timeout_(register_timeout),
      metrics_(metrics),
      ranks_(static_cast<size_t>(world)) {}

grpc::Status ControlService::Register(grpc::ServerContext* ctx, const cpb::RegisterRequest* req,
                                      cpb::RegisterResponse* resp) {
  const int rank = req->rank();
  std::unique_lock<std::mutex> lock(mu_);
  if (rank < 0 || rank >= world_) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("rank ", rank, " is outside [0, ", world_, ")"));
  }
  if (ranks_[rank].registered) {
    return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, absl::StrCat("rank ", rank, " is already registered"));
  }
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
  if (!cv_.wait_for(lock, register_timeout_, [&] { return all() || shutdown_ || ctx->IsCancelled(); }) ||
      !all()) {
    ranks_[rank].registered = false;
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        absl::StrCat("not every rank registered within ", register_timeout_.count(), " s"));
  }
  resp->set_model_path(model_path_);
  resp->set_rank(rank);
  resp->set_world_size(world_);
  for (const RankState& r : ranks_) resp->add_dataplane_addresses(r.address);
  return grpc::Status::OK;
}

grpc::Status ControlService::Steps(grpc::ServerContext* ctx,
                                   grpc::ServerReaderWriter<cpb::CoordinatorMessage, cpb::WorkerMessage>* stream) {
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
    ranks_[rank].stream = stream;
    FERRY_LOG(INFO) << "rank " << rank << " ready (" << first.ready().weight_bytes() << " bytes of weights)";
  }
  cv_.notify_all();
  // Keep the call open until shutdown; a cancelled call (the worker went away) marks the rank dead.
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutdown_ && !ranks_[rank].dead) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (ctx->IsCancelled() && !shutdown_ && !ranks_[rank].dead) {
      lock.unlock();
      MarkDead(rank, "its control stream closed (the worker exited or lost its connection)");
      lock.lock();
    }
  }
  ranks_[rank].stream = nullptr;
  return grpc::Status::OK;
}

void ControlService::MarkDead(int rank, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ranks_[rank].dead) return;
    ranks_[rank].dead = true;
    ranks_[rank].death = why;
  }
  cv_.notify_all();
  FERRY_LOG(ERROR) << "rank " << rank << " is dead: " << why;
  if (on_death_) on_death_(rank, why);
}

absl::Status ControlService::WaitReady(std::chrono::seconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto state = [this]() -> int {  // 1 all ready, -1 a rank died, 0 waiting
    bool all = true;
    for (const RankState& r : ranks_) {
      if (r.dead) return -1;
      all = all && r.ready;
    }
    return all ? 1 : 0;
  };
  cv_.wait_for(lock, timeout, [&] { return state() != 0 || shutdown_; });
  const int s = state();
  if (s == 1) return absl::OkStatus();
  std::string missing;
  for (int k = 0; k < world_; ++k) {
    if (ranks_[k].dead) return absl::UnavailableError(absl::StrCat("rank ", k, " died: ", ranks_[k].death));
    if (!ranks_[k].ready) absl::StrAppend(&missing, missing.empty() ? "" : ", ", k);
  }
  return absl::DeadlineExceededError(absl::StrCat("ranks [", missing, "] were not ready within ", timeout.count(), " s"));
}

absl::StatusOr<std::vector<int32_t>> ControlService::RunStep(const worker::Step& step) {
  cpb::CoordinatorMessage msg;
  cpb::StepCommand* cmd = msg.mutable_step();
  cmd->set_step_id(step.step_id);
  for (uint64_t id : step.release) cmd->add_release(id);
  for (const worker::StepSegment& s : step.segments) {
    cpb::Segment* seg = cmd->add_segments();
    seg->set_seq_id(s.seq_id);
    seg->set_start(s.start);
    for (int32_t t : s.tokens) seg->add_tokens(t);
    seg->set_sample(s.sample);
    seg->set_temperature(s.sampling.temperature);
    seg->set_top_k(s.sampling.top_k);
    seg->set_top_p(s.sampling.top_p);
    seg->set_seed(s.seed);
  }
  std::vector<grpc::ServerReaderWriter<cpb::CoordinatorMessage, cpb::WorkerMessage>*> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int k = 0; k < world_; ++k) {
      if (ranks_[k].dead || ranks_[k].stream == nullptr) {
        return absl::UnavailableError(absl::StrCat("rank ", k, " is not serving",
                                                   ranks_[k].death.empty() ? "" : ": " + ranks_[k].death));
      }
      streams.push_back(ranks_[k].stream);
    }
  }
  for (int k = 0; k < world_; ++k) {
    if (!streams[k]->Write(msg)) {
      MarkDead(k, "writing a step to its control stream failed");
      return absl::UnavailableError(absl::StrCat("rank ", k, " is gone (writing step ", step.step_id, " failed)"));
    }
  }
  std::vector<int32_t> tokens;
  std::string error;
  for (int k = 0; k < world_; ++k) {
    cpb::WorkerMessage reply;
    if (!streams[k]->Read(&reply) || !reply.has_result()) {
      MarkDead(k, "its control stream closed during a step");
      return absl::UnavailableError(absl::StrCat("rank ", k, " is gone (no result for step ", step.step_id, ")"));
    }
    const cpb::StepResult& r = reply.result();
    if (r.step_id() != step.step_id) {
      return absl::InternalError(absl::StrCat("rank ", k, " answered step ", r.step_id(), " to step ", step.step_id));
    }
    if (!r.error().empty() && error.empty()) error = absl::StrCat("rank ", k, ": ", r.error());
    if (metrics_) metrics_->OnRankStep(k, r.step_seconds(), r.dataplane_bytes());
    {
      std::lock_guard<std::mutex> lock(mu_);
      ranks_[k].last_step_seconds = r.step_seconds();
    }
    if (k == 0) tokens.assign(r.tokens().begin(), r.tokens().end());
  }
  if (!error.empty()) return absl::InternalError(error);
  return tokens;
}

void ControlService::Shutdown(const std::string& reason) {
  std::vector<grpc::ServerReaderWriter<cpb::CoordinatorMessage, cpb::WorkerMessage>*> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    for (RankState& r : ranks_) {
      if (r.stream != nullptr && !r.dead) streams.push_back(r.stream);
    }
  }
  cpb::CoordinatorMessage msg;
  msg.mutable_shutdown()->set_reason(reason);
  for (auto* s : streams) s->Write(msg);
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
}

std::vector<RankState> ControlService::Ranks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_;
}

}  // namespace ferry::coordinator
