#include "coordinator/openai_wire.h"

#include <climits>
#include <cmath>
#include <ctime>
#include <random>

#include "absl/strings/str_cat.h"

namespace ferry::coordinator {
namespace {

namespace pb = ferry::v1;
using Json = nlohmann::ordered_json;

int HttpStatus(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE: return 400;
    case grpc::StatusCode::NOT_FOUND: return 404;
    case grpc::StatusCode::ALREADY_EXISTS: return 409;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return 429;
    case grpc::StatusCode::CANCELLED: return 499;
    case grpc::StatusCode::UNAVAILABLE: return 503;
    default: return 500;
  }
}

std::string ErrorType(int status) {
  if (status == 404) return "not_found_error";
  if (status == 429) return "rate_limit_exceeded";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

Json ErrorBody(int status, std::string_view message, std::string_view type, std::string_view param,
               std::string_view code) {
  Json e = {{"message", message},
            {"type", type.empty() ? ErrorType(status) : std::string(type)},
            {"param", param.empty() ? Json() : Json(param)},
            {"code", code.empty() ? Json(status) : Json(code)}};
  return Json{{"error", e}};
}

const char* FinishName(pb::FinishReason r, bool tool_calls) {
  switch (r) {
    case pb::FINISH_REASON_STOP: return tool_calls ? "tool_calls" : "stop";
    case pb::FINISH_REASON_LENGTH: return "length";
    case pb::FINISH_REASON_ABORT: return "abort";
    default: return "error";
  }
}

// A field that must be a number when present (null counts as absent).
absl::Status Number(const Json& body, const char* key, std::optional<double>* out) {
  if (!body.contains(key) || body[key].is_null()) return absl::OkStatus();
  if (!body[key].is_number()) return absl::InvalidArgumentError(absl::StrCat(key, " must be a number"));
  *out = body[key].get<double>();
  return absl::OkStatus();
}

absl::Status Integer(const Json& body, const char* key, std::optional<int64_t>* out) {
  if (!body.contains(key) || body[key].is_null()) return absl::OkStatus();
  const Json& v = body[key];
  // An integer, or a float that holds one (2.0), within int64.
  const bool whole_float = v.is_number_float() && std::abs(v.get<double>()) < 9.0e18 &&
                           v.get<double>() == std::trunc(v.get<double>());
  if (!(v.is_number_integer() || whole_float) || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(key, " must be an integer"));
  }
  *out = v.is_number_float() ? static_cast<int64_t>(v.get<double>()) : v.get<int64_t>();
  return absl::OkStatus();
}

}  // namespace

void SendError(HttpResponse& resp, int status, const std::string& message, std::string_view type,
               std::string_view param, std::string_view code) {
  resp.Send(status, "application/json", ErrorBody(status, message, type, param, code).dump(-1, ' ', false, Json::error_handler_t::replace));
}

