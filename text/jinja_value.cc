#include "text/jinja_value.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_format.h"
#include "text/jinja_strings.h"

namespace ferry::text::jinja {
namespace {

bool IsHashable(const Value& v) {
  switch (v.type()) {
    case Type::kList:
      if (v.list().kind != ListKind::kTuple) return false;
      for (const Value& x : v.list().items) {
        if (!IsHashable(x)) return false;
      }
      return true;
    case Type::kDict:
    case Type::kNamespace:
    case Type::kLoop:
      return false;
    default:
      return true;
  }
}

void ReprString(std::string_view s, std::string* out) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = dq ? '"' : '\'';
  out->push_back(q);
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = NextCodePoint(s, &i);
    if (c == '\\' || c == static_cast<char32_t>(q)) {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out->append("\\t");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c < 0x20 || c == 0x7F) {
      absl::StrAppendFormat(out, "\\x%02x", static_cast<uint32_t>(c));
    } else if (c < 0x80 || IsPyPrintable(c)) {
      out->append(s.substr(at, i - at));
    } else if (c < 0x100) {
      absl::StrAppendFormat(out, "\\x%02x", static_cast<uint32_t>(c));
    } else if (c < 0x10000) {
      absl::StrAppendFormat(out, "\\u%04x", static_cast<uint32_t>(c));
    } else {
      absl::StrAppendFormat(out, "\\U%08x", static_cast<uint32_t>(c));
    }
  }
  out->push_back(q);
}

void ReprTo(const Value& v, std::string* out);

void ReprItems(const std::vector<Value>& items, std::string* out) {
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out->append(", ");
    ReprTo(items[k], out);
  }
}

void ReprDict(const DictObj& d, std::string* out) {
  out->push_back('{');
  for (size_t k = 0; k < d.items.size(); ++k) {
    if (k) out->append(", ");
    ReprTo(d.items[k].first, out);
    out->append(": ");
    ReprTo(d.items[k].second, out);
  }
  out->push_back('}');
}

void ReprTo(const Value& v, std::string* out) {
  NestingGuard guard;
  switch (v.type()) {
    case Type::kUndefined:
      out->append("Undefined");
      return;
    case Type::kString:
      ReprString(v.s(), out);
      return;
    case Type::kList: {
      const ListObj& l = v.list();
      switch (l.kind) {
        case ListKind::kList:
          out->push_back('[');
          ReprItems(l.items, out);
          out->push_back(']');
          return;
        case ListKind::kTuple:
          out->push_back('(');
          ReprItems(l.items, out);
          out->append(l.items.size() == 1 ? ",)" : ")");
          return;
        case ListKind::kRange:
          CatTo(out, "range(", l.start, ", ", l.stop);
          if (l.step != 1) CatTo(out, ", ", l.step);
          out->push_back(')');
          return;
        case ListKind::kDictItems:
        case ListKind::kDictKeys:
        case ListKind::kDictValues:
          out->append(l.kind == ListKind::kDictItems ? "dict_items([" : l.kind == ListKind::kDictKeys ? "dict_keys(["
                                                                                                      : "dict_values([");
          ReprItems(l.items, out);
          out->append("])");
          return;
      }
      return;
    }
    case Type::kDict:
      ReprDict(v.dict(), out);
      return;
    case Type::kNamespace: {
      // Python's dict repr prints a dict already being printed as {...}.
      static thread_local std::vector<const void*> open;
      for (const void* p : open) {
        if (p == v.identity()) {
          out->append("<Namespace {...}>");
          return;
        }
      }
      struct Open {  // pops even when printing an attribute fails
        explicit Open(const void* p) { open.push_back(p); }
        ~Open() { open.pop_back(); }
      } scope(v.identity());
      out->append("<Namespace ");
      ReprDict(v.ns().attrs, out);
      out->push_back('>');
      return;
    }
    default:
      out->append(Str(v));
  }
}

}  // namespace

thread_local int NestingGuard::depth_ = 0;

