// The expression half of the evaluator (text/jinja_eval.h): operators with Python's semantics,
// attribute and item access as jinja2's sandbox does them, slices.
#include <cmath>

#include "text/jinja_eval.h"
#include "text/jinja_strings.h"

namespace ferry::text::jinja {
namespace {

std::string_view Symbol(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return "+";
    case BinOp::kSub: return "-";
    case BinOp::kMul: return "*";
    case BinOp::kDiv: return "/";
    case BinOp::kFloorDiv: return "//";
    case BinOp::kMod: return "%";
    case BinOp::kPow: return "** or pow()";
  }
  return "?";
}

[[noreturn]] void Unsupported(BinOp op, const Value& a, const Value& b) {
  Fail("TypeError", Cat("unsupported operand type(s) for ", Symbol(op), ": '", TypeName(a), "' and '",
                                 TypeName(b), "'"));
}

[[noreturn]] void Overflow() { Fail("OverflowError", "integer result beyond int64 (Python's integers are unbounded)"); }

Value IntPow(int64_t x, int64_t y) {
  int64_t result = 1;
  while (y > 0) {
    if (y & 1 && __builtin_mul_overflow(result, x, &result)) Overflow();
    y >>= 1;
    if (y > 0 && __builtin_mul_overflow(x, x, &x)) Overflow();
  }
  return Value::Int(result);
}

// Python's float // and %.
double FloatMod(double x, double y) {
  double mod = std::fmod(x, y);
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) mod += y;
  } else {
    mod = std::copysign(0.0, y);
  }
  return mod;
}
double FloatFloorDiv(double x, double y) {
  const double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0 && (y < 0) != (mod < 0)) div -= 1.0;
  if (div == 0) return std::copysign(0.0, x / y);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

// Python's slice.indices(): the positions a[start:stop:step] takes from a sequence of `len`.
std::vector<int64_t> SliceIndices(int64_t len, const Value& start_v, const Value& stop_v, const Value& step_v) {
  const auto as_int = [](const Value& v) {
    if (!v.is_int()) Fail("TypeError", "slice indices must be integers or None or have an __index__ method");
    return v.i();
  };
  const int64_t step = step_v.is_none() || step_v.is_undefined() ? 1 : as_int(step_v);
  if (step == 0) Fail("ValueError", "slice step cannot be zero");
  const int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? len : len - 1;
  const auto bound = [&](const Value& v, int64_t dflt) {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t x = as_int(v);
    if (x < 0) {
      x += len;
      if (x < lower) x = lower;
    } else if (x > upper) {
      x = upper;
    }
    return x;
  };
  const int64_t start = bound(start_v, step > 0 ? lower : upper), stop = bound(stop_v, step > 0 ? upper : lower);
  std::vector<int64_t> out;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) out.push_back(k);
  return out;
}

// The undefined that jinja2's getattr/getitem return for a missing `name` of `obj`.
Value Missing(const Value& obj, const Value& name) {
  if (name.is_string()) return Value::Undefined(Cat("'", ObjectTypeRepr(obj), "' has no attribute ", Repr(name)));
  return Value::Undefined(Cat(ObjectTypeRepr(obj), " has no element ", Repr(name)));
}


