// The OpenAI wire format of the HTTP API (openai_api.h): request fields read into the public
// API's GenerateRequest, and a generation written back as one JSON answer or as server-sent
// events, with OpenAI's error object on failure.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "common/http_server.h"
#include "coordinator/api_service.h"
#include "ferry/v1/ferry.pb.h"
#include "text/reply_parser.h"
#include "text/tokenizer.h"

namespace ferry::coordinator {

// Sends OpenAI's error object: {"error": {"message", "type", "param", "code"}}. `type` defaults
// by status (400: invalid_request_error, 404: not_found_error, 429: rate_limit_exceeded, 5xx:
// server_error).
void SendError(HttpResponse& resp, int status, const std::string& message, std::string_view type = "",
               std::string_view param = "", std::string_view code = "");

// Reads the sampling fields of a completions or chat request into `g` (and `stream`): temperature,
// top_p, top_k, seed, max_tokens (chat: max_completion_tokens first), stop, ignore_eos, logprobs
// (completions: a count; chat: a flag and top_logprobs), n and the penalties (only their
// neutral values), response_format (text only). `defaults` fills temperature, top_p and top_k
// where the request leaves them out. INVALID_ARGUMENT naming the field.
absl::Status ReadSampling(const nlohmann::ordered_json& body, const nlohmann::ordered_json& defaults, bool chat,
                          ferry::v1::GenerateRequest* g);

// Reads a completions request's prompt (a string, token ids, or a list holding one of them).
absl::Status ReadPrompt(const nlohmann::ordered_json& body, ferry::v1::GenerateRequest* g);

enum class StreamKind { kCompletion, kChat };

// One completion's answer: runs the generation and writes it as the request asked (streamed or
// whole), the reply parsed into reasoning, content and tool calls for chat.
class Stream {
 public:
  Stream(HttpResponse* resp, const text::Tokenizer* tokenizer, StreamKind kind, std::string id, std::string model,
         const nlohmann::ordered_json& body);
  const std::string& id() const { return id_; }
  void Run(ApiService* api, const ferry::v1::GenerateRequest& g, const std::string& peer,
           text::ReplyParser::Options parse);

 private:
  // Streaming: one chunk of new text (and its tokens' logprobs), or the last with a finish reason.
  bool WriteChunk(const text::ReplyDelta& delta, const std::string& text,
                  const google::protobuf::RepeatedPtrField<ferry::v1::TokenLogprobs>& logprobs, const char* finish);
  bool WriteEvent(const nlohmann::ordered_json& event);
  nlohmann::ordered_json Envelope(const char* object) const;
  nlohmann::ordered_json Logprobs(const google::protobuf::RepeatedPtrField<ferry::v1::TokenLogprobs>& logprobs);
  nlohmann::ordered_json ToolCalls(const std::vector<text::ParsedToolCall>& calls);
  nlohmann::ordered_json Usage(const ferry::v1::Usage& usage) const;

  HttpResponse* resp_;
  const text::Tokenizer* tok_;
  StreamKind kind_;
  std::string id_;
  std::string model_;
  int64_t created_;
  bool stream_ = false;
  bool include_usage_ = false;
  bool logprobs_ = false;
  bool sent_role_ = false;
  int tool_calls_sent_ = 0;
  int64_t text_offset_ = 0;  // completions' logprobs: where the next token's text starts
};

}  // namespace ferry::coordinator
