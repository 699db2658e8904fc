// A conversation turned into the model's prompt: OpenAI chat messages checked and normalised,
// then rendered with the checkpoint's own chat template (text/chat_template.h).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ferry::coordinator {

struct ChatPrompt {
  std::string text;
  // The prompt leaves a <think> block open: the reply starts with reasoning.
  bool opens_reasoning = false;
};

// Checks `messages` (a non-empty array of {role, content, ...}: role one of system, developer,
// user, assistant, tool; content a string, an array of parts or null; an assistant's tool_calls
// an array of {function: {name, arguments}} whose arguments, an object or a JSON string holding
// one, become an object), `tools` (null or an array of objects) and `kwargs` (null or an object
// of further template variables), then renders: with the assistant's turn opened, or with
// `continue_final_message` the prompt cut after the last message's text so the model continues
// it. INVALID_ARGUMENT naming the message and field, or the template's error.
absl::StatusOr<ChatPrompt> RenderChat(const text::ChatTemplate& tmpl, nlohmann::ordered_json messages,
                                      const nlohmann::ordered_json& tools, const nlohmann::ordered_json& kwargs,
                                      bool continue_final_message);

// The special tokens that end the assistant's turn (<|user|>, <|observation|>, <|endoftext|>)
// where the tokenizer has them: a chat reply stops at any of them.
std::vector<int32_t> TurnEndTokens(const text::Tokenizer& tokenizer);

}  // namespace ferry::coordinator
