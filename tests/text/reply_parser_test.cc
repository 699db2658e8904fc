// text/reply_parser.h: reasoning, content and GLM tool calls split out of a reply, the same
// whether the reply arrives whole or a byte at a time.
#include "text/reply_parser.h"

#include <string>

#include "tests/catch.h"

namespace ferry::text {
namespace {

using Json = nlohmann::ordered_json;

struct Told {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
};

// The reply fed in pieces of `step` bytes (0: whole), everything told joined.
Told Feed(const std::string& reply, ReplyParser::Options options, size_t step) {
  ReplyParser p(options);
  Told t;
  auto take = [&](ReplyDelta d) {
    t.reasoning += d.reasoning;
    t.content += d.content;
    for (auto& c : d.tool_calls) t.calls.push_back(std::move(c));
  };
  if (step == 0) step = reply.size() + 1;
  for (size_t i = 0; i < reply.size(); i += step) take(p.Add(reply.substr(i, step)));
  take(p.Finish());
  return t;
}

// Checks that every piece size tells the same as the whole reply, and returns it.
Told FeedAllWays(const std::string& reply, ReplyParser::Options options) {
  const Told whole = Feed(reply, options, 0);
  {
    // The whole reply given to Finish as its last piece tells the same.
    ReplyParser p(options);
    const ReplyDelta d = p.Finish(reply);
    CHECK(d.reasoning == whole.reasoning);
    CHECK(d.content == whole.content);
    CHECK(d.tool_calls.size() == whole.calls.size());
  }
  for (size_t step : {1, 2, 3, 5, 7, 11}) {
    const Told pieces = Feed(reply, options, step);
    INFO("step " << step);
    CHECK(pieces.reasoning == whole.reasoning);
    CHECK(pieces.content == whole.content);
    REQUIRE(pieces.calls.size() == whole.calls.size());
    for (size_t k = 0; k < whole.calls.size(); ++k) {
      CHECK(pieces.calls[k].name == whole.calls[k].name);
      CHECK(pieces.calls[k].arguments == whole.calls[k].arguments);
    }
  }
  return whole;
}

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "units": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
])");

TEST_CASE("a reply that starts in an open think block splits into reasoning and answer", "[reply]") {
  ReplyParser::Options o;
  o.starts_in_reasoning = true;
  const Told t = FeedAllWays("Two and two.\nIt is 4.</think>The answer is 4 <b>bold</b>.", o);
  CHECK(t.reasoning == "Two and two.\nIt is 4.");
  CHECK(t.content == "The answer is 4 <b>bold</b>.");
  CHECK(t.calls.empty());
}

TEST_CASE("a reply that opens its own think block is reasoning until it closes", "[reply]") {
  const Told t = FeedAllWays("\n<think>hmm</think>\nYes.", ReplyParser::Options{});
  CHECK(t.reasoning == "hmm");
  CHECK(t.content == "\nYes.");
  // Not at the start: the tag is text.
  const Told late = FeedAllWays("Yes <think> no", ReplyParser::Options{});
  CHECK(late.reasoning.empty());
  CHECK(late.content == "Yes <think> no");
}

TEST_CASE("reasoning never closed stays reasoning and parse_reasoning off keeps everything content", "[reply]") {
  ReplyParser::Options o;
  o.starts_in_reasoning = true;
  const Told t = FeedAllWays("still thinking </thin", o);
  CHECK(t.reasoning == "still thinking </thin");
  CHECK(t.content.empty());
  o.parse_reasoning = false;
  const Told raw = FeedAllWays("a</think>b", o);
  CHECK(raw.content == "a</think>b");
}

TEST_CASE("tool calls become name and arguments typed by the tool schema", "[reply]") {
  ReplyParser::Options o;
  o.starts_in_reasoning = true;
  o.parse_tool_calls = true;
  o.tools = &kTools;
  const Told t = FeedAllWays(
      "I will look it up.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>"
      "<arg_key>days</arg_key><arg_value>3</arg_value><arg_key>units</arg_key><arg_value>123</arg_value>"
      "<arg_key>extra</arg_key><arg_value>{\"a\": [1, true, null]}</arg_value></tool_call>\n"
      "<tool_call>now</tool_call>",
      o);
  CHECK(t.reasoning == "I will look it up.");
  CHECK(t.content.empty());  // whitespace alone between calls is not content
  REQUIRE(t.calls.size() == 2);
  CHECK(t.calls[0].name == "get_weather");
  CHECK(t.calls[0].arguments.dump() == R"({"city":"Oslo","days":3,"units":"123","extra":{"a":[1,true,null]}})");
  CHECK(t.calls[1].name == "now");
  CHECK(t.calls[1].arguments.dump() == "{}");
}

TEST_CASE("without a schema a value is JSON where it parses as JSON and a string otherwise", "[reply]") {
  ReplyParser::Options o;
  o.parse_tool_calls = true;
  const Told t = FeedAllWays(
      "Sure: <tool_call>f<arg_key>n</arg_key><arg_value>42</arg_value><arg_key>s</arg_key><arg_value>hello "
      "world</arg_value><arg_key>q</arg_key><arg_value>\"quoted\"</arg_value></tool_call> done",
      o);
  CHECK(t.content == "Sure:  done");
  REQUIRE(t.calls.size() == 1);
  CHECK(t.calls[0].arguments.dump() == R"({"n":42,"s":"hello world","q":"quoted"})");
}

TEST_CASE("whitespace after a tool call is content only when content follows the call", "[reply]") {
  ReplyParser::Options o;
  o.parse_tool_calls = true;
  CHECK(FeedAllWays("<tool_call>f</tool_call>a ", o).content == "a ");
  CHECK(FeedAllWays("<tool_call>f</tool_call>\n ", o).content.empty());
  CHECK(FeedAllWays("x <tool_call>f</tool_call>\n<tool_call>g</tool_call> y", o).content == "x \n y");
}

TEST_CASE("a malformed or unclosed tool call stays text and tool calls off leave the tags", "[reply]") {
  ReplyParser::Options o;
  o.parse_tool_calls = true;
  const Told bad = FeedAllWays("x<tool_call><arg_key>k</arg_key><arg_value>v</arg_value></tool_call>y", o);
  CHECK(bad.calls.empty());
  CHECK(bad.content == "x<tool_call><arg_key>k</arg_key><arg_value>v</arg_value></tool_call>y");
  const Told open = FeedAllWays("x<tool_call>f<arg_key>k</arg_key>", o);
  CHECK(open.calls.empty());
  CHECK(open.content == "x<tool_call>f<arg_key>k</arg_key>");
  o.parse_tool_calls = false;
  const Told off = FeedAllWays("<tool_call>f</tool_call>", o);
  CHECK(off.calls.empty());
  CHECK(off.content == "<tool_call>f</tool_call>");
}

TEST_CASE("no delta carries part of a tag", "[reply]") {
  ReplyParser::Options o;
  o.starts_in_reasoning = true;
  o.parse_tool_calls = true;
  ReplyParser p(o);
  const std::string reply = "ab</think>cd<tool_call>now</tool_call>ef";
  for (char c : reply) {
    const ReplyDelta d = p.Add(std::string(1, c));
    for (const std::string* s : {&d.reasoning, &d.content}) {
      CHECK(s->find('<') == std::string::npos);
      CHECK(s->find('>') == std::string::npos);
    }
  }
}

}  // namespace
}  // namespace ferry::text
