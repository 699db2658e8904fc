// The OpenAI-compatible HTTP API of the coordinator (`ferry serve --http-port`), a translator
// onto the public API's generation path (ApiService::RunGenerate: the same validation, queue,
// stop strings and cancellation as gRPC):
//   GET  /health                 200 while serving, 503 otherwise (no key needed)
//   GET  /v1/models, /v1/models/{id}
//   POST /v1/completions         a prompt (text or ids) continued
//   POST /v1/chat/completions    messages rendered with the checkpoint's chat template; the
//                                reply split into reasoning_content, content and tool_calls
// Both POSTs stream as server-sent events (`data: {...}` chunks, then `data: [DONE]`) with
// "stream": true. Errors are OpenAI's error object with the HTTP status of their kind (400 a
// bad request, 401 a missing or wrong key, 404 an unknown model or path, 429 the queue full,
// 503 not serving). A client that disconnects ends its request within a step.
#pragma once

#include <atomic>
#include <string>

#include <nlohmann/json.hpp>

#include "common/http_server.h"
#include "coordinator/api_service.h"
#include "model/checkpoint/config.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ferry::coordinator {

struct OpenAiOptions {
  // The model's name in requests and responses.
  std::string served_model_name;
  // The key clients must send as `Authorization: Bearer KEY`; empty: none.
  std::string api_key;
  // Sampling defaults where a request leaves them out (temperature, top_p, top_k), from the
  // checkpoint's generation_config.json as vLLM takes them; temperature otherwise 1.
  nlohmann::ordered_json generation_defaults = nlohmann::ordered_json::object();
  int64_t max_context = 0;
};

class OpenAiApi {
 public:
  // `tokenizer` and `chat_template` may be null: text requests and chat are then refused.
  OpenAiApi(ApiService* api, const model::ModelConfig& config, const text::Tokenizer* tokenizer,
            const text::ChatTemplate* chat_template, const std::atomic<bool>* accepting, OpenAiOptions options);

  void Handle(const HttpRequest& req, HttpResponse& resp);

 private:
  void Models(const HttpRequest& req, HttpResponse& resp);
  void Completions(const nlohmann::ordered_json& body, const HttpRequest& req, HttpResponse& resp);
  void ChatCompletions(const nlohmann::ordered_json& body, const HttpRequest& req, HttpResponse& resp);

  ApiService* api_;
  const model::ModelConfig& config_;
  const text::Tokenizer* tokenizer_;
  const text::ChatTemplate* chat_template_;
  const std::atomic<bool>* accepting_;
  const OpenAiOptions options_;
};

// Reads generation_config.json's sampling defaults (temperature, top_p, top_k) from a checkpoint
// directory; an empty object when the file is missing.
nlohmann::ordered_json ReadGenerationDefaults(const std::string& model_dir);

}  // namespace ferry::coordinator
