#include "text/jinja_parse.h"

#include "text/jinja_parser.h"

namespace ferry::text::jinja {
namespace parser {
namespace {

void CollectNames(const Expr* e, MacroDef* m);
void CollectNames(const Body& body, MacroDef* m) {
  for (const auto& s : body) {
    CollectNames(s->expr.get(), m);
    CollectNames(s->filter.get(), m);
    for (const auto& v : s->values) CollectNames(v.get(), m);
    CollectNames(s->body, m);
    CollectNames(s->orelse, m);
    if (s->macro) {
      CollectNames(s->macro->body, m);
      for (const auto& d : s->macro->defaults) CollectNames(d.get(), m);
    }
  }
}
void CollectNames(const Expr* e, MacroDef* m) {
  if (e == nullptr) return;
  if (e->kind == ExprKind::kName) {
    m->uses_varargs |= e->name == "varargs";
    m->uses_kwargs |= e->name == "kwargs";
    m->uses_caller |= e->name == "caller";
  }
  for (const auto& k : e->kids) CollectNames(k.get(), m);
  for (const auto& [name, k] : e->kwargs) CollectNames(k.get(), m);
  CollectNames(e->star_args.get(), m);
  CollectNames(e->star_kwargs.get(), m);
}

// jinja2 checks filter and test names when it compiles, except inside an If or a CondExpr (a
// "soft" frame; a block that makes its own frame there is not soft again).
void CheckNames(const Expr* e, bool soft);
void CheckNames(const Body& body, bool soft) {
  for (const auto& s : body) {
    switch (s->kind) {
      case StmtKind::kIf:
        CheckNames(s->expr.get(), true);
        CheckNames(s->body, true);
        CheckNames(s->orelse, true);
        continue;
      case StmtKind::kPrint:
      case StmtKind::kSet:
      case StmtKind::kCallBlock:
        CheckNames(s->expr.get(), soft);
        break;
      case StmtKind::kFor:
        CheckNames(s->expr.get(), soft);
        CheckNames(s->filter.get(), false);
        break;
      case StmtKind::kWith:
        for (const auto& v : s->values) CheckNames(v.get(), soft);
        break;
      default:
        CheckNames(s->filter.get(), false);
        break;
    }
    CheckNames(s->body, false);
    CheckNames(s->orelse, false);
    if (s->macro) {
      CheckNames(s->macro->body, false);
      for (const auto& d : s->macro->defaults) CheckNames(d.get(), false);
    }
  }
}
void CheckNames(const Expr* e, bool soft) {
  if (e == nullptr) return;
  if (!soft && ((e->kind == ExprKind::kFilter && !IsFilterName(e->name)) ||
                (e->kind == ExprKind::kTest && !IsTestName(e->name)))) {
    throw Error{At(e->line, e->col, Cat("no ", e->kind == ExprKind::kFilter ? "filter" : "test", " named '", e->name, "'")),
                e->line};
  }
  soft = soft || e->kind == ExprKind::kCond;
  for (const auto& k : e->kids) CheckNames(k.get(), soft);
  for (const auto& [name, k] : e->kwargs) CheckNames(k.get(), soft);
  CheckNames(e->star_args.get(), soft);
  CheckNames(e->star_kwargs.get(), soft);
}

}  // namespace

std::string Describe(const Token& t) {
  switch (t.type) {
    case Tok::kData: return "template data";
    case Tok::kVarBegin: return "'{{'";
    case Tok::kVarEnd: return "'}}'";
    case Tok::kBlockBegin: return "'{%'";
    case Tok::kBlockEnd: return "'%}'";
    case Tok::kEof: return "end of template";
    case Tok::kString: return "a string";
    default: return Cat("'", t.text, "'");
  }
}

std::unique_ptr<Program> Parser::Run() {
  auto program = std::make_unique<Program>();
  program->body = Subparse({});
  if (Cur().type != Tok::kEof) Fail(Cur(), Cat("unexpected ", Describe(Cur())));
  CheckNames(program->body, false);
  return program;
}

// Statements up to a `{% name %}` in `ends` (left current) or the end of the template.
Body Parser::Subparse(std::initializer_list<std::string_view> ends) {
  DepthScope depth(this);
  Body body;
  while (Cur().type != Tok::kEof) {
    const Token& t = Cur();
    if (t.type == Tok::kData) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kData;
      s->line = t.line;
      s->text = t.text;
      body.push_back(std::move(s));
      Next();
    } else if (t.type == Tok::kVarBegin) {
      Next();
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kPrint;
      s->line = t.line;
      s->expr = Tuple(true, {}, false);
      Expect(Tok::kVarEnd, "'}}'");
      body.push_back(std::move(s));
    } else if (t.type == Tok::kBlockBegin) {
      Next();
      for (std::string_view end : ends) {
        if (IsName(end)) return body;
      }
      body.push_back(Statement());
      Expect(Tok::kBlockEnd, "end of statement block '%}'");
    } else {
      Fail(t, Cat("unexpected ", Describe(t)));
    }
  }
  if (ends.size() != 0) {
    std::string names;
    for (std::string_view end : ends) CatTo(&names, names.empty() ? "'" : " or '", end, "'");
    Fail(Cur(), Cat("unexpected end of template, expected ", names, " (", open_.back(), ")"));
  }
  return body;
}

// The body up to `{% end %}`-like tags, after the current tag's `%}`.
Body Parser::Block(std::initializer_list<std::string_view> ends, std::string_view opener, int line) {
  Expect(Tok::kBlockEnd, "end of statement block '%}'");
  open_.push_back(Cat("the ", opener, " on line ", line));
  Body b = Subparse(ends);
  open_.pop_back();
  return b;
}

std::unique_ptr<Stmt> Parser::Statement() {
  const Token& t = Cur();
  if (t.type != Tok::kName) Fail(t, Cat("expected a tag name, got ", Describe(t)));
  auto s = std::make_unique<Stmt>();
  s->line = t.line;
  const std::string tag = Next().text;
  if (tag == "if") {
    If(s.get());
  } else if (tag == "for") {
    For(s.get());
  } else if (tag == "set") {
    Set(s.get());
  } else if (tag == "macro") {
    s->kind = StmtKind::kMacro;
    s->macro = std::make_unique<MacroDef>();
    s->macro->name = TakeName();
    Signature(s->macro.get());
    MacroBody(s->macro.get(), "endmacro", "macro", s->line);
  } else if (tag == "call") {
    s->kind = StmtKind::kCallBlock;
    s->macro = std::make_unique<MacroDef>();
    s->macro->name = "";  // jinja2's caller macro has no name
    if (IsOp("(")) Signature(s->macro.get());
    s->expr = Expression(true);
    if (s->expr->kind != ExprKind::kCall) Fail(t, "expected a call after {% call %}");
    MacroBody(s->macro.get(), "endcall", "call", s->line);
  } else if (tag == "filter") {
    s->kind = StmtKind::kFilterBlock;
    s->filter = Filter(nullptr, true);
    s->body = Block({"endfilter"}, "filter", s->line);
    Next();
  } else if (tag == "with") {
    s->kind = StmtKind::kWith;
    while (Cur().type != Tok::kBlockEnd) {
      if (!s->targets.empty()) ExpectOp(",");
      s->targets.push_back(AssignTarget(false, {}));
      ExpectOp("=");
      s->values.push_back(Expression(true));
    }
    s->body = Block({"endwith"}, "with", s->line);
    Next();
  } else if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) Fail(t, Cat("'", tag, "' outside a loop"));
    s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
  } else if (tag == "generation") {
    s->kind = StmtKind::kGeneration;
    const int saved = loop_depth_;
    loop_depth_ = 0;  // the body is a caller macro in jinja2: no break out of it
    s->body = Block({"endgeneration"}, "generation", s->line);
    loop_depth_ = saved;
    Next();
  } else {
    Fail(t, Cat("unknown tag '", tag, "'",
                         open_.empty() ? "" : Cat(" (inside ", open_.back(), ")")));
  }
  return s;
}

