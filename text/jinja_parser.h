// The Jinja engine's parser class, shared by text/jinja_parse.cc (statements) and
// text/jinja_parse_expr.cc (expressions). Internal to the engine; text/jinja_parse.h is its interface.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja_lex.h"
#include "text/jinja_parse.h"

namespace ferry::text::jinja::parser {

constexpr int kMaxDepth = 200;  // nested expressions and blocks; deeper is refused, not a stack overflow

using ExprPtr = std::unique_ptr<Expr>;

// A token as messages name it: "'}}'", "end of template", "'name'".
std::string Describe(const Token& t);

// jinja2's recursive descent parser (jinja2/parser.py), method for method.
class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  std::unique_ptr<Program> Run();

 private:
  const Token& Cur() const { return t_[i_]; }
  const Token& Peek() const { return t_[std::min(i_ + 1, t_.size() - 1)]; }
  const Token& Next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool IsOp(std::string_view op) const { return Cur().type == Tok::kOp && Cur().text == op; }
  bool IsName(std::string_view name) const { return Cur().type == Tok::kName && Cur().text == name; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  [[noreturn]] void Fail(const Token& t, std::string_view what) const { throw Error{At(t.line, t.col, what), t.line}; }
  void ExpectOp(std::string_view op) {
    if (!SkipOp(op)) Fail(Cur(), Cat("expected '", op, "', got ", Describe(Cur())));
  }
  void ExpectName(std::string_view name) {
    if (!SkipName(name)) Fail(Cur(), Cat("expected '", name, "', got ", Describe(Cur())));
  }
  std::string TakeName() {
    if (Cur().type != Tok::kName) Fail(Cur(), Cat("expected a name, got ", Describe(Cur())));
    return Next().text;
  }
  void Expect(Tok type, std::string_view what) {
    if (Cur().type != type) Fail(Cur(), Cat("expected ", what, ", got ", Describe(Cur())));
    Next();
  }

  struct DepthScope {
    explicit DepthScope(Parser* p) : p(p) {
      if (++p->depth_ > kMaxDepth) p->Fail(p->Cur(), Cat("nesting deeper than ", kMaxDepth));
    }
    ~DepthScope() { --p->depth_; }
    Parser* p;
  };

  ExprPtr Make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements (text/jinja_parse.cc) ----
  // Statements up to a `{% name %}` in `ends` (left current) or the end of the template.
  Body Subparse(std::initializer_list<std::string_view> ends);
  // After a tag's `%}`: its body up to one of `ends`.
  Body Block(std::initializer_list<std::string_view> ends, std::string_view opener, int line);
  // The tag after `{%`, up to (not including) its `%}`.
  std::unique_ptr<Stmt> Statement();
  void If(Stmt* s);
  void For(Stmt* s);
  void Set(Stmt* s);
  void Signature(MacroDef* m);
  void MacroBody(MacroDef* m, std::string_view end, std::string_view opener, int line);
  Target AssignTarget(bool with_namespace, std::initializer_list<std::string_view> extra_ends);
  static bool ToTarget(const Expr& e, Target* t);

  // ---- expressions (text/jinja_parse_expr.cc) ----
  bool TupleEnd(std::initializer_list<std::string_view> extra_ends) const;
  // jinja2's parse_tuple: one expression, or a tuple where commas separate several.
  ExprPtr Tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_ends, bool explicit_parens,
                bool simplified = false);
  ExprPtr Expression(bool with_condexpr);
  ExprPtr Binary(ExprKind kind, ExprPtr left, ExprPtr right, int line);
  ExprPtr Or();
  ExprPtr And();
  ExprPtr Not();
  ExprPtr Compare();
  ExprPtr Arith(BinOp op, ExprPtr left, ExprPtr right, int line);
  ExprPtr Math1();
  ExprPtr Concat();
  ExprPtr Math2();
  ExprPtr Pow();
  ExprPtr Unary(bool with_filter);  // with postfix access, then filters, tests and calls
  ExprPtr Primary();
  ExprPtr Postfix(ExprPtr e);
  ExprPtr Subscribed();
  // Arguments `(a, b, k=v, *args, **kwargs)` into e (kids after those already there).
  void CallArgs(Expr* e);
  ExprPtr Call(ExprPtr callee);
  // `| name(args) | name ...`; `start_inline`: the first filter has no `|` ({% filter %}).
  ExprPtr Filter(ExprPtr subject, bool start_inline);
  ExprPtr Test(ExprPtr subject);

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;             // enclosing for loops that break/continue may leave
  std::vector<std::string> open_;  // the blocks being parsed, for messages
};

}  // namespace ferry::text::jinja::parser
