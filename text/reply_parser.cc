#include "text/reply_parser.h"

#include <algorithm>

#include "common/json_depth.h"


namespace ferry::text {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kKeyOpen = "<arg_key>";
constexpr std::string_view kKeyClose = "</arg_key>";
constexpr std::string_view kValueOpen = "<arg_value>";
constexpr std::string_view kValueClose = "</arg_value>";

// How many bytes at the end of `text` could begin `tag` (a proper prefix of it).
size_t PartialTail(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

constexpr std::string_view kBlanks = " \t\r\n\f\v";

std::string_view TrimLeft(std::string_view s) {
  const size_t first = s.find_first_not_of(kBlanks);
  return first == std::string_view::npos ? std::string_view() : s.substr(first);
}

std::string_view Trim(std::string_view s) {
  s = TrimLeft(s);
  return s.substr(0, s.find_last_not_of(kBlanks) + 1);
}

bool IsBlank(std::string_view s) { return TrimLeft(s).empty(); }

// Whether the schema of `tool_name`'s argument `key` says it is a string.
bool DeclaredString(const nlohmann::ordered_json* tools, const std::string& tool_name, const std::string& key) {
  if (tools == nullptr || !tools->is_array()) return false;
  for (const auto& t : *tools) {
    const auto* fn = t.is_object() && t.contains("function") ? &t["function"] : &t;
    if (!fn->is_object() || !fn->contains("name") || (*fn)["name"] != tool_name) continue;
    if (!fn->contains("parameters")) return false;
    const auto& params = (*fn)["parameters"];
    if (!params.is_object() || !params.contains("properties") || !params["properties"].is_object()) return false;
    const auto& props = params["properties"];
    if (!props.contains(key) || !props[key].is_object() || !props[key].contains("type")) return false;
    const auto& type = props[key]["type"];
    return type == "string";
  }
  return false;
}

}  // namespace

ReplyParser::ReplyParser(Options options)
    : options_(options),
      state_(options.starts_in_reasoning && options.parse_reasoning ? State::kReasoning : State::kContent) {}

ReplyDelta ReplyParser::Add(std::string_view text) {
  pending_.append(text);
  ReplyDelta out;
  Drain(/*final=*/false, out);
  return out;
}

ReplyDelta ReplyParser::Finish(std::string_view last) {
  pending_.append(last);
  ReplyDelta out;
  Drain(/*final=*/true, out);
  if (state_ == State::kToolCall) {  // never closed: the text as it came
    EmitContent(std::string(kCallOpen) + pending_, out);
    pending_.clear();
    state_ = State::kContent;
  }
  // Trailing whitespace is content unless it follows a tool call with nothing else after it.
  if ((!saw_tool_call_ || content_since_call_) && !blank_content_.empty()) {
    out.content += blank_content_;
    blank_content_.clear();
  }
  return out;
}

void ReplyParser::EmitContent(std::string_view text, ReplyDelta& out) {
  if (text.empty()) return;
  // Whitespace alone (around tool calls, after </think>) waits to see what follows it.
  if (IsBlank(text)) {
    blank_content_.append(text);
    return;
  }
  out.content += blank_content_;
  blank_content_.clear();
  out.content.append(text);
  content_started_ = true;
  content_since_call_ = true;
}

void ReplyParser::Drain(bool final, ReplyDelta& out) {
  for (;;) {
    if (state_ == State::kReasoning) {
      const size_t close = pending_.find(kThinkClose);
      if (close == std::string::npos) {
        const size_t keep = final ? 0 : PartialTail(pending_, kThinkClose);
        out.reasoning.append(pending_, 0, pending_.size() - keep);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
      out.reasoning.append(pending_, 0, close);
      pending_.erase(0, close + kThinkClose.size());
      state_ = State::kContent;
      continue;
    }
    if (state_ == State::kContent) {
      size_t call = options_.parse_tool_calls ? pending_.find(kCallOpen) : std::string::npos;
      // A reply that opens its own <think> block (before any answer) is reasoning.
      size_t think = std::string::npos;
      if (options_.parse_reasoning && !content_started_ && out.content.empty() && !saw_tool_call_) {
        const size_t first = pending_.find_first_not_of(" \t\r\n");
        if (first != std::string::npos && pending_.compare(first, kThinkOpen.size(), kThinkOpen) == 0) think = first;
      }
      if (think != std::string::npos && (call == std::string::npos || think < call)) {
        pending_.erase(0, think + kThinkOpen.size());
        blank_content_.clear();
        state_ = State::kReasoning;
        continue;
      }
      if (call == std::string::npos) {
        size_t keep = 0;
        if (!final) {
          if (options_.parse_tool_calls) keep = PartialTail(pending_, kCallOpen);
          if (options_.parse_reasoning && !content_started_ && !saw_tool_call_ && IsBlank(out.content)) {
            const size_t first = pending_.find_first_not_of(" \t\r\n");
            if (first != std::string::npos && kThinkOpen.substr(0, pending_.size() - first) ==
                                                  std::string_view(pending_).substr(first)) {
              keep = std::max(keep, pending_.size() - first);
            }
          }
        }
        EmitContent(std::string_view(pending_).substr(0, pending_.size() - keep), out);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
      EmitContent(std::string_view(pending_).substr(0, call), out);
      pending_.erase(0, call + kCallOpen.size());
      state_ = State::kToolCall;
      continue;
    }
    // In a tool call: wait for its end.
    const size_t close = pending_.find(kCallClose);
    if (close == std::string::npos) return;
    ParsedToolCall parsed;
    const std::string body = pending_.substr(0, close);
    if (ParseCall(body, parsed)) {
      saw_tool_call_ = true;
      // Whitespace before the call is content only when content came before it.
      if (content_started_) out.content += blank_content_;
      blank_content_.clear();
      content_since_call_ = false;
      out.tool_calls.push_back(std::move(parsed));
    } else {
      EmitContent(std::string(kCallOpen) + body + std::string(kCallClose), out);
    }
    pending_.erase(0, close + kCallClose.size());
    state_ = State::kContent;
  }
}

bool ReplyParser::ParseCall(std::string_view body, ParsedToolCall& call) const {
  const size_t first_key = body.find(kKeyOpen);
  call.name = std::string(Trim(body.substr(0, first_key)));
  if (call.name.empty() || call.name.find_first_of("<>") != std::string::npos) return false;
  call.arguments = nlohmann::ordered_json::object();
  std::string_view rest = first_key == std::string_view::npos ? std::string_view() : body.substr(first_key);
  while (!IsBlank(rest)) {
    rest = TrimLeft(rest);
    if (rest.substr(0, kKeyOpen.size()) != kKeyOpen) return false;
    const size_t key_end = rest.find(kKeyClose);
    if (key_end == std::string_view::npos) return false;
    const std::string key(Trim(rest.substr(kKeyOpen.size(), key_end - kKeyOpen.size())));
    rest = TrimLeft(rest.substr(key_end + kKeyClose.size()));
    if (rest.substr(0, kValueOpen.size()) != kValueOpen) return false;
    const size_t value_end = rest.find(kValueClose);
    if (value_end == std::string_view::npos) return false;
    const std::string value(rest.substr(kValueOpen.size(), value_end - kValueOpen.size()));
    rest = rest.substr(value_end + kValueClose.size());
    if (key.empty()) return false;
    nlohmann::ordered_json v = value;
    if (!DeclaredString(options_.tools, call.name, key) && JsonDepth(value) <= kMaxJsonDepth) {
      nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(value, nullptr, /*allow_exceptions=*/false);
      if (!parsed.is_discarded()) v = std::move(parsed);
    }
    call.arguments[key] = std::move(v);
  }
  return true;
}

}  // namespace ferry::text
