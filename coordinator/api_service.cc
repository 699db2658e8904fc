#include "common/version.h"
#include "coordinator/api_service.h"

#include <atomic>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace ferry::coordinator {
namespace {

namespace pb = ferry::v1;

grpc::Status ToGrpc(const absl::Status& s) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case absl::StatusCode::kResourceExhausted: code = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case absl::StatusCode::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    case absl::StatusCode::kAlreadyExists: code = grpc::StatusCode::ALREADY_EXISTS; break;
    case absl::StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case absl::StatusCode::kCancelled: code = grpc::StatusCode::CANCELLED; break;
    default: break;
  }
  return grpc::Status(code, std::string(s.message()));
}

pb::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return pb::FINISH_REASON_STOP;
    case FinishReason::kLength: return pb::FINISH_REASON_LENGTH;
    case FinishReason::kAbort: return pb::FINISH_REASON_ABORT;
    case FinishReason::kError: return pb::FINISH_REASON_ERROR;
  }
  return pb::FINISH_REASON_ERROR;
}

// Stop lists are checked on every generated token; a bound keeps one request from slowing all.
constexpr int kMaxStopTokens = 1024;

// Server-assigned ids: random, so they neither collide with clients' own ids nor can be guessed.
std::string NewRequestId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat("ferry-", absl::Hex(rng(), absl::kZeroPad16), absl::Hex(rng(), absl::kZeroPad16));
}

void ToProto(const step::SampledToken& t, pb::TokenLogprobs* out) {
  out->set_token_id(t.token);
  out->set_logprob(t.logprob.value_or(0.0f));
  for (const step::TokenLogprob& top : t.top) {
    pb::TopLogprob* p = out->add_top_logprobs();
    p->set_token_id(top.token);
    p->set_logprob(top.logprob);
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<Request>> BuildRequest(const pb::GenerateRequest& req,
                                                      const model::ModelConfig& config, int64_t max_context) {
  const int64_t vocab = config.vocab_size;
  const int64_t n = req.prompt_token_ids_size();
  if (n == 0) return absl::InvalidArgumentError("prompt_token_ids is empty; give at least one token id");
  if (n >= max_context) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", n, " tokens; the context holds ", max_context,
                                                   ", which leaves no room to generate"));
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = req.prompt_token_ids(static_cast<int>(i));
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prompt_token_ids[", i, "] = ", t,
                                                     " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  const pb::SamplingParams& sp = req.sampling();
  if (!(sp.temperature() >= 0.0f) || std::isinf(sp.temperature())) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.temperature is ", sp.temperature(), "; it must be a finite value >= 0"));
  }
  if (sp.has_top_p() && !(sp.top_p() > 0.0f && sp.top_p() <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.top_p is ", sp.top_p(), "; it must be in (0, 1]"));
  }
  if (sp.top_k() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.top_k is ", sp.top_k(), "; it must be >= 0 (0: no limit)"));
  }
  int64_t max_tokens = max_context - n;
  if (sp.has_max_tokens()) {
    if (sp.max_tokens() < 1) {
      return absl::InvalidArgumentError(absl::StrCat("sampling.max_tokens is ", sp.max_tokens(), "; it must be >= 1"));
    }
    if (n + sp.max_tokens() > max_context) {
      return absl::InvalidArgumentError(absl::StrCat("the prompt (", n, " tokens) + max_tokens (", sp.max_tokens(),
                                                     ") = ", n + sp.max_tokens(), " exceeds the context length ",
                                                     max_context));
    }
    max_tokens = sp.max_tokens();
  }
  for (int i = 0; i < sp.stop_token_ids_size(); ++i) {
    const int32_t t = sp.stop_token_ids(i);
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("sampling.stop_token_ids[", i, "] = ", t,
                                                     " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (sp.stop_token_ids_size() > kMaxStopTokens) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.stop_token_ids holds ", sp.stop_token_ids_size(),
                                                   " ids; at most ", kMaxStopTokens));
  }
  if (!sp.logprobs() && sp.top_logprobs() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.top_logprobs is ", sp.top_logprobs(),
                                                   " without sampling.logprobs; set logprobs to get them"));
  }
  if (sp.top_logprobs() < 0 || sp.top_logprobs() > step::kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.top_logprobs is ", sp.top_logprobs(), "; it must be in [0, ",
                                                   step::kMaxTopLogprobs, "]"));
  }
  if (req.request_id().size() > 256) {
    return absl::InvalidArgumentError(absl::StrCat("request_id is ", req.request_id().size(), " bytes; at most 256"));
  }
  auto r = std::make_shared<Request>();
  r->id = req.request_id().empty() ? NewRequestId() : req.request_id();
  r->prompt.assign(req.prompt_token_ids().begin(), req.prompt_token_ids().end());
  r->sampling.temperature = sp.temperature();
  r->sampling.top_k = sp.top_k();
  r->sampling.top_p = sp.has_top_p() ? sp.top_p() : 1.0f;
  r->sampling.top_logprobs = sp.logprobs() ? sp.top_logprobs() : -1;
  r->seed = sp.has_seed() ? sp.seed() : std::random_device{}();
  r->max_tokens = max_tokens;
  r->stop_token_ids.assign(sp.stop_token_ids().begin(), sp.stop_token_ids().end());
  if (!sp.ignore_eos()) {
    r->stop_token_ids.insert(r->stop_token_ids.end(), config.eos_token_ids.begin(), config.eos_token_ids.end());
  }
  r->stream = req.stream();
  return r;
}

