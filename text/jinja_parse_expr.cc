// The expression half of the Jinja engine's parser (text/jinja_parser.h): jinja2's operator
// precedence, from the conditional expression down to literals, postfix access and calls.
#include "text/jinja_parser.h"

namespace ferry::text::jinja::parser {

bool Parser::TupleEnd(std::initializer_list<std::string_view> extra_ends) const {
  // jinja2 3.1's is_tuple_end passes its extra end rules to Token.test_any as one tuple, which
  // never matches: after a trailing comma, `for a, in xs` reads `in` as a name and fails. Kept so.
  (void)extra_ends;
  return Cur().type == Tok::kVarEnd || Cur().type == Tok::kBlockEnd || IsOp(")");
}

ExprPtr Parser::Tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_ends, bool explicit_parens,
                      bool simplified) {
  const int line = Cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) ExpectOp(",");
    if (TupleEnd(extra_ends)) break;
    items.push_back(simplified ? Primary() : Expression(with_condexpr));
    if (IsOp(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) Fail(Cur(), Cat("expected an expression, got ", Describe(Cur())));
  }
  ExprPtr e = Make(ExprKind::kTuple, line);
  e->kids = std::move(items);
  return e;
}

ExprPtr Parser::Expression(bool with_condexpr) {
  DepthScope depth(this);
  if (!with_condexpr) return Or();
  ExprPtr e = Or();
  while (IsName("if")) {
    const int line = Next().line;
    ExprPtr cond = Make(ExprKind::kCond, line);
    cond->kids.push_back(Or());
    cond->kids.push_back(std::move(e));
    cond->kids.push_back(SkipName("else") ? Expression(true) : nullptr);
    e = std::move(cond);
  }
  return e;
}

ExprPtr Parser::Binary(ExprKind kind, ExprPtr left, ExprPtr right, int line) {
  ExprPtr e = Make(kind, line);
  e->kids.push_back(std::move(left));
  e->kids.push_back(std::move(right));
  return e;
}

ExprPtr Parser::Or() {
  ExprPtr e = And();
  while (IsName("or")) {
    const int line = Next().line;
    e = Binary(ExprKind::kOr, std::move(e), And(), line);
  }
  return e;
}

ExprPtr Parser::And() {
  ExprPtr e = Not();
  while (IsName("and")) {
    const int line = Next().line;
    e = Binary(ExprKind::kAnd, std::move(e), Not(), line);
  }
  return e;
}

ExprPtr Parser::Not() {
  if (IsName("not")) {
    DepthScope depth(this);
    ExprPtr e = Make(ExprKind::kNot, Next().line);
    e->kids.push_back(Not());
    return e;
  }
  return Compare();
}

ExprPtr Parser::Compare() {
  const int line = Cur().line;
  ExprPtr first = Math1();
  ExprPtr e;
  while (true) {
    CmpOp op;
    if (IsOp("==")) op = CmpOp::kEq;
    else if (IsOp("!=")) op = CmpOp::kNe;
    else if (IsOp("<")) op = CmpOp::kLt;
    else if (IsOp("<=")) op = CmpOp::kLe;
    else if (IsOp(">")) op = CmpOp::kGt;
    else if (IsOp(">=")) op = CmpOp::kGe;
    else if (IsName("in")) op = CmpOp::kIn;
    else if (IsName("not") && Peek().type == Tok::kName && Peek().text == "in") op = CmpOp::kNotIn;
    else break;
    Next();
    if (op == CmpOp::kNotIn) Next();
    if (!e) {
      e = Make(ExprKind::kCompare, line);
      e->kids.push_back(std::move(first));
    }
    e->cmp.push_back(op);
    e->kids.push_back(Math1());
  }
  return e ? std::move(e) : std::move(first);
}

ExprPtr Parser::Arith(BinOp op, ExprPtr left, ExprPtr right, int line) {
  ExprPtr e = Binary(ExprKind::kBinary, std::move(left), std::move(right), line);
  e->op = op;
  return e;
}

ExprPtr Parser::Math1() {
  ExprPtr e = Concat();
  while (IsOp("+") || IsOp("-")) {
    const Token& t = Next();
    e = Arith(t.text == "+" ? BinOp::kAdd : BinOp::kSub, std::move(e), Concat(), t.line);
  }
  return e;
}