NestingGuard::NestingGuard() {
  if (++depth_ > kMaxNesting + 8) {
    --depth_;
    Fail("RecursionError", "maximum recursion depth exceeded");
  }
}

void Fail(std::string_view kind, std::string_view text) { throw Error{Cat(kind, ": ", text), 0}; }

Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.p_ = std::make_shared<std::string>(std::move(hint));
  return v;
}
Value Value::Unsafe(std::string message) {
  Value v = Undefined(std::move(message));
  v.b_ = true;
  return v;
}
Value Value::None() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.type_ = Type::kFloat;
  v.f_ = f;
  return v;
}
Value Value::Str(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.p_ = std::make_shared<std::string>(std::move(s));
  return v;
}
Value Value::List(std::vector<Value> items, ListKind kind) {
  auto l = std::make_shared<ListObj>();
  for (const Value& x : items) l->depth = std::max(l->depth, 1 + NestingDepth(x));
  if (l->depth > kMaxNesting) Fail("RecursionError", Cat("lists and dicts nest deeper than ", kMaxNesting));
  l->items = std::move(items);
  l->kind = kind;
  Value v;
  v.type_ = Type::kList;
  v.p_ = std::move(l);
  return v;
}
Value Value::Range(int64_t start, int64_t stop, int64_t step) {
  std::vector<Value> items;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) items.push_back(Int(k));
  Value v = List(std::move(items), ListKind::kRange);
  auto* l = static_cast<ListObj*>(v.p_.get());
  l->start = start, l->stop = stop, l->step = step;
  return v;
}
Value Value::Boxed(Type type, std::shared_ptr<void> p) {
  Value v;
  v.type_ = type;
  v.p_ = std::move(p);
  return v;
}
Value Value::Dict(std::shared_ptr<const DictObj> dict) {
  return Boxed(Type::kDict, std::const_pointer_cast<DictObj>(std::move(dict)));
}
Value Value::Namespace(std::shared_ptr<NamespaceObj> ns) { return Boxed(Type::kNamespace, std::move(ns)); }
Value Value::Callable(std::shared_ptr<const CallableObj> fn) {
  return Boxed(Type::kCallable, std::const_pointer_cast<CallableObj>(std::move(fn)));
}
Value Value::Loop(std::shared_ptr<LoopObj> loop) { return Boxed(Type::kLoop, std::move(loop)); }

void Value::FailUndefined() const {
  const std::string* hint = static_cast<const std::string*>(p_.get());
  Fail(b_ ? "SecurityError" : "UndefinedError", hint != nullptr ? *hint : "undefined value");
}

int NestingDepth(const Value& v) {
  switch (v.type()) {
    case Type::kList: return v.list().depth;
    case Type::kDict: return v.dict().depth;
    case Type::kNamespace: return 1;
    default: return 0;
  }
}

