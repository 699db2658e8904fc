#include "coordinator/openai_api.h"

#include <ctime>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/cluster_token.h"
#include "common/json_depth.h"
#include "coordinator/chat.h"
#include "coordinator/openai_wire.h"
#include "text/reply_parser.h"

namespace ferry::coordinator {
namespace {

namespace pb = ferry::v1;
using Json = nlohmann::ordered_json;

std::string RandomHex(int digits) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  std::string out;
  while (static_cast<int>(out.size()) < digits) out += absl::StrCat(absl::Hex(rng(), absl::kZeroPad16));
  out.resize(static_cast<size_t>(digits));
  return out;
}

}  // namespace

Json ReadGenerationDefaults(const std::string& model_dir) {
  Json out = Json::object();
  std::ifstream in(model_dir + "/generation_config.json");
  if (!in) return out;
  Json g = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!g.is_object()) return out;
  for (const char* k : {"temperature", "top_p", "top_k"}) {
    if (g.contains(k) && g[k].is_number()) out[k] = g[k];
  }
  return out;
}

OpenAiApi::OpenAiApi(ApiService* api, const model::ModelConfig& config, const text::Tokenizer* tokenizer,
                     const text::ChatTemplate* chat_template, const std::atomic<bool>* accepting,
                     OpenAiOptions options)
    : api_(api),
      config_(config),
      tokenizer_(tokenizer),
      chat_template_(chat_template),
      accepting_(accepting),
      options_(std::move(options)) {}

void OpenAiApi::Handle(const HttpRequest& req, HttpResponse& resp) {
  if (req.path == "/health") {
    if (req.method != "GET" && req.method != "HEAD") return SendError(resp, 405, "use GET /health");
    if (accepting_->load()) return resp.Send(200, "text/plain", "");
    return resp.Send(503, "text/plain", "not serving\n");
  }
  if (req.path.rfind("/v1/", 0) != 0) {
    return SendError(resp, 404, absl::StrCat("no route ", req.method, " ", req.path), "not_found_error");
  }
  if (!options_.api_key.empty()) {
    const std::string* auth = req.Header("authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (auth == nullptr || auth->rfind(kBearer, 0) != 0 || !TokensEqual(std::string_view(*auth).substr(kBearer.size()), options_.api_key)) {
      return SendError(resp, 401,
                       auth == nullptr ? "no API key: send it as the Authorization: Bearer header"
                                       : "the API key is not this server's",
                       "invalid_request_error", "", "invalid_api_key");
    }
  }
  if (req.path == "/v1/models" || req.path.rfind("/v1/models/", 0) == 0) {
    if (req.method != "GET") return SendError(resp, 405, absl::StrCat("use GET ", req.path));
    return Models(req, resp);
  }
  const bool completions = req.path == "/v1/completions";
  const bool chat = req.path == "/v1/chat/completions";
  if (!completions && !chat) {
    return SendError(resp, 404, absl::StrCat("no route ", req.method, " ", req.path), "not_found_error");
  }
  if (req.method != "POST") return SendError(resp, 405, absl::StrCat("use POST ", req.path));
  if (const int depth = JsonDepth(req.body); depth > kMaxJsonDepth) {
    return SendError(resp, 400, absl::StrCat("the body nests ", depth, " levels deep; at most ", kMaxJsonDepth));
  }
  Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return SendError(resp, 400, absl::StrCat("the body (", req.body.size(), " bytes) is not valid JSON"));
  }
  if (!body.is_object()) return SendError(resp, 400, "the body must be a JSON object");
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string() || body["model"].get<std::string>() != options_.served_model_name) {
      return SendError(resp, 404,
                       absl::StrCat("the model '", body["model"].is_string() ? body["model"].get<std::string>() : "?",
                                    "' does not exist; this server serves '", options_.served_model_name, "'"),
                       "not_found_error", "model", "model_not_found");
    }
  }
  if (completions) return Completions(body, req, resp);
  return ChatCompletions(body, req, resp);
}

void OpenAiApi::Models(const HttpRequest& req, HttpResponse& resp) {
  Json card = {{"id", options_.served_model_name},
               {"object", "model"},
               {"created", static_cast<int64_t>(std::time(nullptr))},
               {"owned_by", "ferry"},
               {"max_model_len", options_.max_context}};
  if (req.path != "/v1/models") {
    if (req.path.substr(std::string_view("/v1/models/").size()) != options_.served_model_name) {
      return SendError(resp, 404, absl::StrCat("the model '", req.path.substr(11), "' does not exist"),
                       "not_found_error", "model", "model_not_found");
    }
    return resp.Send(200, "application/json", card.dump());
  }
  Json list = {{"object", "list"}, {"data", Json::array({card})}};
  resp.Send(200, "application/json", list.dump());
}