ApiService::ApiService(const model::ModelConfig& config, std::string model_path, Scheduler* scheduler,
                       const ControlService* control, const std::atomic<bool>* accepting)
    : config_(config),
      model_path_(std::move(model_path)),
      scheduler_(scheduler),
      control_(control),
      accepting_(accepting) {}

grpc::Status ApiService::Generate(grpc::ServerContext* ctx, const pb::GenerateRequest* req,
                                  grpc::ServerWriter<pb::GenerateResponse>* writer) {
  auto built = BuildRequest(*req, config_, scheduler_->options().max_context);
  if (!built.ok()) return ToGrpc(built.status());
  std::shared_ptr<Request> r = *built;
  if (!req->request_id().empty()) r->caller = ctx->peer();
  if (!accepting_->load()) {
    absl::Status ready = control_->ReadyState();
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("the server is not serving: ", ready.ok() ? "it is stopping" : ready.message()));
  }
  if (absl::Status st = scheduler_->Submit(r); !st.ok()) return ToGrpc(st);
  bool aborted = false;
  while (true) {
    // Client cancellation and deadlines abort the request; its end still comes as an event.
    if (!aborted && ctx->IsCancelled()) aborted = scheduler_->Abort(r->id);
    std::optional<RequestEvent> e = r->events.Pop(std::chrono::milliseconds(20));
    if (!e) continue;
    pb::GenerateResponse resp;
    resp.set_request_id(r->id);
    if (!e->finished) {
      for (int32_t t : e->tokens) resp.mutable_chunk()->add_token_ids(t);
      for (const step::SampledToken& t : e->logprobs) ToProto(t, resp.mutable_chunk()->add_logprobs());
      if (!writer->Write(resp) && !aborted) aborted = scheduler_->Abort(r->id);
      continue;
    }
    pb::Finished* f = resp.mutable_finished();
    f->set_finish_reason(ToProto(e->reason));
    for (int32_t t : e->tokens) f->add_token_ids(t);
    for (const step::SampledToken& t : e->logprobs) ToProto(t, f->add_logprobs());
    f->mutable_usage()->set_prompt_tokens(static_cast<int32_t>(e->usage.prompt_tokens));
    f->mutable_usage()->set_completion_tokens(static_cast<int32_t>(e->usage.completion_tokens));
    f->mutable_usage()->set_cached_tokens(static_cast<int32_t>(e->usage.cached_tokens));
    f->mutable_timings()->set_queue_seconds(e->timings.queue_seconds);
    f->mutable_timings()->set_time_to_first_token_seconds(e->timings.time_to_first_token_seconds);
    f->mutable_timings()->set_e2e_seconds(e->timings.e2e_seconds);
    f->set_error(e->error);
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the request");
    writer->Write(resp);
    return grpc::Status::OK;
  }
}

