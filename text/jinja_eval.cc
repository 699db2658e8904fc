#include "text/jinja_eval.h"


namespace ferry::text::jinja {

const Value* Scope::Find(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_.get()) {
    for (const auto& [k, v] : s->vars_) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Scope::Set(std::string_view name, Value value) {
  for (auto& [k, v] : vars_) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars_.emplace_back(std::string(name), std::move(value));
}

const Value* Args::Get(size_t index, std::string_view name) const {
  if (index < pos.size()) return &pos[index];
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return nullptr;
}

Renderer::Renderer(const Program& program, Value variables, const ChatTemplateLimits& limits)
    : program_(program), variables_(std::move(variables)), limits_(limits) {}

Renderer::~Renderer() {
  for (const auto& weak : closures_) {
    if (const auto s = weak.lock()) s->Clear();
  }
  for (const auto& weak : namespaces_) {
    if (const auto ns = weak.lock()) ns->attrs = DictObj();
  }
}

template <typename T>
void Renderer::Register(std::vector<std::weak_ptr<T>>* registry, const std::shared_ptr<T>& p) {
  if (registry->size() >= 1024 && (registry->size() & (registry->size() - 1)) == 0) {  // at powers of two
    std::erase_if(*registry, [](const std::weak_ptr<T>& w) { return w.expired(); });
  }
  registry->push_back(p);
}

std::string Renderer::Run() {
  std::string out;
  try {
    Exec(program_.body, std::make_shared<Scope>(nullptr), &out);
  } catch (Error& e) {
    if (e.line == 0) e.line = line_;
    throw;
  }
  return out;
}

void Renderer::Work(int64_t n) {
  if (n > limits_.max_steps - steps_) {
    Fail("LimitError", Cat("the render took more than ", limits_.max_steps,
                                    " steps (loop iterations, macro calls, list elements built)"));
  }
  steps_ += n;
  if ((++work_calls_ & 1023) == 0 || n >= 1024) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start_);
    if (ms.count() > limits_.max_render_ms) {
      Fail("LimitError", Cat("the render took longer than ", limits_.max_render_ms, " ms"));
    }
  }
}

void Renderer::CheckSize(int64_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    Fail("LimitError", Cat("a string of ", bytes, " bytes exceeds the limit of ", limits_.max_output_bytes));
  }
}

Value Renderer::NewStr(std::string s) {
  CheckSize(static_cast<int64_t>(s.size()));
  string_bytes_ += static_cast<int64_t>(s.size());
  if (string_bytes_ > limits_.max_string_bytes) {
    Fail("LimitError", Cat("the render built more than ", limits_.max_string_bytes, " bytes of strings"));
  }
  return Value::Str(std::move(s));
}

std::shared_ptr<NamespaceObj> Renderer::NewNamespace() {
  auto ns = std::make_shared<NamespaceObj>();
  Register(&namespaces_, ns);
  return ns;
}

void Renderer::Append(std::string* out, std::string_view text) {
  if (static_cast<int64_t>(out->size() + text.size()) > limits_.max_output_bytes) {
    Fail("LimitError", Cat("the output exceeds the limit of ", limits_.max_output_bytes, " bytes"));
  }
  out->append(text);
}

// ---- statements ----