void Parser::If(Stmt* s) {
  s->kind = StmtKind::kIf;
  s->expr = Tuple(false, {}, false);
  s->body = Block({"elif", "else", "endif"}, "if", s->line);
  const std::string tag = Next().text;
  if (tag == "elif") {
    auto elif = std::make_unique<Stmt>();
    elif->line = Cur().line;
    If(elif.get());
    s->orelse.push_back(std::move(elif));
  } else if (tag == "else") {
    s->orelse = Block({"endif"}, "if", s->line);
    Next();
  }
}

void Parser::For(Stmt* s) {
  s->kind = StmtKind::kFor;
  s->target = AssignTarget(false, {"in"});
  ExpectName("in");
  s->expr = Tuple(false, {"recursive"}, false);
  if (SkipName("if")) s->filter = Expression(true);
  s->recursive = SkipName("recursive");
  ++loop_depth_;
  s->body = Block({"endfor", "else"}, "for", s->line);
  --loop_depth_;
  if (Next().text == "else") {
    s->orelse = Block({"endfor"}, "for", s->line);
    Next();
  }
}

void Parser::Set(Stmt* s) {
  s->target = AssignTarget(true, {});
  if (SkipOp("=")) {
    s->kind = StmtKind::kSet;
    s->expr = Tuple(true, {}, false);
    return;
  }
  s->kind = StmtKind::kSetBlock;
  if (IsOp("|")) s->filter = Filter(nullptr, false);
  s->body = Block({"endset"}, "set", s->line);
  Next();
}

