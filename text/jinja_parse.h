// The Jinja engine's syntax tree and parser (text/chat_template.h is the interface).
//
// The lexer follows jinja2 3.1's regex lexer rule for rule, with trim_blocks and lstrip_blocks on
// as transformers sets them:
//   - one trailing newline of the source is dropped; \r\n and \r read as \n;
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` all after it;
//   - lstrip_blocks: spaces and tabs between a line's start and a `{%` or `{#` on it are dropped
//     (not before `{{`; not with `{%+`);
//   - trim_blocks: the newline right after a `%}` or `#}` is dropped (not with `+%}`);
//   - `{% raw %}...{% endraw %}` is text.
// The parser is jinja2's recursive descent (operator precedence, `a if c`, `x is test`, filters,
// slices, tuples, call arguments); errors name the line, the column and what was expected.
//
// Statements: if/elif/else, for (unpacking, `if` filter, else, recursive), set (name, tuple,
// namespace attribute, block with filters), macro, call, filter, with, break/continue, raw and
// transformers' generation. Not supported (a parse error): extends, block, include, import, from.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja_value.h"

namespace ferry::text::jinja {

enum class ExprKind : uint8_t {
  kConst,    // value
  kName,     // name
  kGetAttr,  // kids[0].name
  kGetItem,  // kids[0][kids[1]]
  kSlice,    // start:stop:step as kids[0..2], each may be null
  kCall,     // kids[0](kids[1..], kwargs)
  kFilter,   // kids[0] | name(kids[1..], kwargs); kids[0] null in a filter block
  kTest,     // kids[0] is name(kids[1..], kwargs)
  kNeg,
  kPos,
  kNot,
  kBinary,   // kids[0] op kids[1]
  kConcat,   // kids joined with ~
  kAnd,
  kOr,
  kCompare,  // kids[0] cmp[0] kids[1] cmp[1] kids[2] ...
  kCond,     // kids[1] if kids[0] else kids[2] (kids[2] null: no else)
  kList,
  kTuple,
  kDict,     // kids: key, value, key, value, ...
};
enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  ExprKind kind;
  int line = 0;
  int col = 0;       // kFilter, kTest: where the name is
  Value value;       // kConst
  std::string name;  // kName, kGetAttr, kFilter, kTest
  BinOp op = BinOp::kAdd;
  std::vector<CmpOp> cmp;
  std::vector<std::unique_ptr<Expr>> kids;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::unique_ptr<Expr> star_args, star_kwargs;  // *args, **kwargs in a call
};

// What {% set %} and {% for %} assign to.
struct Target {
  enum class Kind : uint8_t { kName, kTuple, kAttr } kind = Kind::kName;
  std::string name;           // kName, or the namespace of kAttr
  std::string attr;           // kAttr
  std::vector<Target> items;  // kTuple
};

enum class StmtKind : uint8_t {
  kData,         // text
  kPrint,        // {{ expr }}
  kIf,           // expr, body, orelse
  kFor,          // target, expr (iterable), filter, body, orelse, recursive
  kSet,          // target = expr
  kSetBlock,     // target = the body's output | filter
  kMacro,        // macro
  kCallBlock,    // expr (the call), macro (the caller's signature and body)
  kFilterBlock,  // the body's output | filter
  kWith,         // targets = exprs, body
  kBreak,
  kContinue,
  kGeneration,   // transformers' {% generation %}: the body, in its own scope
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<std::unique_ptr<Expr>> defaults;  // for the last defaults.size() params
  Body body;
  // Whether the body reads `varargs`, `kwargs`, `caller`: jinja2 accepts extra arguments only then.
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                  // kData
  std::unique_ptr<Expr> expr;        // kPrint, kIf, kFor, kSet, kCallBlock
  std::unique_ptr<Expr> filter;      // kFor's `if`; kSetBlock's and kFilterBlock's filter chain
  Target target;                     // kFor, kSet, kSetBlock
  std::vector<Target> targets;       // kWith
  std::vector<std::unique_ptr<Expr>> values;  // kWith
  Body body, orelse;
  bool recursive = false;            // kFor
  std::unique_ptr<MacroDef> macro;   // kMacro, kCallBlock
};

// A parsed template. Immutable; shared by every render.
struct Program {
  Body body;
};

// Parses `source`; throws Error ("line L, column C: ...") on a syntax error, an unknown tag,
// filter or test, or nesting deeper than the parser allows. As in jinja2 3.x, a filter or test
// inside an {% if %} or an `a if b else c` is checked only when it runs (a TemplateRuntimeError
// then), so that a template may guard one that the environment lacks.
std::unique_ptr<Program> ParseTemplate(std::string_view source);

// Names the evaluator provides, for checking at parse time as jinja2 does when it compiles.
bool IsFilterName(std::string_view name);
bool IsTestName(std::string_view name);

}  // namespace ferry::text::jinja