grpc::Status ApiService::Abort(grpc::ServerContext* ctx, const pb::AbortRequest* req, pb::AbortResponse* resp) {
  resp->set_found(scheduler_->Abort(req->request_id(), ctx->peer()));
  return grpc::Status::OK;
}

grpc::Status ApiService::GetModelInfo(grpc::ServerContext*, const pb::GetModelInfoRequest*, pb::ModelInfo* resp) {
  resp->set_model_path(model_path_);
  resp->set_family(model::FamilyName(config_.family));
  resp->set_vocab_size(static_cast<int32_t>(config_.vocab_size));
  resp->set_max_context(scheduler_->options().max_context);
  for (int32_t t : config_.eos_token_ids) resp->add_eos_token_ids(t);
  resp->set_num_layers(static_cast<int32_t>(config_.num_layers));
  resp->set_hidden_size(static_cast<int32_t>(config_.hidden_size));
  return grpc::Status::OK;
}

grpc::Status ApiService::GetServerInfo(grpc::ServerContext*, const pb::GetServerInfoRequest*, pb::ServerInfo* resp) {
  const SchedulerSnapshot s = scheduler_->Snapshot();
  resp->set_world_size(control_->world());
  resp->set_running_requests(static_cast<int32_t>(s.running));
  resp->set_waiting_requests(static_cast<int32_t>(s.waiting));
  const SchedulerOptions opts = scheduler_->options();
  resp->set_max_queue(static_cast<int32_t>(opts.max_queue));
  resp->set_max_batch_tokens(static_cast<int32_t>(opts.max_batch_tokens));
  resp->set_kv_layout(opts.kv_layout);
  resp->set_kv_pages(opts.kv_pages);
  resp->set_kv_used_pages(s.used_pages);
  resp->set_page_size(static_cast<int32_t>(opts.page_size));
  resp->set_prompt_cache_tokens(opts.prompt_cache_tokens);
  resp->set_owner_split(opts.owner_split);
  resp->set_borrows_ended(s.latent.borrows_ended);
  resp->set_remote_fills(s.latent.remote_fills);
  resp->set_borrows_cut(s.latent.borrows_cut);
  resp->set_carries(s.latent.carries);
  resp->set_carried_tokens(s.latent.carried_tokens);
  resp->set_carry_recomputes(s.latent.recomputed);
  resp->set_borrowed_pages(s.latent.borrowed_pages);
  resp->set_steps(s.steps);
  resp->set_version(VersionString());
  if (const auto [rank, why] = control_->FirstDeath(); rank >= 0) {
    resp->set_failure(absl::StrCat("rank ", rank, " is dead: ", why));
  } else if (!s.serving && !s.failure.empty()) {
    resp->set_failure(s.failure);
  }
  const std::vector<RankState> ranks = control_->Ranks();
  for (size_t k = 0; k < ranks.size(); ++k) {
    pb::RankInfo* ri = resp->add_ranks();
    ri->set_rank(static_cast<int32_t>(k));
    ri->set_state(ranks[k].dead ? "dead" : ranks[k].ready ? "serving" : "starting");
    ri->set_last_step_seconds(ranks[k].last_step_seconds);
    ri->set_pid(ranks[k].pid);
    ri->set_room_bytes(ranks[k].room_bytes);
    ri->set_page_bytes(ranks[k].page_bytes);
    ri->set_fixed_bytes(ranks[k].fixed_bytes);
    ri->set_latent_page_bytes(ranks[k].latent_page_bytes);
    ri->set_death(ranks[k].death);
    if (k < s.latent_used_pages.size()) ri->set_latent_used_pages(s.latent_used_pages[k]);
  }
  return grpc::Status::OK;
}

}  // namespace ferry::coordinator
