// The Jinja engine's tests and global functions (declared in text/jinja_eval.h), as jinja2 3.1
// defines them (jinja2/tests.py; range, namespace, dict) in ImmutableSandboxedEnvironment (range
// at most 100000 long), with transformers' raise_exception and strftime_now.
//
// Tests: boolean callable defined divisibleby eq equalto escaped even false filter float ge gt
// greaterthan in integer iterable le lessthan lower lt mapping ne none number odd sameas sequence
// string test true undefined upper.
#include <cmath>
#include <ctime>
#include <functional>
#include <unordered_map>

#include "text/jinja_eval.h"
#include "text/jinja_strings.h"

namespace ferry::text::jinja {
namespace {

using TestFn = std::function<bool(Renderer&, const Value&, Args&)>;

Value Required(const Args& a, size_t index, std::string_view name, std::string_view test) {
  const Value* v = a.Get(index, name);
  if (v == nullptr) Fail("TypeError", Cat(test, "() missing required argument '", name, "'"));
  return *v;
}

bool Mod2(Renderer& r, const Value& v, int want) {
  (void)r;
  if (!v.is_number()) Fail("TypeError", Cat("unsupported operand type(s) for %: '", TypeName(v), "' and 'int'"));
  if (v.is_int()) return ((v.i() % 2) + 2) % 2 == want;
  return std::fmod(std::fmod(v.f(), 2.0) + 2.0, 2.0) == want;
}

bool Cmp(const Value& v, Args& a, std::string_view op) {
  const Value other = Required(a, 0, "b", op);
  if (op == "==") return Equal(v, other);
  if (op == "!=") return !Equal(v, other);
  return Less(v, other, op);
}

const std::unordered_map<std::string, TestFn>& Tests() {
  static const auto* tests = new std::unordered_map<std::string, TestFn>{
      {"boolean", [](Renderer&, const Value& v, Args&) { return v.type() == Type::kBool; }},
      {"callable", [](Renderer&, const Value& v, Args&) {
         return v.is_undefined() || v.type() == Type::kCallable || v.type() == Type::kLoop;
       }},
      {"defined", [](Renderer&, const Value& v, Args&) { return !v.is_undefined(); }},
      {"divisibleby", [](Renderer&, const Value& v, Args& a) {
         const Value n = Required(a, 0, "num", "divisibleby");
         if (!v.is_number() || !n.is_number()) Fail("TypeError", "divisibleby needs numbers");
         if (v.is_int() && n.is_int()) {
           if (n.i() == 0) Fail("ZeroDivisionError", "integer modulo by zero");
           return v.i() % n.i() == 0;
         }
         if (n.f() == 0) Fail("ZeroDivisionError", "float modulo");
         return std::fmod(v.f(), n.f()) == 0;
       }},
      {"escaped", [](Renderer&, const Value&, Args&) { return false; }},
      {"even", [](Renderer& r, const Value& v, Args&) { return Mod2(r, v, 0); }},
      {"false", [](Renderer&, const Value& v, Args&) { return v.type() == Type::kBool && !v.b(); }},
      {"filter", [](Renderer&, const Value& v, Args&) { return v.is_string() && IsFilterName(v.s()); }},
      {"float", [](Renderer&, const Value& v, Args&) { return v.type() == Type::kFloat; }},
      {"in", [](Renderer&, const Value& v, Args& a) { return Contains(Required(a, 0, "seq", "in"), v); }},
      {"integer", [](Renderer&, const Value& v, Args&) { return v.type() == Type::kInt; }},
      {"iterable", [](Renderer&, const Value& v, Args&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() || v.type() == Type::kLoop;
       }},
      {"lower", [](Renderer&, const Value& v, Args&) { return PyIs("lower", Str(v)); }},
      {"mapping", [](Renderer&, const Value& v, Args&) { return v.is_dict(); }},
      {"none", [](Renderer&, const Value& v, Args&) { return v.is_none(); }},
      {"number", [](Renderer&, const Value& v, Args&) { return v.is_number(); }},
      {"odd", [](Renderer& r, const Value& v, Args&) { return Mod2(r, v, 1); }},
      {"sameas", [](Renderer&, const Value& v, Args& a) {
         const Value o = Required(a, 0, "other", "sameas");
         if (v.type() != o.type() || v.is_undefined()) return false;  // each undefined is its own object
         if (v.is_none() || v.is_number()) return Equal(v, o);
         return v.identity() == o.identity();
       }},
      {"sequence", [](Renderer&, const Value& v, Args&) {
         return v.is_undefined() || v.is_string() || v.is_dict() ||
                (v.is_list() && v.list().kind <= ListKind::kRange);
       }},
      {"string", [](Renderer&, const Value& v, Args&) { return v.is_string(); }},
      {"test", [](Renderer&, const Value& v, Args&) { return v.is_string() && IsTestName(v.s()); }},
      {"true", [](Renderer&, const Value& v, Args&) { return v.type() == Type::kBool && v.b(); }},
      {"undefined", [](Renderer&, const Value& v, Args&) { return v.is_undefined(); }},
      {"upper", [](Renderer&, const Value& v, Args&) { return PyIs("upper", Str(v)); }},
      {"eq", [](Renderer&, const Value& v, Args& a) { return Cmp(v, a, "=="); }},
      {"ne", [](Renderer&, const Value& v, Args& a) { return Cmp(v, a, "!="); }},
      {"lt", [](Renderer&, const Value& v, Args& a) { return Cmp(v, a, "<"); }},
      {"le", [](Renderer&, const Value& v, Args& a) { return Cmp(v, a, "<="); }},
      {"gt", [](Renderer&, const Value& v, Args& a) { return Cmp(v, a, ">"); }},
      {"ge", [](Renderer&, const Value& v, Args& a) { return Cmp(v, a, ">="); }},
  };
  return *tests;
}

std::string_view Canonical(std::string_view name) {  // jinja2's aliases
  if (name == "equalto" || name == "==") return "eq";
  if (name == "!=") return "ne";
  if (name == "greaterthan" || name == ">") return "gt";
  if (name == "lessthan" || name == "<") return "lt";
  if (name == ">=") return "ge";
  if (name == "<=") return "le";
  return name;
}

}  // namespace

bool IsTestName(std::string_view name) { return Tests().count(std::string(Canonical(name))) > 0; }

bool ApplyTest(Renderer& r, std::string_view name, const Value& subject, Args& args) {
  const std::string canonical(Canonical(name));
  const auto it = Tests().find(canonical);
  if (it == Tests().end()) Fail("TemplateRuntimeError", Cat("No test named '", name, "' found."));
  static const std::vector<std::string_view> kNone, kNum = {"num"}, kSeq = {"seq"}, kOther = {"other"}, kB = {"b"};
  const std::vector<std::string_view>& params = canonical == "divisibleby" ? kNum
                                                : canonical == "in"          ? kSeq
                                                : canonical == "sameas"      ? kOther
                                                : canonical.size() == 2 && (canonical == "eq" || canonical == "ne" ||
                                                                            canonical[0] == 'l' || canonical[0] == 'g')
                                                    ? kB
                                                    : kNone;
  CheckArity(Cat("test_", canonical), params, args);
  return it->second(r, subject, args);
}

bool IsGlobalName(std::string_view name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception" ||
         name == "strftime_now";
}

Value CallGlobal(Renderer& r, std::string_view name, Args& args) {
  if (name == "range") {
    if (!args.kw.empty()) Fail("TypeError", "range() takes no keyword arguments");
    if (args.pos.empty() || args.pos.size() > 3) Fail("TypeError", "range expected 1 to 3 arguments");
    for (const Value& v : args.pos) AsInt(v);
    const int64_t start = args.pos.size() == 1 ? 0 : args.pos[0].i();
    const int64_t stop = args.pos.size() == 1 ? args.pos[0].i() : args.pos[1].i();
    const int64_t step = args.pos.size() == 3 ? args.pos[2].i() : 1;
    if (step == 0) Fail("ValueError", "range() arg 3 must not be zero");
    const double n = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
    if (n > 100000) Fail("OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    r.Work(std::max<int64_t>(0, static_cast<int64_t>(n)));
    return Value::Range(start, stop, step);
  }
  if (name == "namespace" || name == "dict") {
    auto d = std::make_shared<DictObj>();
    for (const Value& init : args.pos) {
      if (init.is_undefined()) init.FailUndefined();  // dict() asks it for keys()
      if (init.is_dict()) {
        for (const auto& [k, v] : init.dict().items) d->Set(k, v);
      } else {
        for (const Value& pair : Iterate(init)) {
          const std::vector<Value> kv = Iterate(pair);
          if (kv.size() != 2) Fail("ValueError", "dictionary update sequence element has the wrong length");
          d->Set(kv[0], kv[1]);
        }
      }
    }
    for (const auto& [k, v] : args.kw) d->Set(Value::Str(k), v);
    if (name == "dict") return Value::Dict(std::move(d));
    auto ns = r.NewNamespace();
    ns->attrs = std::move(*d);
    return Value::Namespace(std::move(ns));
  }
  if (name == "raise_exception") {
    const Value* msg = args.Get(0, "message");
    throw Error{Cat("TemplateError: ", msg != nullptr ? Str(*msg) : ""), 0};
  }
  if (name == "strftime_now") {
    const Value* fmt = args.Get(0, "format");
    if (fmt == nullptr || !fmt->is_string()) Fail("TypeError", "strftime_now() needs a format string");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[512];
    const size_t n = std::strftime(buf, sizeof(buf), fmt->s().c_str(), &local);
    return r.NewStr(std::string(buf, n));
  }
  Fail("TypeError", Cat("'", name, "' is not callable"));
}

}  // namespace ferry::text::jinja