ExprPtr Parser::Concat() {
  ExprPtr first = Math2();
  if (!IsOp("~")) return first;
  ExprPtr e = Make(ExprKind::kConcat, first->line);
  e->kids.push_back(std::move(first));
  while (SkipOp("~")) e->kids.push_back(Math2());
  return e;
}

ExprPtr Parser::Math2() {
  ExprPtr e = Pow();
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const Token& t = Next();
    const BinOp op = t.text == "*" ? BinOp::kMul : t.text == "/" ? BinOp::kDiv : t.text == "//" ? BinOp::kFloorDiv
                                                                                               : BinOp::kMod;
    e = Arith(op, std::move(e), Pow(), t.line);
  }
  return e;
}

ExprPtr Parser::Pow() {
  ExprPtr e = Unary(true);
  while (IsOp("**")) {
    const int line = Next().line;
    e = Arith(BinOp::kPow, std::move(e), Unary(true), line);
  }
  return e;
}

ExprPtr Parser::Unary(bool with_filter) {
  DepthScope depth(this);
  ExprPtr e;
  if (IsOp("-") || IsOp("+")) {
    const Token& t = Next();
    e = Make(t.text == "-" ? ExprKind::kNeg : ExprKind::kPos, t.line);
    e->kids.push_back(Unary(false));
  } else {
    e = Primary();
  }
  e = Postfix(std::move(e));
  if (!with_filter) return e;
  while (true) {  // jinja2's parse_filter_expr
    if (IsOp("|")) {
      e = Filter(std::move(e), false);
    } else if (IsName("is")) {
      e = Test(std::move(e));
    } else if (IsOp("(")) {
      e = Call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::Primary() {
  DepthScope depth(this);
  const Token& t = Cur();
  ExprPtr e;
  switch (t.type) {
    case Tok::kName:
      Next();
      e = Make(ExprKind::kConst, t.line);
      if (t.text == "true" || t.text == "True") e->value = Value::Bool(true);
      else if (t.text == "false" || t.text == "False") e->value = Value::Bool(false);
      else if (t.text == "none" || t.text == "None") e->value = Value::None();
      else e->kind = ExprKind::kName, e->name = t.text;
      return e;
    case Tok::kString: {
      std::string s;
      while (Cur().type == Tok::kString) s += Next().text;  // adjacent strings join
      e = Make(ExprKind::kConst, t.line);
      e->value = Value::Str(std::move(s));
      return e;
    }
    case Tok::kInt:
    case Tok::kFloat:
      Next();
      e = Make(ExprKind::kConst, t.line);
      e->value = t.type == Tok::kInt ? Value::Int(t.i) : Value::Float(t.f);
      return e;
    default: break;
  }
  if (SkipOp("(")) {
    e = Tuple(true, {}, true);
    ExpectOp(")");
    return e;
  }
  if (IsOp("[") || IsOp("{")) {
    const bool dict = Next().text == "{";
    e = Make(dict ? ExprKind::kDict : ExprKind::kList, t.line);
    const std::string_view close = dict ? "}" : "]";
    while (!IsOp(close)) {
      if (!e->kids.empty()) {
        ExpectOp(",");
        if (IsOp(close)) break;
      }
      e->kids.push_back(Expression(true));
      if (dict) {
        ExpectOp(":");
        e->kids.push_back(Expression(true));
      }
    }
    ExpectOp(close);
    return e;
  }
  Fail(t, Cat("unexpected ", Describe(t), ", expected an expression"));
}

ExprPtr Parser::Postfix(ExprPtr e) {
  while (true) {
    if (IsOp(".")) {
      const int line = Next().line;
      const Token& attr = Cur();
      if (attr.type == Tok::kName) {
        ExprPtr g = Make(ExprKind::kGetAttr, line);
        g->name = Next().text;
        g->kids.push_back(std::move(e));
        e = std::move(g);
      } else if (attr.type == Tok::kInt) {
        ExprPtr index = Make(ExprKind::kConst, line);
        index->value = Value::Int(Next().i);
        e = Binary(ExprKind::kGetItem, std::move(e), std::move(index), line);
      } else {
        Fail(attr, Cat("expected a name or number after '.', got ", Describe(attr)));
      }
    } else if (IsOp("[")) {
      const int line = Next().line;
      std::vector<ExprPtr> args;
      while (!IsOp("]")) {
        if (!args.empty()) ExpectOp(",");
        args.push_back(Subscribed());
      }
      ExpectOp("]");
      ExprPtr index;
      if (args.size() == 1) {
        index = std::move(args[0]);
      } else {
        index = Make(ExprKind::kTuple, line);
        index->kids = std::move(args);
      }
      e = Binary(ExprKind::kGetItem, std::move(e), std::move(index), line);
    } else if (IsOp("(")) {
      e = Call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::Subscribed() {
  const int line = Cur().line;
  ExprPtr start;
  if (!IsOp(":")) {
    start = Expression(true);
    if (!IsOp(":")) return start;
  }
  Next();
  ExprPtr s = Make(ExprKind::kSlice, line);
  s->kids.push_back(std::move(start));
  s->kids.push_back(IsOp(":") || IsOp("]") || IsOp(",") ? nullptr : Expression(true));
  ExprPtr step;
  if (SkipOp(":") && !IsOp("]") && !IsOp(",")) step = Expression(true);
  s->kids.push_back(std::move(step));
  return s;
}

void Parser::CallArgs(Expr* e) {
  const Token& open = Cur();
  ExpectOp("(");
  bool need_comma = false;
  while (!IsOp(")")) {
    if (need_comma) {
      ExpectOp(",");
      if (IsOp(")")) break;
    }
    const auto ensure = [&](bool ok) {
      if (!ok) Fail(open, "invalid syntax for function call expression");
    };
    if (SkipOp("*")) {
      ensure(!e->star_args && !e->star_kwargs);
      e->star_args = Expression(true);
    } else if (SkipOp("**")) {
      ensure(!e->star_kwargs);
      e->star_kwargs = Expression(true);
    } else if (Cur().type == Tok::kName && Peek().type == Tok::kOp && Peek().text == "=") {
      ensure(!e->star_kwargs);
      const Token& at = Cur();
      std::string key = Next().text;
      Next();
      for (const auto& kw : e->kwargs) {
        if (kw.first == key) Fail(at, Cat("keyword argument repeated: ", key));  // Python's SyntaxError
      }
      e->kwargs.emplace_back(std::move(key), Expression(true));
    } else {
      ensure(!e->star_args && !e->star_kwargs && e->kwargs.empty());
      e->kids.push_back(Expression(true));
    }
    need_comma = true;
  }
  ExpectOp(")");
}

ExprPtr Parser::Call(ExprPtr callee) {
  ExprPtr e = Make(ExprKind::kCall, Cur().line);
  e->kids.push_back(std::move(callee));
  CallArgs(e.get());
  return e;
}

ExprPtr Parser::Filter(ExprPtr subject, bool start_inline) {
  while (IsOp("|") || start_inline) {
    if (!start_inline) Next();
    start_inline = false;
    const Token& at = Cur();
    std::string name = TakeName();
    while (SkipOp(".")) name.append(".").append(TakeName());
    ExprPtr f = Make(ExprKind::kFilter, at.line);
    f->col = at.col;
    f->name = std::move(name);
    f->kids.push_back(std::move(subject));
    if (IsOp("(")) CallArgs(f.get());
    subject = std::move(f);
  }
  return subject;
}

ExprPtr Parser::Test(ExprPtr subject) {
  const int line = Next().line;  // "is"
  const bool negated = SkipName("not");
  const Token& at = Cur();
  std::string name = TakeName();
  while (SkipOp(".")) name.append(".").append(TakeName());
  ExprPtr e = Make(ExprKind::kTest, line);
  e->line = at.line;
  e->col = at.col;
  e->name = std::move(name);
  e->kids.push_back(std::move(subject));
  const Token& c = Cur();
  if (IsOp("(")) {
    CallArgs(e.get());
  } else if ((c.type == Tok::kName || c.type == Tok::kString || c.type == Tok::kInt || c.type == Tok::kFloat ||
              IsOp("[") || IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) Fail(c, "you cannot chain multiple tests with is");
    e->kids.push_back(Postfix(Primary()));
  }
  if (!negated) return e;
  ExprPtr n = Make(ExprKind::kNot, line);
  n->kids.push_back(std::move(e));
  return n;
}

}  // namespace ferry::text::jinja::parser
