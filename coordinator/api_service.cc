#include "coordinator/api_service.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/log.h"
#include "common/version.h"
#include "coordinator/chat.h"

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
    case absl::StatusCode::kFailedPrecondition: code = grpc::StatusCode::FAILED_PRECONDITION; break;
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

// A text prompt longer than this many bytes a context token cannot fit (a token is rarely more
// than 8 bytes of text); refused before it is tokenized.
constexpr int64_t kMaxPromptBytesPerToken = 16;

// Stop strings: a bound on their number and length keeps the text check cheap.
constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 256;

// A request's generated text: decoded a token at a time, cut at the first stop string. What could
// still be the start of a stop string is held back until it cannot (or the stream ends).
class TextStream {
 public:
  TextStream(const text::Tokenizer* tok, std::vector<std::string> stops)
      : decoder_(tok, /*skip_special=*/true), stops_(std::move(stops)) {
    for (const std::string& s : stops_) hold_ = std::max(hold_, s.size() - 1);
  }
  // The text that may be sent after token `id` (empty once stopped).
  std::string Add(int32_t id) {
    if (stopped_) return "";
    held_ += decoder_.Add(id);
    return Release(/*final=*/false);
  }
  // The rest, at the end of the stream.
  std::string Finish() {
    if (stopped_) return "";
    held_ += decoder_.Finish();
    return Release(/*final=*/true);
  }
  bool stopped() const { return stopped_; }

 private:
  std::string Release(bool final) {
    size_t cut = std::string::npos;
    for (const std::string& s : stops_) cut = std::min(cut, held_.find(s));
    if (cut != std::string::npos) {
      stopped_ = true;
      std::string out = held_.substr(0, cut);
      held_.clear();
      return out;
    }
    // Keep the last hold_ bytes (on a character boundary) unless the stream ended.
    size_t send = final || held_.size() <= hold_ ? (final ? held_.size() : 0) : held_.size() - hold_;
    while (send > 0 && send < held_.size() && (static_cast<unsigned char>(held_[send]) & 0xC0) == 0x80) --send;
    std::string out = held_.substr(0, send);
    held_.erase(0, send);
    return out;
  }

  text::StreamDecoder decoder_;
  std::vector<std::string> stops_;
  size_t hold_ = 0;
  std::string held_;
  bool stopped_ = false;
};

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
  if (n == 0) return absl::InvalidArgumentError("the prompt is empty: give prompt_token_ids or prompt (text)");
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
                       const ControlService* control, const std::atomic<bool>* accepting,
                       const text::Tokenizer* tokenizer)
    : config_(config),
      model_path_(std::move(model_path)),
      scheduler_(scheduler),
      control_(control),
      accepting_(accepting),
      tokenizer_(tokenizer) {}