const Value* DictObj::Find(const Value& key) const {
  if (key.is_string()) return Find(std::string_view(key.s()));
  for (const auto& [k, v] : items) {
    if (Equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictObj::Find(std::string_view key) const {
  if (index_ != nullptr) {
    const auto it = index_->find(key);
    return it == index_->end() ? nullptr : &items[it->second].second;
  }
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.s() == key) return &v;
  }
  return nullptr;
}

void DictObj::Append(std::string key, Value value) {
  depth = std::max(depth, 1 + NestingDepth(value));
  if (depth > kMaxNesting) Fail("RecursionError", Cat("lists and dicts nest deeper than ", kMaxNesting));
  items.emplace_back(Value::Str(std::move(key)), std::move(value));
}

void DictObj::Index() {
  if (items.size() <= 16) return;
  auto index = std::make_shared<std::unordered_map<std::string_view, size_t>>();
  for (size_t k = 0; k < items.size(); ++k) {
    if (items[k].first.is_string()) index->emplace(items[k].first.s(), k);  // the first of equal keys wins
  }
  index_ = std::move(index);
}

void DictObj::Set(Value key, Value value) {
  index_.reset();
  if (!IsHashable(key)) Fail("TypeError", Cat("unhashable type: '", TypeName(key), "'"));
  depth = std::max({depth, 1 + NestingDepth(key), 1 + NestingDepth(value)});
  if (depth > kMaxNesting) Fail("RecursionError", Cat("lists and dicts nest deeper than ", kMaxNesting));
  for (auto& [k, v] : items) {
    if (Equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

std::string TypeName(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined: return "Undefined";
    case Type::kNone: return "NoneType";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kString: return "str";
    case Type::kList:
      switch (v.list().kind) {
        case ListKind::kList: return "list";
        case ListKind::kTuple: return "tuple";
        case ListKind::kRange: return "range";
        case ListKind::kDictItems: return "dict_items";
        case ListKind::kDictKeys: return "dict_keys";
        case ListKind::kDictValues: return "dict_values";
      }
      return "list";
    case Type::kDict: return "dict";
    case Type::kNamespace: return "Namespace";
    case Type::kCallable:
      return v.fn().kind == CallableKind::kMacro ? "Macro"
             : v.fn().kind == CallableKind::kMethod ? "builtin_function_or_method"
                                                    : "function";
    case Type::kLoop: return "LoopContext";
  }
  return "object";
}

std::string ObjectTypeRepr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.type() == Type::kNamespace) return "jinja2.utils.Namespace object";
  if (v.type() == Type::kLoop) return "jinja2.runtime.LoopContext object";
  if (v.type() == Type::kCallable && v.fn().kind == CallableKind::kMacro) return "jinja2.runtime.Macro object";
  return TypeName(v) + " object";
}

bool Truthy(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined:
    case Type::kNone: return false;
    case Type::kBool: return v.b();
    case Type::kInt: return v.i() != 0;
    case Type::kFloat: return v.f() != 0.0;
    case Type::kString: return !v.s().empty();
    case Type::kList: return !v.list().items.empty();
    case Type::kDict: return !v.dict().items.empty();
    default: return true;
  }
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);  // shortest round trip
  std::string_view s(buf, r.ptr - buf);
  std::string out;
  if (s[0] == '-') {
    out.push_back('-');
    s.remove_prefix(1);
  }
  const size_t e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  int exp = 0;
  std::from_chars(s.data() + e + 1 + (s[e + 1] == '+'), s.data() + s.size(), exp);
  const int decpt = exp + 1;  // digits d1 d2 ... mean 0.d1d2... * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out.append("0.").append(-decpt, '0').append(digits);
    } else if (decpt >= n) {
      out.append(digits).append(decpt - n, '0').append(".0");
    } else {
      out.append(digits, 0, decpt).append(".").append(digits, decpt);
    }
  } else {
    out += digits.substr(0, 1);
    if (n > 1) {
      out.push_back('.');
      out.append(digits, 1);
    }
    absl::StrAppendFormat(&out, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  }
  return out;
}

std::string Str(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined: return "";
    case Type::kNone: return "None";
    case Type::kBool: return v.b() ? "True" : "False";
    case Type::kInt: return Cat(v.i());
    case Type::kFloat: return FloatRepr(v.f());
    case Type::kString: return v.s();
    case Type::kCallable:
      switch (v.fn().kind) {
        case CallableKind::kMacro:
          return v.fn().name.empty() ? "<Macro anonymous>" : Cat("<Macro '", v.fn().name, "'>");
        case CallableKind::kMethod: return Cat("<built-in method ", v.fn().name, ">");
        case CallableKind::kGlobal:
          if (v.fn().name == "namespace") return "<class 'jinja2.utils.Namespace'>";
          if (v.fn().name == "range" || v.fn().name == "dict") return Cat("<class '", v.fn().name, "'>");
          return Cat("<function ", v.fn().name, ">");
      }
      return "";
    case Type::kLoop:
      return Cat("<LoopContext ", v.loop().index0 + 1, "/", v.loop().items.size(), ">");
    default: {
      std::string out;
      ReprTo(v, &out);
      return out;
    }
  }
}

