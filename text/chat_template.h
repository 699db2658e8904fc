// The checkpoint's chat template, rendered in C++ exactly as transformers' apply_chat_template
// renders it with Python's jinja2 3.1:
//   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
//                                 extensions=[loopcontrols, AssistantTracker])
// with the globals raise_exception(msg) and strftime_now(fmt) and transformers' tojson
// (json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...)).
// tests/data/chat/expected.json (scripts/render_chat_reference.py) holds jinja2's own output for
// the GLM templates over varied conversations; tests/text/chat_template_test.cc checks that the
// renders are byte-equal.
//
// Python semantics kept: values print as Python's str() ("None", "True", 1.0, ['a', 1],
// {'k': 'v'}); an undefined name prints "" and is falsy, and using it further (an attribute of it,
// arithmetic) is an error; dict keys keep their order; strings are indexed and sliced by code
// point. The engine is text/jinja_*: lexer and parser (jinja_lex, jinja_parse, jinja_parse_expr),
// values (jinja_value, jinja_strings, jinja_json), evaluator (jinja_eval, jinja_expr) and builtins
// (jinja_builtins: filters, jinja_tests: tests and globals, jinja_methods: str/dict/list methods).
//
// Not implemented: the tags extends, block, include, import, from, autoescape, trans (a parse
// error); the filters filesizeformat, forceescape, groupby, pprint, random, slice, striptags,
// truncate, urlencode, urlize, wordwrap, xmlattr and the globals lipsum, cycler, joiner (an error
// where used); str methods other than those in text/jinja_methods.cc, and format specs in
// str.format. Known differences from jinja2: integers are int64 (overflow is an error where
// Python grows the integer); a function, method or generator prints without its address ("<built-in
// method split>"), and map/select/reject/unique/... return lists where jinja2 returns generators
// (the same when iterated, joined or |list-ed, as templates use them); a slice of range() prints
// as a list; jinja2's compile-time constant folding (which turns e.g. a failing `1[::-1]` into an
// undefined) is not imitated; case mapping and character classes follow ICU's Unicode tables,
// which may differ from Python's by a Unicode version for rare characters.
//
// Stack: a render recurses at most max_call_depth macro calls deep over expressions at most 200
// nodes deep: 256 KiB of stack sufficed for the deepest case in an optimized build; give 1 MiB.
// Thread safety: a ChatTemplate is immutable after Parse; Render may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace ferry::text {

namespace jinja {
struct Program;
}

// What one render may spend; exceeding any is INVALID_ARGUMENT naming the limit.
struct ChatTemplateLimits {
  int64_t max_output_bytes = int64_t{64} << 20;     // the rendered text, and any one string built
  int64_t max_string_bytes = int64_t{1} << 30;      // all strings built during the render together
  int64_t max_steps = 50'000'000;                   // loop iterations + macro calls + list elements built
  int max_call_depth = 100;                         // nested macro calls and recursive loops
  int64_t max_render_ms = 10'000;                   // wall time of one render, checked as it works
};

class ChatTemplate {
 public:
  // Parses a template source. A syntax error is INVALID_ARGUMENT naming the line and column and
  // what was expected ("line 3, column 12: expected 'endif' ..."); so are an unknown tag, filter
  // or test, and source that is not UTF-8.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source);

  // Renders with `variables` (an object: messages, tools, add_generation_prompt, and any extra
  // keyword such as reasoning_effort, clear_thinking, enable_thinking, bos_token). Objects keep
  // their key order as Python dicts do; integers stay integers, other numbers are floats. Errors
  // (an attribute of an undefined value, raise_exception(msg), a type error, a limit) are
  // INVALID_ARGUMENT: "line L: <Python exception>: <message>", e.g.
  // "line 7: UndefinedError: 'dict object' has no attribute 'name'".
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& variables,
                                     const ChatTemplateLimits& limits = {}) const;

 private:
  explicit ChatTemplate(std::shared_ptr<const jinja::Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const jinja::Program> program_;
};

// Reads a checkpoint folder's template: chat_template.jinja if present, else tokenizer_config.json's
// "chat_template" (a string, or a list of {"name", "template"} of which "default" is taken).
// NOT_FOUND if neither has one; INVALID_ARGUMENT if tokenizer_config.json is not JSON or the
// field has another shape.
absl::StatusOr<std::string> ReadChatTemplate(const std::string& model_dir);

}  // namespace ferry::text
