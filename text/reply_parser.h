// A GLM reply split into what an OpenAI client expects: reasoning (`<think>...</think>`), the
// answer, and tool calls written as
//   <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
// (a value is the argument's JSON unless the tool's schema declares the argument a string, in
// which case it is the string itself; a value that is not valid JSON stays a string).
//
// The reply arrives in pieces (a streamed completion); each piece gives what can be told now. A
// piece that could be the start of a tag is held back until the next one decides, so a delta
// never carries half of a tag. Whitespace alone between tool calls is not content.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ferry::text {

struct ParsedToolCall {
  std::string name;
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

struct ReplyDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ReplyParser {
 public:
  struct Options {
    // The prompt left a <think> block open: the reply starts as reasoning.
    bool starts_in_reasoning = false;
    // Split out reasoning at all (false: everything is content).
    bool parse_reasoning = true;
    // Parse tool calls (false: they stay content text, as with tool_choice "none").
    bool parse_tool_calls = false;
    // The request's tools (OpenAI's array of {type, function: {name, parameters}}), for the
    // argument types; null or not an array: every value is parsed as JSON where it is JSON.
    const nlohmann::ordered_json* tools = nullptr;
  };

  explicit ReplyParser(Options options);

  // The next piece of the reply; returns what it completes.
  ReplyDelta Add(std::string_view text);
  // The end of the reply, with its last piece: that piece and what was held back (an unclosed
  // tool call becomes content text).
  ReplyDelta Finish(std::string_view last = {});

  bool saw_tool_call() const { return saw_tool_call_; }

 private:
  enum class State { kReasoning, kContent, kToolCall };
  void Drain(bool final, ReplyDelta& out);
  void EmitContent(std::string_view text, ReplyDelta& out);
  bool ParseCall(std::string_view body, ParsedToolCall& call) const;

  Options options_;
  State state_;
  std::string pending_;        // received, not yet told
  std::string blank_content_;  // whitespace-only content, told once something else follows
  bool content_started_ = false;
  bool content_since_call_ = false;  // content other than whitespace after the last tool call
  bool saw_tool_call_ = false;
};

}  // namespace ferry::text