std::string Repr(const Value& v) {
  std::string out;
  ReprTo(v, &out);
  return out;
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.i() == b.i();
    return a.f() == b.f();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Type::kUndefined:
    case Type::kNone: return true;
    case Type::kString: return a.s() == b.s();
    case Type::kList: {
      NestingGuard guard;
      const ListObj &x = a.list(), &y = b.list();
      const bool seq_a = x.kind == ListKind::kList || x.kind == ListKind::kTuple;
      if (x.kind != y.kind && !(x.kind == ListKind::kRange && y.kind == ListKind::kRange)) return false;
      if (!seq_a && x.kind != ListKind::kRange && x.kind != y.kind) return false;
      if (x.items.size() != y.items.size()) return false;
      for (size_t k = 0; k < x.items.size(); ++k) {
        if (!Equal(x.items[k], y.items[k])) return false;
      }
      return true;
    }
    case Type::kDict: {
      NestingGuard guard;
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* w = b.dict().Find(k);
        if (w == nullptr || !Equal(v, *w)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

bool Less(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) a.FailUndefined();
  if (b.is_undefined()) b.FailUndefined();
  const auto cmp = [&](auto x, auto y) {
    return op == "<" ? x < y : op == "<=" ? x <= y : op == ">" ? x > y : x >= y;
  };
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return cmp(a.i(), b.i());
    return cmp(a.f(), b.f());
  }
  if (a.is_string() && b.is_string()) return cmp(a.s().compare(b.s()), 0);
  if (a.is_list() && b.is_list() && a.list().kind == b.list().kind &&
      (a.list().kind == ListKind::kList || a.list().kind == ListKind::kTuple)) {
    NestingGuard guard;
    const auto &x = a.list().items, &y = b.list().items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (!Equal(x[k], y[k])) return Less(x[k], y[k], op);
    }
    return cmp(x.size(), y.size());
  }
  Fail("TypeError", Cat("'", op, "' not supported between instances of '", TypeName(a), "' and '",
                                 TypeName(b), "'"));
}

bool Contains(const Value& container, const Value& x) {
  switch (container.type()) {
    case Type::kUndefined: return false;
    case Type::kString:
      if (!x.is_string()) {
        Fail("TypeError", Cat("'in <string>' requires string as left operand, not ", TypeName(x)));
      }
      return container.s().find(x.s()) != std::string::npos;
    case Type::kList:
      for (const Value& y : container.list().items) {
        if (Equal(y, x)) return true;
      }
      return false;
    case Type::kDict:
      if (!IsHashable(x)) Fail("TypeError", Cat("unhashable type: '", TypeName(x), "'"));
      return container.dict().Find(x) != nullptr;
    default: Fail("TypeError", Cat("argument of type '", TypeName(container), "' is not iterable"));
  }
}

std::vector<Value> Iterate(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined: return {};
    case Type::kList: return v.list().items;
    case Type::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().items.size());
      for (const auto& kv : v.dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Type::kString: {
      std::vector<Value> chars;
      const std::string& s = v.s();
      for (size_t i = 0; i < s.size();) {
        const size_t at = i;
        NextCodePoint(s, &i);
        chars.push_back(Value::Str(s.substr(at, i - at)));
      }
      return chars;
    }
    default: Fail("TypeError", Cat("'", TypeName(v), "' object is not iterable"));
  }
}

int64_t Length(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined: return 0;
    case Type::kString: return CodePointCount(v.s());
    case Type::kList: return static_cast<int64_t>(v.list().items.size());
    case Type::kDict: return static_cast<int64_t>(v.dict().items.size());
    default: Fail("TypeError", Cat("object of type '", TypeName(v), "' has no len()"));
  }
}

int64_t AsInt(const Value& v) {
  if (v.is_undefined()) v.FailUndefined();
  if (!v.is_int()) Fail("TypeError", Cat("'", TypeName(v), "' object cannot be interpreted as an integer"));
  return v.i();
}

}  // namespace ferry::text::jinja