void OpenAiApi::Completions(const Json& body, const HttpRequest& req, HttpResponse& resp) {
  pb::GenerateRequest g;
  if (absl::Status st = ReadSampling(body, options_.generation_defaults, /*chat=*/false, &g); !st.ok()) {
    return SendError(resp, 400, std::string(st.message()));
  }
  for (const char* unsupported : {"echo", "suffix"}) {
    if (body.contains(unsupported) && !body[unsupported].is_null() && body[unsupported] != false &&
        body[unsupported] != "") {
      return SendError(resp, 400, absl::StrCat(unsupported, " is not supported"), "invalid_request_error", unsupported);
    }
  }
  if (absl::Status st = ReadPrompt(body, &g); !st.ok()) return SendError(resp, 400, std::string(st.message()), "invalid_request_error", "prompt");
  if (!g.prompt().empty() && tokenizer_ == nullptr) {
    return SendError(resp, 400, "this model has no tokenizer.json: send the prompt as token ids", "invalid_request_error",
                     "prompt");
  }
  Stream s(&resp, tokenizer_, StreamKind::kCompletion, absl::StrCat("cmpl-", RandomHex(24)), options_.served_model_name,
           body);
  g.set_request_id(s.id());
  text::ReplyParser::Options none;
  none.parse_reasoning = false;
  s.Run(api_, g, "http " + req.peer, none);
}

void OpenAiApi::ChatCompletions(const Json& body, const HttpRequest& req, HttpResponse& resp) {
  if (chat_template_ == nullptr || tokenizer_ == nullptr) {
    return SendError(resp, 400,
                     "this model has no chat template (chat_template.jinja or tokenizer_config.json's chat_template) "
                     "and tokenizer.json: use /v1/completions",
                     "invalid_request_error", "messages");
  }
  pb::GenerateRequest g;
  if (absl::Status st = ReadSampling(body, options_.generation_defaults, /*chat=*/true, &g); !st.ok()) {
    return SendError(resp, 400, std::string(st.message()));
  }
  if (!body.contains("messages")) return SendError(resp, 400, "messages is required", "invalid_request_error", "messages");
  // tool_choice: auto (the default) and none; a forced call needs constrained decoding.
  std::string tool_choice = "auto";
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    if (!body["tool_choice"].is_string() ||
        (body["tool_choice"] != "auto" && body["tool_choice"] != "none")) {
      return SendError(resp, 400, "tool_choice: only \"auto\" and \"none\" are supported", "invalid_request_error",
                       "tool_choice");
    }
    tool_choice = body["tool_choice"].get<std::string>();
  }
  static const Json kNoTools;
  const Json& tools = body.contains("tools") ? body["tools"] : kNoTools;
  Json kwargs = Json::object();
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    if (!body["chat_template_kwargs"].is_object()) {
      return SendError(resp, 400, "chat_template_kwargs must be an object", "invalid_request_error",
                       "chat_template_kwargs");
    }
    kwargs = body["chat_template_kwargs"];
  }
  if (body.contains("reasoning_effort") && !body["reasoning_effort"].is_null()) {
    if (!body["reasoning_effort"].is_string()) {
      return SendError(resp, 400, "reasoning_effort must be a string", "invalid_request_error", "reasoning_effort");
    }
    kwargs["reasoning_effort"] = body["reasoning_effort"];
  }
  const bool continue_final = body.contains("continue_final_message") && body["continue_final_message"] == true;
  absl::StatusOr<ChatPrompt> prompt = RenderChat(*chat_template_, body["messages"], tools, kwargs, continue_final);
  if (!prompt.ok()) return SendError(resp, 400, std::string(prompt.status().message()), "invalid_request_error", "messages");
  g.set_prompt(prompt->text);
  // The turn ends where the model hands back: the next user turn or a tool's result.
  for (int32_t id : TurnEndTokens(*tokenizer_)) g.mutable_sampling()->add_stop_token_ids(id);
  Stream s(&resp, tokenizer_, StreamKind::kChat, absl::StrCat("chatcmpl-", RandomHex(24)), options_.served_model_name,
           body);
  g.set_request_id(s.id());
  text::ReplyParser::Options parse;
  parse.starts_in_reasoning = prompt->opens_reasoning;
  parse.parse_tool_calls = tool_choice != "none" && tools.is_array() && !tools.empty();
  parse.tools = &tools;
  s.Run(api_, g, "http " + req.peer, parse);
}

}  // namespace ferry::coordinator
