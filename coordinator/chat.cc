#include "coordinator/chat.h"

#include "absl/strings/str_cat.h"

namespace ferry::coordinator {
namespace {

using Json = nlohmann::ordered_json;

absl::Status CheckMessage(Json& m, size_t i) {
  const std::string where = absl::StrCat("messages[", i, "]");
  if (!m.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, " is not an object"));
  if (!m.contains("role") || !m["role"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".role is missing or not a string"));
  }
  const std::string role = m["role"].get<std::string>();
  if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool") {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".role is '", role, "'; one of system, developer, user, assistant, tool"));
  }
  if (m.contains("content")) {
    const Json& c = m["content"];
    if (!c.is_string() && !c.is_array() && !c.is_null()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".content is a ", c.type_name(),
                                                     "; a string, an array of parts or null"));
    }
    if (c.is_array()) {
      for (size_t k = 0; k < c.size(); ++k) {
        if (!c[k].is_object() && !c[k].is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(where, ".content[", k, "] is not a part object"));
        }
      }
    }
  } else if (role != "assistant") {
    return absl::InvalidArgumentError(absl::StrCat(where, " (", role, ") has no content"));
  }
  if (!m.contains("tool_calls") || m["tool_calls"].is_null()) return absl::OkStatus();
  if (role != "assistant") return absl::InvalidArgumentError(absl::StrCat(where, ".tool_calls: only an assistant calls tools"));
  Json& calls = m["tool_calls"];
  if (!calls.is_array()) return absl::InvalidArgumentError(absl::StrCat(where, ".tool_calls is not an array"));
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string at = absl::StrCat(where, ".tool_calls[", k, "]");
    Json& call = calls[k];
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(at, " has no function object"));
    }
    Json& fn = call["function"];
    if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ".function.name is missing or empty"));
    }
    if (!fn.contains("arguments") || fn["arguments"].is_null()) {
      fn["arguments"] = Json::object();
    } else if (fn["arguments"].is_string()) {
      const std::string text = fn["arguments"].get<std::string>();
      Json parsed = text.find_first_not_of(" \t\r\n") == std::string::npos ? Json::object()
                                                             : Json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded() || !parsed.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(at, ".function.arguments is not a JSON object: ", text.substr(0, 200)));
      }
      fn["arguments"] = std::move(parsed);
    } else if (!fn["arguments"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ".function.arguments is a ", fn["arguments"].type_name(),
                                                     "; an object or a JSON string holding one"));
    }
  }
  return absl::OkStatus();
}

// The text of a message's content (its text parts joined), for continue_final_message.
std::string ContentText(const Json& m) {
  if (!m.contains("content")) return "";
  const Json& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  std::string out;
  if (c.is_array()) {
    for (const Json& part : c) {
      if (part.is_string()) out += part.get<std::string>();
      if (part.is_object() && part.contains("text") && part["text"].is_string()) out += part["text"].get<std::string>();
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ChatPrompt> RenderChat(const text::ChatTemplate& tmpl, Json messages, const Json& tools,
                                      const Json& kwargs, bool continue_final_message) {
  if (!messages.is_array() || messages.empty()) {
    return absl::InvalidArgumentError("messages must be a non-empty array of {role, content}");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (absl::Status st = CheckMessage(messages[i], i); !st.ok()) return st;
  }
  if (!tools.is_null() && !tools.is_array()) return absl::InvalidArgumentError("tools must be an array");
  if (tools.is_array()) {
    for (size_t i = 0; i < tools.size(); ++i) {
      if (!tools[i].is_object()) return absl::InvalidArgumentError(absl::StrCat("tools[", i, "] is not an object"));
    }
  }
  if (!kwargs.is_null() && !kwargs.is_object()) {
    return absl::InvalidArgumentError("the template variables (chat_template_kwargs) must be an object");
  }
  Json vars = kwargs.is_object() ? kwargs : Json::object();
  const std::string final_text = ContentText(messages.back());
  vars["messages"] = std::move(messages);
  // As transformers passes them: the tools, or None when there are none.
  vars["tools"] = tools.is_array() && !tools.empty() ? tools : Json();
  vars["add_generation_prompt"] = !continue_final_message;
  absl::StatusOr<std::string> text = tmpl.Render(vars);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("the chat template: ", text.status().message()));
  ChatPrompt out;
  out.text = std::move(*text);
  if (continue_final_message) {
    // The prompt ends where the last message's text does (what the template adds after it is cut).
    const std::string tail = final_text.substr(0, final_text.find_last_not_of(" \t\r\n") + 1);
    const size_t at = tail.empty() ? std::string::npos : out.text.rfind(tail);
    if (at == std::string::npos) {
      return absl::InvalidArgumentError("continue_final_message: the last message's text is not in the rendered prompt");
    }
    out.text.resize(at + tail.size());
  }
  // Whether what the template adds to open the assistant's turn leaves a <think> block open: the
  // prompt rendered without that turn is a prefix of it (user text never counts).
  std::string_view opening = out.text;
  if (!continue_final_message) {
    vars["add_generation_prompt"] = false;
    absl::StatusOr<std::string> without = tmpl.Render(vars);
    if (without.ok() && out.text.compare(0, without->size(), *without) == 0) {
      opening = std::string_view(out.text).substr(without->size());
    }
  }
  const size_t open = opening.rfind("<think>");
  const size_t close = opening.rfind("</think>");
  out.opens_reasoning = open != std::string_view::npos && (close == std::string_view::npos || close < open);
  return out;
}

std::vector<int32_t> TurnEndTokens(const text::Tokenizer& tokenizer) {
  std::vector<int32_t> out;
  for (const char* end : {"<|user|>", "<|observation|>", "<|endoftext|>"}) {
    if (std::optional<int32_t> id = tokenizer.TokenId(end); id && tokenizer.IsSpecial(*id)) out.push_back(*id);
  }
  return out;
}

}  // namespace ferry::coordinator