grpc::Status ApiService::RunGenerate(const pb::GenerateRequest& req, const std::string& peer,
                                     const std::function<bool()>& cancelled,
                                     const std::function<bool(const pb::GenerateResponse&)>& write) {
  // A conversation becomes the prompt's text, and a text prompt ids, here on the call's own
  // thread (never on the step's path).
  pb::GenerateRequest rendered;
  const pb::GenerateRequest* use = &req;
  if (req.has_chat()) {
    if (!req.prompt().empty() || req.prompt_token_ids_size() > 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "give one of prompt_token_ids, prompt and chat");
    }
    if (chat_template_ == nullptr || tokenizer_ == nullptr) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat(model_path_, " has no chat template and tokenizer.json: send prompt or prompt_token_ids"));
    }
    auto parse = [](const std::string& text, const char* field) -> absl::StatusOr<nlohmann::ordered_json> {
      if (text.empty()) return nlohmann::ordered_json();
      if (const int depth = JsonDepth(text); depth > kMaxJsonDepth) {
        return absl::InvalidArgumentError(absl::StrCat("chat.", field, " nests ", depth, " levels deep; at most ", kMaxJsonDepth));
      }
      nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat("chat.", field, " is not valid JSON"));
      return j;
    };
    absl::StatusOr<nlohmann::ordered_json> messages = parse(req.chat().messages_json(), "messages_json");
    absl::StatusOr<nlohmann::ordered_json> tools = parse(req.chat().tools_json(), "tools_json");
    absl::StatusOr<nlohmann::ordered_json> kwargs = parse(req.chat().template_kwargs_json(), "template_kwargs_json");
    for (const auto* part : {&messages, &tools, &kwargs}) {
      if (!part->ok()) return ToGrpc(part->status());
    }
    absl::StatusOr<ChatPrompt> prompt =
        RenderChat(*chat_template_, std::move(*messages), *tools, *kwargs, req.chat().continue_final_message());
    if (!prompt.ok()) return ToGrpc(prompt.status());
    rendered = req;
    rendered.clear_chat();
    rendered.set_prompt(std::move(prompt->text));
    for (int32_t id : TurnEndTokens(*tokenizer_)) rendered.mutable_sampling()->add_stop_token_ids(id);
    use = &rendered;
  }
  pb::GenerateRequest tokenized;
  if (!use->prompt().empty()) {
    // Tokenizing is linear in the text; a prompt that could not fit the context is refused first.
    const size_t max_bytes = static_cast<size_t>(kMaxPromptBytesPerToken * scheduler_->options().max_context);
    if (use->prompt().size() > max_bytes) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("the prompt has ", use->prompt().size(), " bytes; a context of ",
                                       scheduler_->options().max_context, " tokens takes at most ", max_bytes));
    }
    if (use->prompt_token_ids_size() > 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "give prompt or prompt_token_ids, not both");
    }
    if (tokenizer_ == nullptr) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat(model_path_, " has no tokenizer.json: send prompt_token_ids"));
    }
    auto ids = tokenizer_->Encode(use->prompt());
    if (!ids.ok()) return ToGrpc(absl::InvalidArgumentError(absl::StrCat("prompt: ", ids.status().message())));
    tokenized = *use;
    tokenized.clear_prompt();
    tokenized.mutable_prompt_token_ids()->Add(ids->begin(), ids->end());
    use = &tokenized;
  }
  auto built = BuildRequest(*use, config_, scheduler_->options().max_context);
  if (!built.ok()) return ToGrpc(built.status());
  std::shared_ptr<Request> r = *built;
  if (!req.request_id().empty()) r->caller = peer;
  // The text of the generated tokens, special tokens left out (as vLLM's skip_special_tokens),
  // cut at the first stop string.
  const std::vector<std::string> stops(req.sampling().stop().begin(), req.sampling().stop().end());
  if (!stops.empty() && tokenizer_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat(model_path_, " has no tokenizer.json: stop strings need one (use stop_token_ids)"));
  }
  if (stops.size() > kMaxStopStrings) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("sampling.stop holds ", stops.size(),
                                                                         " strings; at most ", kMaxStopStrings));
  }
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty() || stops[i].size() > kMaxStopBytes) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("sampling.stop[", i, "] is ", stops[i].size(), " bytes; 1 to ", kMaxStopBytes));
    }
  }
  std::optional<TextStream> detok;
  if (tokenizer_ != nullptr) detok.emplace(tokenizer_, stops);
  if (!accepting_->load()) {
    absl::Status ready = control_->ReadyState();
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("the server is not serving: ", ready.ok() ? "it is stopping" : ready.message()));
  }
  // With stop strings the tokens come a step at a time even when the client did not ask to
  // stream, so that a stop ends the request where it appears; they are then gathered here.
  const bool client_streams = req.stream();
  if (!stops.empty()) r->stream = true;
  pb::Finished gathered;
  if (absl::Status st = scheduler_->Submit(r); !st.ok()) return ToGrpc(st);
  bool aborted = false;
  int64_t told = 0;  // tokens given to the client: after a stop string's, none are
  while (true) {
    // Client cancellation and deadlines abort the request; its end still comes as an event.
    if (!aborted && cancelled()) aborted = scheduler_->Abort(r->id);
    std::optional<RequestEvent> e = r->events.Pop(std::chrono::milliseconds(20));
    if (!e) continue;
    pb::GenerateResponse resp;
    resp.set_request_id(r->id);
    if (!e->finished) {
      if (detok && detok->stopped()) continue;  // tokens of steps already under way when it stopped
      pb::TokenChunk* chunk = client_streams ? resp.mutable_chunk() : nullptr;
      for (size_t i = 0; i < e->tokens.size(); ++i) {
        if (detok && detok->stopped()) break;  // the rest of a step that completed a stop string
        const int32_t t = e->tokens[i];
        const std::string piece = detok ? detok->Add(t) : "";
        ++told;
        if (chunk != nullptr) {
          chunk->add_token_ids(t);
          chunk->mutable_text()->append(piece);
          if (i < e->logprobs.size()) ToProto(e->logprobs[i], chunk->add_logprobs());
        } else {
          gathered.add_token_ids(t);
          gathered.mutable_text()->append(piece);
          if (i < e->logprobs.size()) ToProto(e->logprobs[i], gathered.add_logprobs());
        }
      }
      // A stop string ends the request (as a stop); its end still comes as an event.
      if (detok && detok->stopped() && !aborted) aborted = scheduler_->EndWithStop(r->id);
      if (chunk != nullptr && !write(resp) && !aborted) aborted = scheduler_->Abort(r->id);
      continue;
    }
    pb::Finished* f = resp.mutable_finished();
    *f = std::move(gathered);
    f->set_finish_reason(ToProto(e->reason));
    size_t last = 0;  // the final event's tokens given (up to a stop string's)
    for (; last < e->tokens.size() && !(detok && detok->stopped()); ++last) {
      f->add_token_ids(e->tokens[last]);
      if (detok) f->mutable_text()->append(detok->Add(e->tokens[last]));
      ++told;
    }
    if (detok) {
      f->mutable_text()->append(detok->Finish());
      // Ended by a stop string (also when the request ended otherwise in the same step).
      if (detok->stopped()) f->set_finish_reason(pb::FINISH_REASON_STOP);
    }
    for (size_t i = 0; i < last && i < e->logprobs.size(); ++i) ToProto(e->logprobs[i], f->add_logprobs());
    f->mutable_usage()->set_prompt_tokens(static_cast<int32_t>(e->usage.prompt_tokens));
    // After a stop string the steps already under way generated more; the client got `told`.
    const int64_t completion = detok && detok->stopped() ? told : e->usage.completion_tokens;
    f->mutable_usage()->set_completion_tokens(static_cast<int32_t>(completion));
    f->mutable_usage()->set_cached_tokens(static_cast<int32_t>(e->usage.cached_tokens));
    f->mutable_timings()->set_queue_seconds(e->timings.queue_seconds);
    f->mutable_timings()->set_time_to_first_token_seconds(e->timings.time_to_first_token_seconds);
    f->mutable_timings()->set_e2e_seconds(e->timings.e2e_seconds);
    f->set_error(e->error);
    if (cancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the request");
    write(resp);
    return grpc::Status::OK;
  }
}