absl::Status ReadSampling(const Json& body, const Json& defaults, bool chat, pb::GenerateRequest* g) {
  pb::SamplingParams* sp = g->mutable_sampling();
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k, seed, max_tokens, n;
  for (absl::Status st : {Number(body, "temperature", &temperature), Number(body, "top_p", &top_p),
                          Integer(body, "top_k", &top_k), Integer(body, "seed", &seed), Integer(body, "n", &n)}) {
    if (!st.ok()) return st;
  }
  if (chat) {
    if (absl::Status st = Integer(body, "max_completion_tokens", &max_tokens); !st.ok()) return st;
  }
  if (!max_tokens) {
    if (absl::Status st = Integer(body, "max_tokens", &max_tokens); !st.ok()) return st;
  }
  if (!temperature) temperature = defaults.contains("temperature") ? defaults["temperature"].get<double>() : 1.0;
  if (!top_p && defaults.contains("top_p")) top_p = defaults["top_p"].get<double>();
  if (!top_k && defaults.contains("top_k")) top_k = defaults["top_k"].get<int64_t>();
  sp->set_temperature(static_cast<float>(*temperature));
  if (top_p && *top_p != 1.0) sp->set_top_p(static_cast<float>(*top_p));
  if (top_k) {
    if (*top_k < -1 || *top_k > INT32_MAX) return absl::InvalidArgumentError(absl::StrCat("top_k is ", *top_k, "; -1 or 0 (no limit) or a count"));
    sp->set_top_k(*top_k <= 0 ? 0 : static_cast<int32_t>(*top_k));
  }
  if (seed) sp->set_seed(static_cast<uint64_t>(*seed));
  if (max_tokens) {
    if (*max_tokens < 1 || *max_tokens > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(chat ? "max_completion_tokens (or max_tokens)" : "max_tokens", " is ",
                                                     *max_tokens, "; it must be >= 1"));
    }
    sp->set_max_tokens(static_cast<int32_t>(*max_tokens));
  }
  if (n && *n != 1) return absl::InvalidArgumentError(absl::StrCat("n is ", *n, "; only one choice a request (n = 1)"));
  for (const char* neutral0 : {"presence_penalty", "frequency_penalty"}) {
    std::optional<double> v;
    if (absl::Status st = Number(body, neutral0, &v); !st.ok()) return st;
    if (v && *v != 0) return absl::InvalidArgumentError(absl::StrCat(neutral0, " is not supported (only 0)"));
  }
  if (std::optional<double> v; Number(body, "repetition_penalty", &v).ok() && v && *v != 1) {
    return absl::InvalidArgumentError("repetition_penalty is not supported (only 1)");
  }
  if (body.contains("best_of") && !body["best_of"].is_null() && body["best_of"] != 1) {
    return absl::InvalidArgumentError("best_of is not supported (only 1)");
  }
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const Json& rf = body["response_format"];
    if (!rf.is_object() || !rf.contains("type") || rf["type"] != "text") {
      return absl::InvalidArgumentError("response_format: only {\"type\": \"text\"} is supported");
    }
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const Json& stop = body["stop"];
    if (stop.is_string()) {
      sp->add_stop(stop.get<std::string>());
    } else if (stop.is_array()) {
      for (const Json& s : stop) {
        if (!s.is_string()) return absl::InvalidArgumentError("stop must be a string or an array of strings");
        sp->add_stop(s.get<std::string>());
      }
    } else {
      return absl::InvalidArgumentError("stop must be a string or an array of strings");
    }
  }
  if (body.contains("ignore_eos") && !body["ignore_eos"].is_null()) {
    if (!body["ignore_eos"].is_boolean()) return absl::InvalidArgumentError("ignore_eos must be true or false");
    sp->set_ignore_eos(body["ignore_eos"].get<bool>());
  }
  if (chat) {
    std::optional<int64_t> top;
    if (absl::Status st = Integer(body, "top_logprobs", &top); !st.ok()) return st;
    const bool want = body.contains("logprobs") && body["logprobs"] == true;
    if (body.contains("logprobs") && !body["logprobs"].is_null() && !body["logprobs"].is_boolean()) {
      return absl::InvalidArgumentError("logprobs must be true or false");
    }
    if (top && !want) return absl::InvalidArgumentError("top_logprobs needs logprobs: true");
    if (top && (*top < 0 || *top > step::kMaxTopLogprobs)) {
      return absl::InvalidArgumentError(absl::StrCat("top_logprobs is ", *top, "; 0 to ", step::kMaxTopLogprobs));
    }
    sp->set_logprobs(want);
    if (top) sp->set_top_logprobs(static_cast<int32_t>(*top));
  } else if (body.contains("logprobs") && !body["logprobs"].is_null() && body["logprobs"] != false) {
    std::optional<int64_t> k;
    if (absl::Status st = Integer(body, "logprobs", &k); !st.ok()) return st;
    if (*k < 0 || *k > step::kMaxTopLogprobs) {
      return absl::InvalidArgumentError(absl::StrCat("logprobs is ", *k, "; 0 to ", step::kMaxTopLogprobs));
    }
    sp->set_logprobs(true);
    sp->set_top_logprobs(static_cast<int32_t>(*k));
  }
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) return absl::InvalidArgumentError("stream must be true or false");
    g->set_stream(body["stream"].get<bool>());
  }
  return absl::OkStatus();
}

absl::Status ReadPrompt(const Json& body, pb::GenerateRequest* g) {
  if (!body.contains("prompt")) return absl::InvalidArgumentError("prompt is required");
  const Json* p = &body["prompt"];
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    if (p->get<std::string>().empty()) return absl::InvalidArgumentError("the prompt is empty");
    g->set_prompt(p->get<std::string>());
    return absl::OkStatus();
  }
  if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    for (const Json& t : *p) {
      if (!t.is_number_integer() || t.get<int64_t>() < INT32_MIN || t.get<int64_t>() > INT32_MAX) {
        return absl::InvalidArgumentError("a token-id prompt must hold only integers");
      }
      g->add_prompt_token_ids(static_cast<int32_t>(t.get<int64_t>()));
    }
    return absl::OkStatus();
  }
  if (p->is_array() && p->size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("a list of ", p->size(), " prompts: send one prompt a request"));
  }
  return absl::InvalidArgumentError("prompt must be a string, an array of token ids, or a list holding one of them");
}

