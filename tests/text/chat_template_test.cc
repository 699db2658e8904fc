// text/chat_template.h against Python's jinja2 in transformers' environment: every template of
// tests/data/chat over every conversation of conversations.json (expected.json), and the engine's
// features one by one (features.json), both written by scripts/render_chat_reference.py. A render
// must equal jinja2's byte for byte, or fail where jinja2 fails.
#include "text/chat_template.h"

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/catch.h"
#include "tests/testing/files.h"

namespace ferry::text {
namespace {

using Json = nlohmann::ordered_json;

const std::string kData = FERRY_TEST_DATA_DIR;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Json ReadJson(const std::string& path) { return Json::parse(ReadFile(path)); }

ChatTemplate MustParse(const std::string& source) {
  auto t = ChatTemplate::Parse(source);
  INFO(t.status().ToString());
  REQUIRE(t.ok());
  return std::move(*t);
}

// The status message of `source` rendered with `vars`, "" when it renders.
std::string RenderError(const std::string& source, const Json& vars, const ChatTemplateLimits& limits = {}) {
  auto t = ChatTemplate::Parse(source);
  if (!t.ok()) return std::string(t.status().message());
  auto out = t->Render(vars, limits);
  if (out.ok()) return "";
  CHECK(out.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(out.status().message());
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("the GLM chat templates render every conversation as jinja2 does", "[chat_template]") {
  const Json expected = ReadJson(kData + "/chat/expected.json");
  const Json conversation_file = ReadJson(kData + "/chat/conversations.json");
  std::map<std::string, Json> conversations;
  for (const Json& c : conversation_file["conversations"]) {
    conversations[c["name"].get<std::string>()] = c["variables"];
  }
  REQUIRE(conversations.size() >= 25);
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [key, file] : expected["templates"].items()) {
    templates.emplace(key, MustParse(ReadFile(kData + "/chat/" + file.get<std::string>())));
  }
  REQUIRE(templates.size() >= 3);
  int rendered = 0, refused = 0;
  for (const Json& c : expected["cases"]) {
    const std::string name = c["template"].get<std::string>() + " / " + c["conversation"].get<std::string>();
    INFO(name);
    REQUIRE(conversations.count(c["conversation"].get<std::string>()) == 1);
    auto out = templates.at(c["template"].get<std::string>()).Render(conversations[c["conversation"].get<std::string>()]);
    if (c.contains("error")) {
      INFO("jinja2: " << c["error"].get<std::string>());
      CHECK_FALSE(out.ok());
      ++refused;
    } else {
      INFO(out.status().ToString());
      REQUIRE(out.ok());
      CHECK(*out == c["output"].get<std::string>());
      ++rendered;
    }
  }
  CHECK(rendered + refused == static_cast<int>(templates.size() * conversations.size()));
  CHECK(rendered >= 150);
}

TEST_CASE("each engine feature renders as jinja2 renders it", "[chat_template]") {
  const Json features = ReadJson(kData + "/chat/features.json");
  REQUIRE(features["cases"].size() >= 100);
  for (const Json& c : features["cases"]) {
    INFO(c["name"].get<std::string>() << "\n  template: " << c["template"].get<std::string>());
    auto t = ChatTemplate::Parse(c["template"].get<std::string>());
    absl::StatusOr<std::string> out = t.ok() ? t->Render(c["variables"]) : absl::StatusOr<std::string>(t.status());
    if (c.contains("error")) {
      INFO("jinja2: " << c["error"].get<std::string>());
      CHECK_FALSE(out.ok());
    } else {
      INFO(out.status().ToString());
      REQUIRE(out.ok());
      CHECK(*out == c["output"].get<std::string>());
    }
  }
}

TEST_CASE("ReadChatTemplate finds a checkpoint's template and refuses a folder without one", "[chat_template]") {
  auto dsa = ReadChatTemplate(kData + "/glm-dsa-tiny");
  REQUIRE(dsa.ok());
  CHECK(*dsa == ReadFile(kData + "/chat/glm-5.jinja"));
  auto next = ReadChatTemplate(kData + "/glm5next-tiny");
  REQUIRE(next.ok());
  CHECK(*next == ReadFile(kData + "/chat/glm-5.3-flash.jinja"));
  CHECK(ChatTemplate::Parse(*dsa).ok());
  CHECK(ChatTemplate::Parse(*next).ok());

  ferry::testing::TempDir dir;
  CHECK(ReadChatTemplate(dir.path()).status().code() == absl::StatusCode::kNotFound);
  CHECK(ReadChatTemplate(dir.File("no-such-folder")).status().code() == absl::StatusCode::kNotFound);
  ferry::testing::WriteFile(dir.File("tokenizer_config.json"), R"({"eos_token": "<|endoftext|>"})");
  CHECK(ReadChatTemplate(dir.path()).status().code() == absl::StatusCode::kNotFound);
  ferry::testing::WriteFile(dir.File("tokenizer_config.json"), R"({"chat_template": "{{ messages }}"})");
  CHECK(ReadChatTemplate(dir.path()).value_or("") == "{{ messages }}");
  ferry::testing::WriteFile(
      dir.File("tokenizer_config.json"),
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  CHECK(ReadChatTemplate(dir.path()).value_or("") == "D");
  ferry::testing::WriteFile(dir.File("tokenizer_config.json"), R"({"chat_template": [{"name": "rag", "template": "R"}]})");
  CHECK(ReadChatTemplate(dir.path()).status().code() == absl::StatusCode::kNotFound);
  ferry::testing::WriteFile(dir.File("tokenizer_config.json"), R"({"chat_template": 7})");
  CHECK(ReadChatTemplate(dir.path()).status().code() == absl::StatusCode::kInvalidArgument);
  ferry::testing::WriteFile(dir.File("tokenizer_config.json"), "{not json");
  CHECK(ReadChatTemplate(dir.path()).status().code() == absl::StatusCode::kInvalidArgument);
  ferry::testing::WriteFile(dir.File("chat_template.jinja"), "J");  // the .jinja file wins
  CHECK(ReadChatTemplate(dir.path()).value_or("") == "J");
}

TEST_CASE("a syntax error names its line and column and what was expected", "[chat_template]") {
  const auto parse_error = [](const std::string& source) {
    auto t = ChatTemplate::Parse(source);
    REQUIRE_FALSE(t.ok());
    CHECK(t.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(t.status().message());
  };
  std::string e = parse_error("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}");
  CHECK(Has(e, "line 3, column 10"));
  CHECK(Has(e, "expected an expression"));
  e = parse_error("{% for m in messages %}\n{{ m }}\n");
  CHECK(Has(e, "expected 'endfor' or 'else'"));
  CHECK(Has(e, "the for on line 1"));
  e = parse_error("a\n  {% if x %}{% endfor %}{% endif %}");
  CHECK(Has(e, "line 2"));
  CHECK(Has(e, "unknown tag 'endfor'"));
  CHECK(Has(parse_error("{{ 'unterminated }}"), "line 1, column 4: unterminated string"));
  CHECK(Has(parse_error("{{ x | nosuchfilter }}"), "no filter named 'nosuchfilter'"));
  CHECK(Has(parse_error("{{ x is nosuchtest }}"), "no test named 'nosuchtest'"));
  CHECK(Has(parse_error("{% include 'other.jinja' %}"), "unknown tag 'include'"));
  CHECK(Has(parse_error("{% break %}"), "'break' outside a loop"));
  CHECK(Has(parse_error("{{ (1, 2] }}"), "unexpected ']', expected ')'"));
  CHECK(Has(parse_error("{# never closed"), "missing end of comment"));
  CHECK(Has(parse_error("{{ x @ y }}"), "unexpected character '@'"));
  CHECK(Has(parse_error("{% macro m(a=1, b) %}{% endmacro %}"), "non-default argument follows default argument"));
  CHECK(Has(parse_error("ok\xC3("), "not valid UTF-8"));
  CHECK(Has(parse_error("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}"), "nesting deeper than"));
}

TEST_CASE("a render error names the template line and the Python error", "[chat_template]") {
  const std::string source = "{% for m in messages %}\n{{ m.role }}\n{{ m.extra.field }}\n{% endfor %}";
  const std::string e = RenderError(source, Json{{"messages", Json::array({Json{{"role", "user"}}})}});
  CHECK(Has(e, "line 3"));
  CHECK(Has(e, "UndefinedError: 'dict object' has no attribute 'extra'"));
  CHECK(Has(RenderError("{{ raise_exception('roles must alternate') }}", Json::object()),
            "TemplateError: roles must alternate"));
  CHECK(Has(RenderError("{{ 1 + 'a' }}", Json::object()),
            "TypeError: unsupported operand type(s) for +: 'int' and 'str'"));
  auto t = MustParse("{{ x }}");
  CHECK(t.Render(Json::array()).status().code() == absl::StatusCode::kInvalidArgument);  // variables must be an object
  CHECK(t.Render(Json{{"x", Json::parse("18446744073709551615")}}).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("limits stop a hostile template with a clear error - never a crash", "[chat_template]") {
  const Json none = Json::object();
  ChatTemplateLimits small;
  small.max_output_bytes = 1 << 20;
  // Output: a loop printing far more than allowed.
  CHECK(Has(RenderError("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", none, small),
            "output exceeds the limit of 1048576 bytes"));
  // One string larger than the limit, asked for in one operation.
  CHECK(Has(RenderError("{{ 'ab' * 1000000000000 }}", none), "exceeds the limit"));
  // A string doubled in a namespace until it outgrows the limit.
  CHECK(Has(RenderError("{% set ns = namespace(s='x' * 1000) %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}",
                        none, small),
            "exceeds the limit of 1048576"));
  // Steps: nested loops over the sandbox's largest ranges.
  ChatTemplateLimits few_steps;
  few_steps.max_steps = 100000;
  CHECK(Has(RenderError("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", none, few_steps),
            "more than 100000 steps"));
  // Recursion: a macro calling itself without end, and a recursive loop over a deep tree.
  CHECK(Has(RenderError("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", none), "RecursionError"));
  Json tree = Json::array();
  for (int k = 0; k < 120; ++k) tree = Json::array({Json{{"c", tree}}});  // 240 deep: within FromJson's 256
  CHECK(Has(RenderError("{% for x in t recursive %}{{ loop(x.c) }}{% endfor %}", Json{{"t", tree}}), "RecursionError"));
  // Nesting built by the template, and a namespace holding itself, print without exhausting the stack.
  CHECK(Has(RenderError("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}"
                        "{{ ns.l }}",
                        none),
            "RecursionError"));
  auto self = MustParse("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  auto printed = self.Render(none);
  REQUIRE(printed.ok());
  CHECK(*printed == "<Namespace {'me': <Namespace {...}>}>");
  // The sandbox's range limit, and the render-time limit on a quadratic template.
  CHECK(Has(RenderError("{{ range(100001)|length }}", none), "Range too big"));
  ChatTemplateLimits quick;
  quick.max_render_ms = 50;
  CHECK(Has(RenderError("{% set s = 'a' * 10000000 %}{% for i in range(100000) %}{% for j in range(100) %}"
                        "{% if 'b' in s %}{% endif %}{% endfor %}{% endfor %}",
                        none, quick),
            "longer than 50 ms"));
  // Deep variables are refused, not recursed into.
  Json deep = Json::array();
  for (int k = 0; k < 300; ++k) deep = Json::array({deep});
  CHECK(Has(RenderError("{{ x }}", Json{{"x", deep}}), "deeper than 256"));
}

TEST_CASE("a parsed template renders concurrently and the same every time", "[chat_template]") {
  const ChatTemplate t = MustParse(ReadFile(kData + "/chat/glm-5.3-flash.jinja"));
  const Json vars = Json{{"messages", Json::array({Json{{"role", "user"}, {"content", "Hi"}}})},
                         {"add_generation_prompt", true}};
  auto first = t.Render(vars);
  REQUIRE(first.ok());
  CHECK(*first == "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi<|assistant|><think>");
  auto again = t.Render(vars);
  REQUIRE(again.ok());
  CHECK(*again == *first);
}

}  // namespace
}  // namespace ferry::text