void ApiService::AbortImpl(const pb::AbortRequest& req, const std::string& peer, pb::AbortResponse* resp) {
  resp->set_found(scheduler_->Abort(req.request_id(), peer));
}

void ApiService::ModelInfoImpl(pb::ModelInfo* resp) {
  resp->set_model_path(model_path_);
  resp->set_family(model::FamilyName(config_.family));
  resp->set_vocab_size(static_cast<int32_t>(config_.vocab_size));
  resp->set_max_context(scheduler_->options().max_context);
  for (int32_t t : config_.eos_token_ids) resp->add_eos_token_ids(t);
  resp->set_num_layers(static_cast<int32_t>(config_.num_layers));
  resp->set_hidden_size(static_cast<int32_t>(config_.hidden_size));
  resp->set_has_tokenizer(tokenizer_ != nullptr);
}

void ApiService::ServerInfoImpl(pb::ServerInfo* resp) {
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
}

namespace {

// Parses `bytes` as a `M`; INVALID_ARGUMENT naming the message and the size when they are not one.
template <typename M>
grpc::Status Parse(const grpc::ByteBuffer& bytes, M* out) {
  std::vector<grpc::Slice> slices;
  std::string flat;
  if (bytes.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) flat.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  if (!out->ParseFromString(flat)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("the request's ", flat.size(), " bytes are not a valid ", M::descriptor()->full_name()));
  }
  return grpc::Status::OK;
}