Stream::Stream(HttpResponse* resp, const text::Tokenizer* tokenizer, StreamKind kind, std::string id, std::string model,
               const Json& body)
    : resp_(resp),
      tok_(tokenizer),
      kind_(kind),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(static_cast<int64_t>(std::time(nullptr))) {
  stream_ = body.contains("stream") && body["stream"] == true;
  include_usage_ = body.contains("stream_options") && body["stream_options"].is_object() &&
                   body["stream_options"].contains("include_usage") &&
                   body["stream_options"]["include_usage"] == true;
}

Json Stream::Envelope(const char* object) const {
  return Json{{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

Json Stream::Usage(const pb::Usage& u) const {
  return Json{{"prompt_tokens", u.prompt_tokens()},
              {"completion_tokens", u.completion_tokens()},
              {"total_tokens", u.prompt_tokens() + u.completion_tokens()},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens()}}}};
}

Json Stream::Logprobs(const google::protobuf::RepeatedPtrField<pb::TokenLogprobs>& lps) {
  auto token_text = [&](int32_t id) -> std::string {
    if (tok_ == nullptr) return absl::StrCat("token_id:", id);
    const int32_t one[1] = {id};
    absl::StatusOr<std::string> s = tok_->Decode(one);
    return s.ok() ? *s : "";
  };
  auto bytes = [&](int32_t id) {
    Json b = Json::array();
    if (tok_ != nullptr) {
      for (unsigned char c : tok_->TokenBytes(id)) b.push_back(static_cast<int>(c));
    }
    return b;
  };
  if (kind_ == StreamKind::kChat) {
    Json content = Json::array();
    for (const pb::TokenLogprobs& t : lps) {
      Json top = Json::array();
      for (const pb::TopLogprob& o : t.top_logprobs()) {
        top.push_back({{"token", token_text(o.token_id())}, {"logprob", o.logprob()}, {"bytes", bytes(o.token_id())}});
      }
      content.push_back({{"token", token_text(t.token_id())},
                         {"logprob", t.logprob()},
                         {"bytes", bytes(t.token_id())},
                         {"top_logprobs", top}});
    }
    return Json{{"content", content}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  for (const pb::TokenLogprobs& t : lps) {
    const std::string s = token_text(t.token_id());
    tokens.push_back(s);
    token_logprobs.push_back(t.logprob());
    Json alternatives = Json::object();
    for (const pb::TopLogprob& o : t.top_logprobs()) alternatives[token_text(o.token_id())] = o.logprob();
    top.push_back(alternatives);
    offsets.push_back(text_offset_);
    text_offset_ += static_cast<int64_t>(s.size());
  }
  return Json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

Json Stream::ToolCalls(const std::vector<text::ParsedToolCall>& calls) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  Json out = Json::array();
  for (const text::ParsedToolCall& c : calls) {
    out.push_back({{"index", tool_calls_sent_++},
                   {"id", absl::StrCat("call_", absl::Hex(rng(), absl::kZeroPad16), absl::Hex(rng() >> 32, absl::kZeroPad8))},
                   {"type", "function"},
                   {"function",
                    {{"name", c.name}, {"arguments", c.arguments.dump(-1, ' ', false, Json::error_handler_t::replace)}}}});
  }
  return out;
}

bool Stream::WriteEvent(const Json& event) {
  if (!resp_->started() && !resp_->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return false;
  return resp_->Write(absl::StrCat("data: ", event.dump(-1, ' ', false, Json::error_handler_t::replace), "\n\n"));
}

bool Stream::WriteChunk(const text::ReplyDelta& delta, const std::string& text,
                        const google::protobuf::RepeatedPtrField<pb::TokenLogprobs>& lps, const char* finish) {
  Json choice = {{"index", 0}};
  if (kind_ == StreamKind::kCompletion) {
    if (text.empty() && lps.empty() && finish == nullptr) return true;  // nothing to tell yet
    choice["text"] = text;
  } else {
    Json d = Json::object();
    if (!sent_role_) {
      d["role"] = "assistant";
      sent_role_ = true;
    }
    if (!delta.reasoning.empty()) d["reasoning_content"] = delta.reasoning;
    if (!delta.content.empty() || (d.contains("role") && delta.empty())) d["content"] = delta.content;
    if (!delta.tool_calls.empty()) d["tool_calls"] = ToolCalls(delta.tool_calls);
    if (d.empty() && finish == nullptr && lps.empty()) return true;  // nothing to tell yet
    choice["delta"] = d;
  }
  choice["logprobs"] = logprobs_ && !lps.empty() ? Logprobs(lps) : Json();
  choice["finish_reason"] = finish == nullptr ? Json() : Json(finish);
  Json event = Envelope(kind_ == StreamKind::kChat ? "chat.completion.chunk" : "text_completion");
  event["choices"] = Json::array({choice});
  if (include_usage_) event["usage"] = Json();
  return WriteEvent(event);
}

void Stream::Run(ApiService* api, const pb::GenerateRequest& g, const std::string& peer,
                 text::ReplyParser::Options parse) {
  logprobs_ = g.sampling().logprobs();
  text::ReplyParser parser(parse);
  pb::Finished finished;
  bool have_finished = false;
  const google::protobuf::RepeatedPtrField<pb::TokenLogprobs> no_logprobs;
  grpc::Status st = api->RunGenerate(
      g, peer, [this] { return resp_->ClientGone(); },
      [&](const pb::GenerateResponse& r) {
        if (r.has_finished()) {
          finished = r.finished();
          have_finished = true;
          return true;
        }
        const std::string& text = r.chunk().text();
        text::ReplyDelta delta = kind_ == StreamKind::kChat ? parser.Add(text) : text::ReplyDelta{};
        return WriteChunk(delta, text, r.chunk().logprobs(), nullptr);
      });
  if (!st.ok() || !have_finished || finished.finish_reason() == pb::FINISH_REASON_ERROR) {
    const int status = !st.ok() ? HttpStatus(st.error_code()) : 500;
    const std::string message = !st.ok() ? st.error_message()
                                         : absl::StrCat("the generation failed: ", finished.error().empty() ? "no answer" : finished.error());
    if (status == 499) return resp_->Send(499, "text/plain", "");  // nobody is listening
    if (resp_->started()) {
      WriteEvent(ErrorBody(status, message, "", "", ""));
      resp_->Write("data: [DONE]\n\n");
      return;
    }
    return SendError(*resp_, status, message);
  }
  const std::string& rest = finished.text();
  if (stream_) {
    const text::ReplyDelta delta = kind_ == StreamKind::kChat ? parser.Finish(rest) : text::ReplyDelta{};
    if ((!delta.empty() || !rest.empty()) && !WriteChunk(delta, rest, no_logprobs, nullptr)) return;
    const char* finish = FinishName(finished.finish_reason(), parser.saw_tool_call());
    if (!WriteChunk(text::ReplyDelta{}, "", no_logprobs, finish)) return;
    if (include_usage_) {
      Json u = Envelope(kind_ == StreamKind::kChat ? "chat.completion.chunk" : "text_completion");
      u["choices"] = Json::array();
      u["usage"] = Usage(finished.usage());
      if (!WriteEvent(u)) return;
    }
    resp_->Write("data: [DONE]\n\n");
    return;
  }
  Json choice = {{"index", 0}};
  if (kind_ == StreamKind::kCompletion) {
    choice["text"] = rest;
  } else {
    const text::ReplyDelta all = parser.Finish(rest);
    Json message = {{"role", "assistant"},
                    {"content", all.content.empty() && !all.tool_calls.empty() ? Json() : Json(all.content)},
                    {"reasoning_content", all.reasoning.empty() ? Json() : Json(all.reasoning)},
                    {"tool_calls", ToolCalls(all.tool_calls)}};
    choice["message"] = message;
  }
  choice["logprobs"] = logprobs_ ? Logprobs(finished.logprobs()) : Json();
  choice["finish_reason"] = FinishName(finished.finish_reason(), parser.saw_tool_call());
  Json out = Envelope(kind_ == StreamKind::kChat ? "chat.completion" : "text_completion");
  out["choices"] = Json::array({choice});
  out["usage"] = Usage(finished.usage());
  resp_->Send(200, "application/json", out.dump(-1, ' ', false, Json::error_handler_t::replace));
}

}  // namespace ferry::coordinator