void Parser::Signature(MacroDef* m) {
  ExpectOp("(");
  while (!IsOp(")")) {
    if (!m->params.empty()) ExpectOp(",");
    const Token& at = Cur();
    m->params.push_back(TakeName());
    if (SkipOp("=")) {
      m->defaults.push_back(Expression(true));
    } else if (!m->defaults.empty()) {
      Fail(at, "non-default argument follows default argument");
    }
  }
  ExpectOp(")");
}

void Parser::MacroBody(MacroDef* m, std::string_view end, std::string_view opener, int line) {
  const int saved = loop_depth_;
  loop_depth_ = 0;
  m->body = Block({end}, opener, line);
  loop_depth_ = saved;
  Next();
  CollectNames(m->body, m);
}

// A name, `name.attr` (a namespace attribute, for {% set %}) or a tuple of names.
Target Parser::AssignTarget(bool with_namespace, std::initializer_list<std::string_view> extra_ends) {
  Target target;
  if (with_namespace && Cur().type == Tok::kName && Peek().type == Tok::kOp && Peek().text == ".") {
    target.kind = Target::Kind::kAttr;
    target.name = Next().text;
    Next();
    target.attr = TakeName();
    return target;
  }
  const Token& at = Cur();
  ExprPtr e = Tuple(false, extra_ends, false, /*simplified=*/true);
  if (!ToTarget(*e, &target)) Fail(at, "can't assign to this expression");
  return target;
}

bool Parser::ToTarget(const Expr& e, Target* t) {
  if (e.kind == ExprKind::kName) {
    t->kind = Target::Kind::kName;
    t->name = e.name;
    return true;
  }
  if (e.kind != ExprKind::kTuple) return false;
  t->kind = Target::Kind::kTuple;
  for (const auto& k : e.kids) {
    t->items.emplace_back();
    if (!ToTarget(*k, &t->items.back())) return false;
  }
  return true;
}

}  // namespace parser

std::unique_ptr<Program> ParseTemplate(std::string_view source) { return parser::Parser(Lex(source)).Run(); }

}  // namespace ferry::text::jinja