Value Arith(Renderer& r, BinOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) a.FailUndefined();
  if (op == BinOp::kMod && a.is_string()) return PercentFormat(r, a.s(), b);  // str % undefined is Python's
  if (b.is_undefined()) b.FailUndefined();
  if (a.is_number() && b.is_number()) {
    const bool ints = a.is_int() && b.is_int();
    const double x = a.f(), y = b.f();
    int64_t v = 0;
    switch (op) {
      case BinOp::kAdd:
        if (!ints) return Value::Float(x + y);
        if (__builtin_add_overflow(a.i(), b.i(), &v)) Overflow();
        return Value::Int(v);
      case BinOp::kSub:
        if (!ints) return Value::Float(x - y);
        if (__builtin_sub_overflow(a.i(), b.i(), &v)) Overflow();
        return Value::Int(v);
      case BinOp::kMul:
        if (!ints) return Value::Float(x * y);
        if (__builtin_mul_overflow(a.i(), b.i(), &v)) Overflow();
        return Value::Int(v);
      case BinOp::kDiv:
        if (y == 0) Fail("ZeroDivisionError", "division by zero");
        return Value::Float(x / y);
      case BinOp::kFloorDiv:
      case BinOp::kMod:
        if (ints) {
          const int64_t p = a.i(), q = b.i();
          if (q == 0) {
            Fail("ZeroDivisionError", op == BinOp::kMod ? "integer modulo by zero" : "integer division or modulo by zero");
          }
          if (p == INT64_MIN && q == -1) Overflow();
          int64_t quot = p / q, rem = p % q;
          if (rem != 0 && ((rem < 0) != (q < 0))) rem += q, quot -= 1;
          return Value::Int(op == BinOp::kMod ? rem : quot);
        }
        if (y == 0) Fail("ZeroDivisionError", op == BinOp::kMod ? "float modulo" : "float floor division by zero");
        return Value::Float(op == BinOp::kMod ? FloatMod(x, y) : FloatFloorDiv(x, y));
      case BinOp::kPow:
        if (ints && b.i() >= 0) return IntPow(a.i(), b.i());
        if (x == 0 && y < 0) Fail("ZeroDivisionError", "0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y)) Fail("ValueError", "a negative number to a fractional power is complex");
        const double p = std::pow(x, y);
        if (std::isinf(p) && std::isfinite(x) && std::isfinite(y)) {
          Fail("OverflowError", "(34, 'Numerical result out of range')");
        }
        return Value::Float(p);
    }
  }
  switch (op) {
    case BinOp::kAdd:
      if (a.is_string() && b.is_string()) return r.NewStr(a.s() + b.s());
      if (a.is_list() && b.is_list() && a.list().kind == b.list().kind &&
          (a.list().kind == ListKind::kList || a.list().kind == ListKind::kTuple)) {
        std::vector<Value> items = a.list().items;
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        r.Work(static_cast<int64_t>(items.size()));
        return Value::List(std::move(items), a.list().kind);
      }
      if (a.is_string() || (a.is_list() && (a.list().kind == ListKind::kList || a.list().kind == ListKind::kTuple))) {
        const std::string t = TypeName(a);
        Fail("TypeError", Cat("can only concatenate ", t, " (not \"", TypeName(b), "\") to ", t));
      }
      break;
    case BinOp::kMul: {
      const auto is_seq = [](const Value& v) {
        return v.is_string() || (v.is_list() && (v.list().kind == ListKind::kList || v.list().kind == ListKind::kTuple));
      };
      const bool seq_a = is_seq(a), seq_b = is_seq(b);
      if ((seq_a && b.is_int()) || (seq_b && a.is_int())) {
        const Value& seq = seq_a ? a : b;
        const int64_t n = std::max<int64_t>(0, (seq_a ? b : a).i());
        const int64_t len = seq.is_string() ? static_cast<int64_t>(seq.s().size()) : Length(seq);
        const int64_t total = len == 0 || n == 0 ? 0 : n > INT64_MAX / len ? INT64_MAX : n * len;
        if (seq.is_string()) {
          r.CheckSize(total);
          std::string out;
          out.reserve(total);
          for (int64_t k = 0; total > 0 && k < n; ++k) out += seq.s();
          return r.NewStr(std::move(out));
        }
        r.Work(total);
        std::vector<Value> items;
        items.reserve(total);
        for (int64_t k = 0; total > 0 && k < n; ++k) {
          items.insert(items.end(), seq.list().items.begin(), seq.list().items.end());
        }
        return Value::List(std::move(items), seq.list().kind);
      }
      if (seq_a || seq_b) {
        Fail("TypeError", Cat("can't multiply sequence by non-int of type '", TypeName(seq_a ? b : a), "'"));
      }
      break;
    }
    case BinOp::kMod:
      if (a.is_string()) return PercentFormat(r, a.s(), b);
      break;
    default: break;
  }
  Unsupported(op, a, b);
}

}  // namespace

// ---- expressions ----