template <typename M>
grpc::ByteBuffer Serialize(const M& m) {
  const std::string bytes = m.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// A unary call: parse, answer, serialize.
template <typename Req, typename Resp, typename Fn>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                grpc::ByteBuffer* response, Fn fn) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Req req;
  grpc::Status st = Parse(*request, &req);
  if (st.ok()) {
    Resp resp;
    fn(req, &resp);
    *response = Serialize(resp);
  }
  reactor->Finish(st);
  return reactor;
}

// A Generate call: its own thread runs ApiService::RunGenerate, each response written through the
// reactor and waited for. The thread touches the reactor last in Finish(); OnDone, which gRPC
// calls once that completes, deletes it (and detaches nothing still running: the thread has left).
class GenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GenerateReactor(ApiService* api, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request)
      : api_(api), peer_(ctx->peer()) {
    pb::GenerateRequest req;
    grpc::Status parsed = Parse(*request, &req);
    if (!parsed.ok()) {
      Finish(parsed);
      return;
    }
    try {
      std::thread([this, req = std::move(req)] {
        grpc::Status st = api_->RunGenerate(
            req, peer_, [this] { return cancelled_.load(); },
            [this](const pb::GenerateResponse& resp) { return Write(resp); });
        Finish(st);
      }).detach();
    } catch (const std::system_error& e) {  // out of threads: refuse this call, keep serving
      Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("the coordinator cannot start a thread for this request: ", e.what())));
    }
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    write_ok_ = ok;
    cv_.notify_all();
  }
  void OnCancel() override {
    cancelled_ = true;
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  void OnDone() override { delete this; }

 private:
  // Sends `resp` and waits until gRPC took it; false when the client cannot (gone, cancelled).
  bool Write(const pb::GenerateResponse& resp) {
    if (cancelled_) return false;
    buffer_ = Serialize(resp);
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = true;
    }
    StartWrite(&buffer_);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !writing_; });  // OnWriteDone comes even when cancelled
    return write_ok_;
  }

  ApiService* api_;
  const std::string peer_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool writing_ = false;
  bool write_ok_ = true;
  grpc::ByteBuffer buffer_;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* ApiService::Generate(grpc::CallbackServerContext* ctx,
                                                                 const grpc::ByteBuffer* request) {
  return new GenerateReactor(this, ctx, request);
}

grpc::ServerUnaryReactor* ApiService::Abort(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) {
  const std::string peer = ctx->peer();
  return Unary<pb::AbortRequest, pb::AbortResponse>(
      ctx, request, response, [&](const pb::AbortRequest& req, pb::AbortResponse* resp) { AbortImpl(req, peer, resp); });
}

grpc::ServerUnaryReactor* ApiService::GetModelInfo(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  return Unary<pb::GetModelInfoRequest, pb::ModelInfo>(
      ctx, request, response, [&](const pb::GetModelInfoRequest&, pb::ModelInfo* resp) { ModelInfoImpl(resp); });
}

grpc::ServerUnaryReactor* ApiService::GetServerInfo(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  return Unary<pb::GetServerInfoRequest, pb::ServerInfo>(
      ctx, request, response, [&](const pb::GetServerInfoRequest&, pb::ServerInfo* resp) { ServerInfoImpl(resp); });
}

}  // namespace ferry::coordinator