Renderer::Flow Renderer::Exec(const Body& body, const ScopePtr& scope, std::string* out) {
  for (const auto& s : body) {
    const Flow f = ExecStmt(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::ExecStmt(const Stmt& s, const ScopePtr& scope, std::string* out) {
  line_ = s.line;
  switch (s.kind) {
    case StmtKind::kData:
      Append(out, s.text);
      return Flow::kNormal;
    case StmtKind::kPrint: {
      const Value v = Eval(*s.expr, scope);
      if (v.is_string()) Append(out, v.s());
      else Append(out, Str(v));
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      return Exec(Truthy(Eval(*s.expr, scope)) ? s.body : s.orelse, scope, out);
    case StmtKind::kFor:
      return ExecFor(s, scope, Eval(*s.expr, scope), 0, out);
    case StmtKind::kSet:
      Assign(s.target, Eval(*s.expr, scope), scope);
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      const auto inner = std::make_shared<Scope>(scope);
      std::string buf;
      const Flow f = Exec(s.body, inner, &buf);
      if (f != Flow::kNormal) return f;
      Value v = NewStr(std::move(buf));
      if (s.filter) v = EvalFilters(*s.filter, std::move(v), inner);
      Assign(s.target, std::move(v), scope);
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      scope->Set(s.macro->name, MakeMacro(*s.macro, scope));
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      const Expr& call = *s.expr;
      const Value callee = Eval(*call.kids[0], scope);
      Args args = EvalArgs(call, 1, scope);
      args.kw.emplace_back("caller", MakeMacro(*s.macro, scope));
      const Value v = Call(callee, std::move(args));
      Append(out, Str(v));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      const auto inner = std::make_shared<Scope>(scope);
      std::string buf;
      const Flow f = Exec(s.body, inner, &buf);
      if (f != Flow::kNormal) return f;
      Append(out, Str(EvalFilters(*s.filter, NewStr(std::move(buf)), inner)));
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      std::vector<Value> values;
      for (const auto& v : s.values) values.push_back(Eval(*v, scope));
      const auto inner = std::make_shared<Scope>(scope);
      for (size_t k = 0; k < values.size(); ++k) Assign(s.targets[k], std::move(values[k]), inner);
      return Exec(s.body, inner, out);
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kGeneration:
      Exec(s.body, std::make_shared<Scope>(scope), out);
      return Flow::kNormal;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::ExecFor(const Stmt& s, const ScopePtr& scope, const Value& iterable, int depth0,
                                 std::string* out) {
  std::vector<Value> items = Iterate(iterable);
  Work(static_cast<int64_t>(items.size()));
  if (s.filter) {  // `for x in xs if cond`: loop.length and the rest count the kept items
    std::vector<Value> kept;
    for (Value& item : items) {
      const auto fs = std::make_shared<Scope>(scope);
      Assign(s.target, item, fs);
      if (Truthy(Eval(*s.filter, fs))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  auto loop = std::make_shared<LoopObj>();
  loop->items = std::move(items);
  loop->depth0 = depth0;
  loop->stmt = &s;
  if (s.recursive) loop->scope = scope;
  const Value loop_value = Value::Loop(loop);
  bool iterated = false;
  for (size_t k = 0; k < loop->items.size(); ++k) {
    Work(1);
    const auto it = std::make_shared<Scope>(scope);
    loop->index0 = static_cast<int64_t>(k);
    it->Set("loop", loop_value);
    Assign(s.target, loop->items[k], it);
    iterated = true;
    if (Exec(s.body, it, out) == Flow::kBreak) break;
    line_ = s.line;
  }
  if (!iterated && !s.orelse.empty()) return Exec(s.orelse, std::make_shared<Scope>(scope), out);
  return Flow::kNormal;
}

void Renderer::Assign(const Target& target, Value value, const ScopePtr& scope) {
  switch (target.kind) {
    case Target::Kind::kName:
      scope->Set(target.name, std::move(value));
      return;
    case Target::Kind::kTuple: {
      const std::vector<Value> items = Iterate(value);
      const size_t n = target.items.size();
      if (items.size() < n) {
        Fail("ValueError", Cat("not enough values to unpack (expected ", n, ", got ", items.size(), ")"));
      }
      if (items.size() > n) Fail("ValueError", Cat("too many values to unpack (expected ", n, ")"));
      for (size_t k = 0; k < n; ++k) Assign(target.items[k], items[k], scope);
      return;
    }
    case Target::Kind::kAttr: {
      const Value ns = Lookup(target.name, scope);
      if (ns.type() != Type::kNamespace) Fail("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
      ns.ns().attrs.Set(Value::Str(target.attr), std::move(value));
      return;
    }
  }
}

Value Renderer::Call(const Value& callee, Args args) {
  switch (callee.type()) {
    case Type::kUndefined: callee.FailUndefined();
    case Type::kLoop: return CallLoop(callee.loop(), std::move(args));
    case Type::kCallable: {
      const CallableObj& fn = callee.fn();
      switch (fn.kind) {
        case CallableKind::kMacro: return CallMacro(fn, std::move(args));
        case CallableKind::kGlobal: return CallGlobal(*this, fn.name, args);
        case CallableKind::kMethod: return CallMethod(*this, fn.self, fn.name, args);
      }
      break;
    }
    default: break;
  }
  Fail("TypeError", Cat("'", TypeName(callee), "' object is not callable"));
}

Value Renderer::MakeMacro(const MacroDef& def, const ScopePtr& closure) {
  auto fn = std::make_shared<CallableObj>();
  fn->kind = CallableKind::kMacro;
  fn->name = def.name;
  fn->macro = &def;
  fn->closure = closure;
  if (closures_.empty() || closures_.back().lock() != closure) Register(&closures_, closure);
  return Value::Callable(std::move(fn));
}

Value Renderer::CallMacro(const CallableObj& fn, Args args) {
  const MacroDef& m = *fn.macro;
  Work(1);
  if (call_depth_ >= limits_.max_call_depth) {
    Fail("RecursionError", Cat("macro calls nest deeper than ", limits_.max_call_depth));
  }
  const int saved_line = line_;
  const auto scope = std::make_shared<Scope>(fn.closure);
  const size_t np = m.params.size();
  std::vector<bool> set(np, false);
  for (size_t k = 0; k < std::min(np, args.pos.size()); ++k) {
    scope->Set(m.params[k], std::move(args.pos[k]));
    set[k] = true;
  }
  if (args.pos.size() > np && !m.uses_varargs) {
    Fail("TypeError", Cat("macro ", m.name.empty() ? "None" : Cat("'", m.name, "'"), " takes not more than ", np,
                          " argument(s)"));
  }
  std::vector<Value> varargs(std::make_move_iterator(args.pos.begin() + std::min(np, args.pos.size())),
                             std::make_move_iterator(args.pos.end()));
  auto kwargs = std::make_shared<DictObj>();
  Value caller = Value::Undefined("No caller defined");
  for (auto& [k, v] : args.kw) {
    size_t p = 0;
    while (p < np && m.params[p] != k) ++p;
    if (p < np && !set[p]) {
      scope->Set(k, std::move(v));
      set[p] = true;
    } else if (p == np && k == "caller" && m.uses_caller) {
      caller = std::move(v);
    } else if (p == np && m.uses_kwargs) {
      kwargs->Set(Value::Str(k), std::move(v));
    } else {
      Fail("TypeError", Cat("macro ", m.name.empty() ? "None" : Cat("'", m.name, "'"), " takes no keyword argument '",
                            k, "'"));
    }
  }
  const size_t first_default = np - m.defaults.size();
  for (size_t p = 0; p < np; ++p) {
    if (set[p]) continue;
    scope->Set(m.params[p], p >= first_default ? Eval(*m.defaults[p - first_default], scope)
                                               : Value::Undefined(Cat("parameter '", m.params[p],
                                                                               "' was not provided")));
  }
  if (m.uses_varargs) scope->Set("varargs", Value::List(std::move(varargs), ListKind::kTuple));
  if (m.uses_kwargs) scope->Set("kwargs", Value::Dict(std::move(kwargs)));
  if (m.uses_caller) scope->Set("caller", std::move(caller));
  std::string out;
  ++call_depth_;
  Exec(m.body, scope, &out);
  --call_depth_;
  line_ = saved_line;
  return NewStr(std::move(out));
}

Value Renderer::CallLoop(LoopObj& loop, Args args) {
  if (loop.scope == nullptr) {
    Fail("TypeError", "Tried to call non recursive loop. Maybe you forgot the 'recursive' modifier.");
  }
  if (args.pos.size() != 1) Fail("TypeError", "loop() takes exactly one argument, the items to loop over");
  if (call_depth_ >= limits_.max_call_depth) {
    Fail("RecursionError", Cat("recursive loops nest deeper than ", limits_.max_call_depth));
  }
  std::string out;
  ++call_depth_;
  ExecFor(*loop.stmt, loop.scope, args.pos[0], loop.depth0 + 1, &out);
  --call_depth_;
  return NewStr(std::move(out));
}

}  // namespace ferry::text::jinja