Value Renderer::Eval(const Expr& e, const ScopePtr& scope) {
  line_ = e.line;
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName: return Lookup(e.name, scope);
    case ExprKind::kGetAttr: {
      const Value obj = Eval(*e.kids[0], scope);
      line_ = e.line;
      return GetAttr(obj, e.name);
    }
    case ExprKind::kGetItem: {
      const Value obj = Eval(*e.kids[0], scope);
      if (e.kids[1]->kind == ExprKind::kSlice) return Slice(obj, *e.kids[1], scope);
      const Value key = Eval(*e.kids[1], scope);
      line_ = e.line;
      return GetItem(obj, key);
    }
    case ExprKind::kSlice: Fail("TypeError", "a slice outside brackets");
    case ExprKind::kCall: {
      const Value callee = Eval(*e.kids[0], scope);
      Args args = EvalArgs(e, 1, scope);
      line_ = e.line;
      return Call(callee, std::move(args));
    }
    case ExprKind::kFilter: return EvalFilters(e, Value(), scope);
    case ExprKind::kTest: {
      const Value subject = Eval(*e.kids[0], scope);
      Args args = EvalArgs(e, 1, scope);
      line_ = e.line;
      return Value::Bool(ApplyTest(*this, e.name, subject, args));
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      const Value v = Eval(*e.kids[0], scope);
      if (v.is_undefined()) v.FailUndefined();
      const bool neg = e.kind == ExprKind::kNeg;
      if (v.type() == Type::kFloat) return Value::Float(neg ? -v.f() : v.f());
      if (v.is_int()) {
        if (neg && v.i() == INT64_MIN) Overflow();
        return Value::Int(neg ? -v.i() : v.i());
      }
      Fail("TypeError", Cat("bad operand type for unary ", neg ? "-" : "+", ": '", TypeName(v), "'"));
    }
    case ExprKind::kNot: return Value::Bool(!Truthy(Eval(*e.kids[0], scope)));
    case ExprKind::kBinary: {
      const Value a = Eval(*e.kids[0], scope);
      const Value b = Eval(*e.kids[1], scope);
      line_ = e.line;
      return Arith(*this, e.op, a, b);
    }
    case ExprKind::kConcat: {
      std::string out;
      for (const auto& k : e.kids) {
        const Value v = Eval(*k, scope);
        out += v.is_string() ? v.s() : Str(v);
        CheckSize(static_cast<int64_t>(out.size()));
      }
      return NewStr(std::move(out));
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      Value left = Eval(*e.kids[0], scope);
      if (Truthy(left) == (e.kind == ExprKind::kOr)) return left;
      return Eval(*e.kids[1], scope);
    }
    case ExprKind::kCompare: {
      Value left = Eval(*e.kids[0], scope);
      for (size_t k = 0; k < e.cmp.size(); ++k) {
        Value right = Eval(*e.kids[k + 1], scope);
        line_ = e.line;
        bool ok = false;
        switch (e.cmp[k]) {
          case CmpOp::kEq: ok = Equal(left, right); break;
          case CmpOp::kNe: ok = !Equal(left, right); break;
          case CmpOp::kLt: ok = Less(left, right, "<"); break;
          case CmpOp::kLe: ok = Less(left, right, "<="); break;
          case CmpOp::kGt: ok = Less(left, right, ">"); break;
          case CmpOp::kGe: ok = Less(left, right, ">="); break;
          case CmpOp::kIn: ok = Contains(right, left); break;
          case CmpOp::kNotIn: ok = !Contains(right, left); break;
        }
        if (!ok) return Value::Bool(false);
        left = std::move(right);
      }
      return Value::Bool(true);
    }
    case ExprKind::kCond:
      if (Truthy(Eval(*e.kids[0], scope))) return Eval(*e.kids[1], scope);
      if (e.kids[2]) return Eval(*e.kids[2], scope);
      return Value::Undefined(Cat("the inline if-expression on line ", e.line,
                                           " evaluated to false and no else section was defined."));
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.kids.size());
      for (const auto& k : e.kids) items.push_back(Eval(*k, scope));
      Work(static_cast<int64_t>(items.size()));
      return Value::List(std::move(items), e.kind == ExprKind::kTuple ? ListKind::kTuple : ListKind::kList);
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<DictObj>();
      for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
        Value key = Eval(*e.kids[k], scope);
        Value value = Eval(*e.kids[k + 1], scope);
        d->Set(std::move(key), std::move(value));
      }
      Work(static_cast<int64_t>(d->items.size()));
      return Value::Dict(std::move(d));
    }
  }
  return Value();
}

Value Renderer::Lookup(std::string_view name, const ScopePtr& scope) {
  if (const Value* v = scope->Find(name)) return *v;
  if (const Value* v = variables_.dict().Find(name)) return *v;
  if (IsGlobalName(name)) {
    auto fn = std::make_shared<CallableObj>();
    fn->kind = CallableKind::kGlobal;
    fn->name = std::string(name);
    return Value::Callable(std::move(fn));
  }
  return Value::Undefined(Cat("'", name, "' is undefined"));
}

Args Renderer::EvalArgs(const Expr& e, size_t first, const ScopePtr& scope) {
  Args args;
  for (size_t k = first; k < e.kids.size(); ++k) args.pos.push_back(Eval(*e.kids[k], scope));
  for (const auto& [name, x] : e.kwargs) args.kw.emplace_back(name, Eval(*x, scope));
  if (e.star_args) {
    for (Value& v : Iterate(Eval(*e.star_args, scope))) args.pos.push_back(std::move(v));
  }
  if (e.star_kwargs) {
    const Value d = Eval(*e.star_kwargs, scope);
    if (!d.is_dict()) Fail("TypeError", Cat("argument after ** must be a mapping, not ", TypeName(d)));
    for (const auto& [k, v] : d.dict().items) {
      if (!k.is_string()) Fail("TypeError", "keywords must be strings");
      args.kw.emplace_back(k.s(), v);
    }
  }
  return args;
}

Value Renderer::EvalFilters(const Expr& e, Value subject, const ScopePtr& scope) {
  Value inner;
  if (e.kids[0] == nullptr) inner = std::move(subject);  // the filter block's text
  else if (e.kids[0]->kind == ExprKind::kFilter) inner = EvalFilters(*e.kids[0], std::move(subject), scope);
  else inner = Eval(*e.kids[0], scope);
  Args args = EvalArgs(e, 1, scope);
  line_ = e.line;
  return ApplyFilter(*this, e.name, std::move(inner), args);
}

Value Renderer::ApplyFilterNamed(std::string_view name, Value subject, Args args) {
  return ApplyFilter(*this, name, std::move(subject), args);
}

bool Renderer::ApplyTestNamed(std::string_view name, const Value& subject, Args args) {
  return ApplyTest(*this, name, subject, args);
}

Value Renderer::Slice(const Value& obj, const Expr& slice, const ScopePtr& scope) {
  Value bounds[3];
  for (int k = 0; k < 3; ++k) bounds[k] = slice.kids[k] ? Eval(*slice.kids[k], scope) : Value::None();
  if (obj.is_undefined()) obj.FailUndefined();
  if (obj.is_string()) {
    const std::u32string u = ToU32(obj.s());
    std::u32string part;
    for (int64_t k : SliceIndices(static_cast<int64_t>(u.size()), bounds[0], bounds[1], bounds[2])) part.push_back(u[k]);
    return Value::Str(FromU32(part));
  }
  if (obj.is_list() && (obj.list().kind == ListKind::kList || obj.list().kind == ListKind::kTuple ||
                        obj.list().kind == ListKind::kRange)) {
    const auto& items = obj.list().items;
    std::vector<Value> part;
    for (int64_t k : SliceIndices(static_cast<int64_t>(items.size()), bounds[0], bounds[1], bounds[2])) {
      part.push_back(items[k]);
    }
    Work(static_cast<int64_t>(part.size()));
    return Value::List(std::move(part), obj.list().kind == ListKind::kTuple ? ListKind::kTuple : ListKind::kList);
  }
  if (obj.is_dict()) Fail("TypeError", "unhashable type: 'slice'");
  Fail("TypeError", Cat("'", TypeName(obj), "' object is not subscriptable"));
}

Value Renderer::GetAttr(const Value& obj, std::string_view name) {
  switch (obj.type()) {
    case Type::kUndefined: obj.FailUndefined();
    case Type::kLoop: return LoopAttr(obj, name);
    case Type::kNamespace:
      if (const Value* v = obj.ns().attrs.Find(name)) return *v;
      return Missing(obj, Value::Str(std::string(name)));
    default: break;
  }
  switch (LookupMethod(obj, name)) {
    case MethodLookup::kSafe: {
      auto fn = std::make_shared<CallableObj>();
      fn->kind = CallableKind::kMethod;
      fn->name = std::string(name);
      fn->self = obj;
      return Value::Callable(std::move(fn));
    }
    case MethodLookup::kUnsafe:
      return Value::Unsafe(Cat("access to attribute '", name, "' of '", TypeName(obj), "' object is unsafe."));
    case MethodLookup::kNone: break;
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(name)) return *v;
  }
  return Missing(obj, Value::Str(std::string(name)));
}

Value Renderer::GetItem(const Value& obj, const Value& key) {
  switch (obj.type()) {
    case Type::kUndefined: obj.FailUndefined();
    case Type::kDict: {
      const Value* v = nullptr;
      try {
        v = obj.dict().Find(key);
      } catch (const Error&) {  // an unhashable key: a TypeError jinja2 turns into undefined
      }
      if (v != nullptr) return *v;
      break;
    }
    case Type::kList:
    case Type::kString: {
      const bool sequence = obj.is_string() || obj.list().kind == ListKind::kList ||
                            obj.list().kind == ListKind::kTuple || obj.list().kind == ListKind::kRange;
      if (!sequence || !key.is_int()) break;
      const int64_t n = Length(obj);
      int64_t k = key.i();
      if (k < 0) k += n;
      if (k < 0 || k >= n) return Missing(obj, key);
      if (obj.is_list()) return obj.list().items[k];
      const std::u32string u = ToU32(obj.s());
      return Value::Str(FromU32(std::u32string_view(u).substr(k, 1)));
    }
    default: break;
  }
  if (key.is_string()) return GetAttr(obj, key.s());  // jinja2 falls back to the attribute
  return Missing(obj, key);
}


}  // namespace ferry::text::jinja
