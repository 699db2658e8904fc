// The Jinja engine's filters (declared in text/jinja_eval.h), each as jinja2 3.1 defines it
// (jinja2/filters.py) with transformers' tojson; tests and globals are in text/jinja_tests.cc. Filters that return a
// generator in jinja2 (map, select, reject, selectattr, rejectattr, unique, batch, items, reverse)
// return a list here: iterating, joining or |list-ing them is the same; printing one directly
// differs (jinja2 prints "<generator object ...>").
//
// Filters: abs attr batch capitalize center count d default dictsort e escape first float format
// indent int items join last length list lower map max min reject rejectattr replace reverse round
// safe select selectattr sort string sum title tojson trim unique upper wordcount.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <unordered_map>

#include "text/jinja_eval.h"
#include "text/jinja_strings.h"

namespace ferry::text::jinja {
namespace {

using FilterFn = std::function<Value(Renderer&, const Value&, Args&)>;

Value Arg(const Args& a, size_t index, std::string_view name, Value dflt) {
  const Value* v = a.Get(index, name);
  return v != nullptr ? *v : dflt;
}
bool BoolArg(const Args& a, size_t index, std::string_view name, bool dflt) {
  const Value* v = a.Get(index, name);
  return v != nullptr ? Truthy(*v) : dflt;
}
Value Required(const Args& a, size_t index, std::string_view name, std::string_view filter) {
  const Value* v = a.Get(index, name);
  if (v == nullptr) Fail("TypeError", Cat(filter, "() missing required argument '", name, "'"));
  return *v;
}
std::string StrArg(const Args& a, size_t index, std::string_view name, std::string_view filter) {
  return Str(Required(a, index, name, filter));
}

// jinja2's make_attrgetter: "a.b.0" looked up part by part (digits as integers), item first.
Value GetPath(Renderer& r, Value item, const Value& attribute) {
  if (!attribute.is_string()) return r.GetItem(item, attribute);
  static const std::string kDot = ".";
  for (const std::string& part : PySplit(attribute.s(), &kDot, -1, false)) {
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    item = r.GetItem(item, digits ? Value::Int(std::stoll(part)) : Value::Str(part));
  }
  return item;
}

Value LowerIfString(const Value& v) { return v.is_string() ? Value::Str(PyLower(v.s())) : v; }

// The sort key of `item` for sort/min/max/unique: the attribute (if any), lower-cased unless
// case-sensitive.
Value SortKey(Renderer& r, const Value& item, const Value& attribute, bool case_sensitive) {
  Value key = attribute.is_none() || attribute.is_undefined() ? item : GetPath(r, item, attribute);
  return case_sensitive ? key : LowerIfString(key);
}

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

double ToFloat(const Value& v, bool* ok) {
  *ok = true;
  if (v.is_undefined()) v.FailUndefined();
  if (v.is_number()) return v.f();
  if (v.is_string()) {
    std::string s = PyStrip(v.s(), nullptr, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    bool neg = false;
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) neg = s[0] == '-', s.erase(0, 1);
    double f = 0;
    const auto res = std::from_chars(s.data(), s.data() + s.size(), f);
    if (!s.empty() && res.ec == std::errc() && res.ptr == s.data() + s.size()) return neg ? -f : f;
  }
  *ok = false;
  return 0;
}

Value SelectOrReject(Renderer& r, const Value& v, Args& a, bool select, bool by_attr) {
  std::vector<Value> out;
  if (!Truthy(v)) return Value::List({});  // jinja2 reads its arguments only for a non-empty value
  size_t off = 0;
  Value attr;
  if (by_attr) {
    if (a.pos.empty()) Fail("FilterArgumentError", "Missing parameter for attribute name");
    attr = a.pos[0];
    off = 1;
  }
  for (const Value& item : Iterate(v)) {
    const Value x = by_attr ? GetPath(r, item, attr) : item;
    bool keep;
    if (a.pos.size() > off) {
      Args targs;
      targs.pos.assign(a.pos.begin() + off + 1, a.pos.end());
      targs.kw = a.kw;
      keep = r.ApplyTestNamed(Str(a.pos[off]), x, std::move(targs));
    } else {
      keep = Truthy(x);
    }
    if (keep == select) out.push_back(item);
  }
  r.Work(static_cast<int64_t>(out.size()));
  return Value::List(std::move(out));
}

// sorted(items, key, reverse). The sort filter's key (jinja2's make_multi_attrgetter) is a list of
// the comma-separated attributes' values (the item itself without one), so keys compare as lists
// do: equal parts are skipped by ==, never compared by <. dictsort's key is a plain value.
Value Sorted(Renderer& r, std::vector<Value> items, const Value& attribute, bool case_sensitive, bool reverse,
             bool multi) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& x : items) {
    Value key;
    if (!multi) {
      key = SortKey(r, x, attribute, case_sensitive);
    } else {
      std::vector<Value> parts;
      if (!attribute.is_string()) {
        parts.push_back(SortKey(r, x, attribute, case_sensitive));
      } else {
        static const std::string kComma = ",";
        for (std::string& part : PySplit(attribute.s(), &kComma, -1, false)) {
          parts.push_back(SortKey(r, x, Value::Str(std::move(part)), case_sensitive));
        }
      }
      key = Value::List(std::move(parts), ListKind::kTuple);
    }
    keyed.emplace_back(std::move(key), std::move(x));
  }
  const auto less = [](const auto& p, const auto& q) { return Less(p.first, q.first, "<"); };
  if (reverse) {  // Python keeps equal elements in their order when reverse=True too
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& p, const auto& q) { return less(q, p); });
  } else {
    std::stable_sort(keyed.begin(), keyed.end(), less);
  }
  std::vector<Value> out;
  for (auto& [k, x] : keyed) out.push_back(std::move(x));
  r.Work(static_cast<int64_t>(out.size()));
  return Value::List(std::move(out));
}

Value MinMax(Renderer& r, const Value& v, Args& a, bool max) {
  const std::vector<Value> items = Iterate(v);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  const Value attribute = Arg(a, 1, "attribute", Value::None());
  const bool cs = BoolArg(a, 0, "case_sensitive", false);
  size_t best = 0;
  Value best_key = SortKey(r, items[0], attribute, cs);
  for (size_t k = 1; k < items.size(); ++k) {
    Value key = SortKey(r, items[k], attribute, cs);
    if (Less(key, best_key, max ? ">" : "<")) best = k, best_key = std::move(key);
  }
  return items[best];
}

Value Round(const Value& v, Args& a) {
  if (!v.is_number()) Fail("TypeError", Cat("type ", TypeName(v), " doesn't define __round__ method"));
  const int64_t precision = AsInt(Arg(a, 0, "precision", Value::Int(0)));
  const std::string method = Str(Arg(a, 1, "method", Value::Str("common")));
  if (method != "common" && method != "ceil" && method != "floor") {
    Fail("FilterArgumentError", "method must be common, ceil or floor");
  }
  if (method == "common") {
    if (v.is_int()) return Value::Int(v.i());  // round(int, n) is the int for n >= 0
    if (!std::isfinite(v.f()) || precision > 300) return Value::Float(v.f());
    if (precision < 0) {
      const double p = std::pow(10.0, static_cast<double>(-precision));
      return Value::Float(std::nearbyint(v.f() / p) * p);
    }
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), v.f());  // exact, ties to even
    return Value::Float(std::strtod(buf, nullptr));
  }
  const double p = std::pow(10.0, static_cast<double>(precision));
  return Value::Float((method == "ceil" ? std::ceil(v.f() * p) : std::floor(v.f() * p)) / p);
}

Value Indent(Renderer& r, const Value& v, Args& a) {
  if (v.is_undefined()) v.FailUndefined();  // jinja2 appends "\n" to it, which only a string takes
  if (!v.is_string()) Fail("TypeError", Cat("unsupported operand type(s) for +=: '", TypeName(v), "' and 'str'"));
  const Value width = Arg(a, 0, "width", Value::Int(4));
  const std::string indention = width.is_string() ? width.s() : std::string(std::max<int64_t>(0, AsInt(width)), ' ');
  const bool first = BoolArg(a, 1, "first", false), blank = BoolArg(a, 2, "blank", false);
  std::vector<std::string> lines = PySplitLines(Str(v) + "\n");
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k > 0) {
      out += "\n";
      if (blank || !lines[k].empty()) out += indention;
    }
    out += lines[k];
  }
  if (first) out = indention + out;
  return r.NewStr(std::move(out));
}

Value ToJsonFilter(Renderer& r, const Value& v, Args& a) {
  JsonOptions o;
  o.ensure_ascii = BoolArg(a, 0, "ensure_ascii", false);
  const Value indent = Arg(a, 1, "indent", Value::None());
  if (!indent.is_none()) {
    o.indent_set = true;
    o.indent = indent.is_string() ? indent.s() : std::string(std::max<int64_t>(0, AsInt(indent)), ' ');
    o.item_sep = ",";
  }
  const Value seps = Arg(a, 2, "separators", Value::None());
  if (!seps.is_none()) {
    const std::vector<Value> parts = Iterate(seps);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string()) {
      Fail("ValueError", "separators must be a pair of strings");
    }
    o.item_sep = parts[0].s();
    o.key_sep = parts[1].s();
  }
  o.sort_keys = BoolArg(a, 3, "sort_keys", false);
  return r.NewStr(ToJson(v, o));
}

const std::unordered_map<std::string, FilterFn>& Filters() {
  static const auto* filters = new std::unordered_map<std::string, FilterFn>{
      {"abs", [](Renderer&, const Value& v, Args&) {
         if (v.type() == Type::kFloat) return Value::Float(std::fabs(v.f()));
         if (!v.is_int()) Fail("TypeError", Cat("bad operand type for abs(): '", TypeName(v), "'"));
         if (v.i() == INT64_MIN) Fail("OverflowError", "integer result beyond int64");
         return Value::Int(std::llabs(v.i()));
       }},
      {"attr", [](Renderer& r, const Value& v, Args& a) {
         const std::string name = StrArg(a, 0, "name", "attr");
         if (v.is_dict() && LookupMethod(v, name) == MethodLookup::kNone) {
           return Value::Undefined(Cat("'dict object' has no attribute '", name, "'"));
         }
         return r.GetAttr(v, name);
       }},
      {"batch", [](Renderer& r, const Value& v, Args& a) {
         const int64_t n = AsInt(Required(a, 0, "linecount", "batch"));
         if (n <= 0) Fail("ValueError", "batch linecount must be positive");
         const Value fill = Arg(a, 1, "fill_with", Value::None());
         std::vector<Value> out, row;
         for (Value& x : Iterate(v)) {
           if (static_cast<int64_t>(row.size()) == n) out.push_back(Value::List(std::move(row))), row.clear();
           row.push_back(std::move(x));
         }
         if (!row.empty()) {
           while (!fill.is_none() && static_cast<int64_t>(row.size()) < n) row.push_back(fill);
           out.push_back(Value::List(std::move(row)));
         }
         r.Work(static_cast<int64_t>(out.size()));
         return Value::List(std::move(out));
       }},
      {"capitalize", [](Renderer& r, const Value& v, Args&) { return r.NewStr(PyCapitalize(Str(v))); }},
      {"center", [](Renderer& r, const Value& v, Args& a) {
         const std::string s = Str(v);
         const int64_t width = AsInt(Arg(a, 0, "width", Value::Int(80))), len = CodePointCount(s);
         if (width <= len) return Value::Str(s);
         r.CheckSize(width);
         const int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
         return r.NewStr(std::string(left, ' ') + s + std::string(marg - left, ' '));
       }},
      {"count", [](Renderer&, const Value& v, Args&) { return Value::Int(Length(v)); }},
      {"default", [](Renderer&, const Value& v, Args& a) {
         if (v.is_undefined() || (BoolArg(a, 1, "boolean", false) && !Truthy(v))) {
           return Arg(a, 0, "default_value", Value::Str(""));
         }
         return v;
       }},
      {"dictsort", [](Renderer& r, const Value& v, Args& a) {
         if (v.is_undefined()) v.FailUndefined();
         if (!v.is_dict()) Fail("AttributeError", Cat("'", TypeName(v), "' object has no attribute 'items'"));
         const bool cs = BoolArg(a, 0, "case_sensitive", false);
         const bool reverse = AsInt(Arg(a, 2, "reverse", Value::Bool(false))) != 0;
         const std::string by = Str(Arg(a, 1, "by", Value::Str("key")));
         if (by != "key" && by != "value") {
           Fail("FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
         }
         std::vector<Value> pairs;
         for (const auto& [k, x] : v.dict().items) pairs.push_back(Value::List({k, x}, ListKind::kTuple));
         return Sorted(r, std::move(pairs), Value::Int(by == "key" ? 0 : 1), cs, reverse, /*multi=*/false);
       }},
      {"escape", [](Renderer& r, const Value& v, Args&) { return r.NewStr(Escape(Str(v))); }},
      {"first", [](Renderer&, const Value& v, Args&) {
         const std::vector<Value> items = Iterate(v);
         return items.empty() ? Value::Undefined("No first item, sequence was empty.") : items.front();
       }},
      {"float", [](Renderer&, const Value& v, Args& a) {
         bool ok = false;
         const double f = ToFloat(v, &ok);
         return ok ? Value::Float(f) : Arg(a, 0, "default", Value::Float(0.0));
       }},
      {"format", [](Renderer& r, const Value& v, Args& a) {
         if (!a.kw.empty()) {
           auto d = std::make_shared<DictObj>();
           for (const auto& [k, x] : a.kw) d->Set(Value::Str(k), x);
           return PercentFormat(r, Str(v), Value::Dict(std::move(d)));
         }
         return PercentFormat(r, Str(v), Value::List(a.pos, ListKind::kTuple));
       }},
      {"indent", Indent},
      {"int", [](Renderer&, const Value& v, Args& a) {
         int64_t i = 0;
         if (v.is_undefined()) v.FailUndefined();
         const int64_t base = AsInt(Arg(a, 1, "base", Value::Int(10)));
         if (v.is_string() && base != 10) {
           std::string s = PyStrip(v.s(), nullptr, true, true);
           if (base == 16 && (s.rfind("0x", 0) == 0 || s.rfind("0X", 0) == 0)) s.erase(0, 2);
           if (base == 8 && (s.rfind("0o", 0) == 0 || s.rfind("0O", 0) == 0)) s.erase(0, 2);
           if (base == 2 && (s.rfind("0b", 0) == 0 || s.rfind("0B", 0) == 0)) s.erase(0, 2);
           const auto res = std::from_chars(s.data(), s.data() + s.size(), i, static_cast<int>(base));
           if (!s.empty() && res.ec == std::errc() && res.ptr == s.data() + s.size()) return Value::Int(i);
         } else if (ToInt(v, &i)) {
           return Value::Int(i);
         }
         bool ok = false;
         const double f = ToFloat(v, &ok);  // "42.23"|int is 42
         if (ok && std::isfinite(f) && std::fabs(f) < 9.2e18) return Value::Int(static_cast<int64_t>(f));
         return Arg(a, 0, "default", Value::Int(0));
       }},
      {"items", [](Renderer& r, const Value& v, Args&) {
         if (v.is_undefined()) return Value::List({});
         if (!v.is_dict()) Fail("TypeError", "Can only get item pairs from a mapping.");
         std::vector<Value> pairs;
         for (const auto& [k, x] : v.dict().items) pairs.push_back(Value::List({k, x}, ListKind::kTuple));
         r.Work(static_cast<int64_t>(pairs.size()));
         return Value::List(std::move(pairs));
       }},
      {"join", [](Renderer& r, const Value& v, Args& a) {
         const std::string sep = Str(Arg(a, 0, "d", Value::Str("")));
         const Value attribute = Arg(a, 1, "attribute", Value::None());
         std::string out;
         bool first = true;
         for (const Value& x : Iterate(v)) {
           if (!first) out += sep;
           first = false;
           const Value item = attribute.is_none() ? x : GetPath(r, x, attribute);
           out += item.is_string() ? item.s() : Str(item);
           r.CheckSize(static_cast<int64_t>(out.size()));
         }
         return r.NewStr(std::move(out));
       }},
      {"last", [](Renderer&, const Value& v, Args&) {
         const std::vector<Value> items = Iterate(v);
         return items.empty() ? Value::Undefined("No last item, sequence was empty.") : items.back();
       }},
      {"length", [](Renderer&, const Value& v, Args&) { return Value::Int(Length(v)); }},
      {"list", [](Renderer& r, const Value& v, Args&) {
         std::vector<Value> items = Iterate(v);
         r.Work(static_cast<int64_t>(items.size()));
         return Value::List(std::move(items));
       }},
      {"lower", [](Renderer& r, const Value& v, Args&) { return r.NewStr(PyLower(Str(v))); }},
      {"map", [](Renderer& r, const Value& v, Args& a) {
         std::vector<Value> out;
         if (!Truthy(v)) return Value::List({});
         const Value* attribute = a.pos.empty() ? a.Get(99, "attribute") : nullptr;
         for (const Value& x : Iterate(v)) {
           if (attribute != nullptr) {
             Value y = GetPath(r, x, *attribute);
             const Value* dflt = a.Get(99, "default");
             if (y.is_undefined() && dflt != nullptr && !dflt->is_none()) y = *dflt;
             out.push_back(std::move(y));
           } else {
             if (a.pos.empty()) Fail("FilterArgumentError", "map requires a filter argument");
             Args fargs;
             fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
             fargs.kw = a.kw;
             out.push_back(r.ApplyFilterNamed(Str(a.pos[0]), x, std::move(fargs)));
           }
         }
         r.Work(static_cast<int64_t>(out.size()));
         return Value::List(std::move(out));
       }},
      {"max", [](Renderer& r, const Value& v, Args& a) { return MinMax(r, v, a, true); }},
      {"min", [](Renderer& r, const Value& v, Args& a) { return MinMax(r, v, a, false); }},
      {"reject", [](Renderer& r, const Value& v, Args& a) { return SelectOrReject(r, v, a, false, false); }},
      {"rejectattr", [](Renderer& r, const Value& v, Args& a) { return SelectOrReject(r, v, a, false, true); }},
      {"replace", [](Renderer& r, const Value& v, Args& a) {
         const std::string s = Str(v), old_text = StrArg(a, 0, "old", "replace");
         const std::string new_text = StrArg(a, 1, "new", "replace");
         const Value count = Arg(a, 2, "count", Value::None());
         const int64_t n = count.is_none() ? -1 : AsInt(count);
         const int64_t hits = old_text.empty() ? CodePointCount(s) + 1 : PyCount(s, old_text);
         r.CheckSize(static_cast<int64_t>(s.size()) +
                     std::min(hits, n < 0 ? hits : n) * static_cast<int64_t>(new_text.size()));
         return r.NewStr(PyReplace(s, old_text, new_text, n));
       }},
      {"reverse", [](Renderer& r, const Value& v, Args&) {
         if (v.is_string()) {
           std::u32string u = ToU32(v.s());
           std::reverse(u.begin(), u.end());
           return r.NewStr(FromU32(u));
         }
         std::vector<Value> items = Iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::List(std::move(items));
       }},
      {"round", [](Renderer&, const Value& v, Args& a) { return Round(v, a); }},
      {"safe", [](Renderer& r, const Value& v, Args&) { return v.is_string() ? v : r.NewStr(Str(v)); }},
      {"select", [](Renderer& r, const Value& v, Args& a) { return SelectOrReject(r, v, a, true, false); }},
      {"selectattr", [](Renderer& r, const Value& v, Args& a) { return SelectOrReject(r, v, a, true, true); }},
      {"sort", [](Renderer& r, const Value& v, Args& a) {
         return Sorted(r, Iterate(v), Arg(a, 2, "attribute", Value::None()), BoolArg(a, 1, "case_sensitive", false),
                       AsInt(Arg(a, 0, "reverse", Value::Bool(false))) != 0,  // sorted() takes an int
                       /*multi=*/true);
       }},
      {"string", [](Renderer& r, const Value& v, Args&) { return v.is_string() ? v : r.NewStr(Str(v)); }},
      {"sum", [](Renderer& r, const Value& v, Args& a) {
         const Value attribute = Arg(a, 0, "attribute", Value::None());
         Value total = Arg(a, 1, "start", Value::Int(0));
         for (const Value& x : Iterate(v)) {
           const Value y = attribute.is_none() ? x : GetPath(r, x, attribute);
           if (!total.is_number() || !y.is_number()) {
             Fail("TypeError", Cat("unsupported operand type(s) for +: '", TypeName(total), "' and '", TypeName(y), "'"));
           }
           total = total.is_int() && y.is_int() ? Value::Int(total.i() + y.i()) : Value::Float(total.f() + y.f());
         }
         return total;
       }},
      {"title", [](Renderer& r, const Value& v, Args&) {  // jinja2's own: words start after - space ( { [ <
         const std::string s = Str(v);
         std::string out;
         bool word_start = true;
         for (size_t i = 0; i < s.size();) {
           const size_t at = i;
           const char32_t c = NextCodePoint(s, &i);
           const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c);
           const std::string_view one = std::string_view(s).substr(at, i - at);
           out += sep ? std::string(one) : word_start ? PyUpper(one) : PyLower(one);
           word_start = sep;
         }
         return r.NewStr(std::move(out));
       }},
      {"tojson", ToJsonFilter},
      {"trim", [](Renderer& r, const Value& v, Args& a) {
         const Value chars = Arg(a, 0, "chars", Value::None());
         if (chars.is_none()) return r.NewStr(PyStrip(Str(v), nullptr, true, true));
         const std::u32string set = ToU32(Str(chars));
         return r.NewStr(PyStrip(Str(v), &set, true, true));
       }},
      {"unique", [](Renderer& r, const Value& v, Args& a) {
         const bool cs = BoolArg(a, 0, "case_sensitive", false);
         const Value attribute = Arg(a, 1, "attribute", Value::None());
         std::vector<Value> out, seen;
         for (const Value& x : Iterate(v)) {
           const Value key = SortKey(r, x, attribute, cs);
           if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, key); })) {
             seen.push_back(key);
             out.push_back(x);
           }
           r.Work(static_cast<int64_t>(seen.size()));
         }
         return Value::List(std::move(out));
       }},
      {"upper", [](Renderer& r, const Value& v, Args&) { return r.NewStr(PyUpper(Str(v))); }},
      {"wordcount", [](Renderer&, const Value& v, Args&) {
         const std::string s = Str(v);
         int64_t n = 0;
         bool in_word = false;
         for (size_t i = 0; i < s.size();) {
           const char32_t c = NextCodePoint(s, &i);
           std::string one;
           AppendUtf8(c, &one);
           const bool w = c == '_' || PyIs("alnum", one);
           n += w && !in_word;
           in_word = w;
         }
         return Value::Int(n);
       }},
  };
  return *filters;
}

// Each filter's parameters after the value, as jinja2 declares them.
const std::unordered_map<std::string, std::vector<std::string_view>>& FilterParams() {
  static const auto* params = new std::unordered_map<std::string, std::vector<std::string_view>>{
      {"abs", {}},
      {"attr", {"name"}},
      {"batch", {"linecount", "fill_with"}},
      {"capitalize", {}},
      {"center", {"width"}},
      {"count", {}},
      {"default", {"default_value", "boolean"}},
      {"dictsort", {"case_sensitive", "by", "reverse"}},
      {"escape", {}},
      {"first", {}},
      {"float", {"default"}},
      {"format", {"*"}},
      {"indent", {"width", "first", "blank"}},
      {"int", {"default", "base"}},
      {"items", {}},
      {"join", {"d", "attribute"}},
      {"last", {}},
      {"length", {}},
      {"list", {}},
      {"lower", {}},
      {"map", {"*"}},
      {"max", {"case_sensitive", "attribute"}},
      {"min", {"case_sensitive", "attribute"}},
      {"reject", {"*"}},
      {"rejectattr", {"*"}},
      {"replace", {"old", "new", "count"}},
      {"reverse", {}},
      {"round", {"precision", "method"}},
      {"safe", {}},
      {"select", {"*"}},
      {"selectattr", {"*"}},
      {"sort", {"reverse", "case_sensitive", "attribute"}},
      {"string", {}},
      {"sum", {"attribute", "start"}},
      {"title", {}},
      {"tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}},
      {"trim", {"chars"}},
      {"unique", {"case_sensitive", "attribute"}},
      {"upper", {}},
      {"wordcount", {}},
  };
  return *params;
}

std::string_view Canonical(std::string_view name) {  // jinja2's aliases
  if (name == "d") return "default";
  if (name == "e") return "escape";
  return name;
}

}  // namespace

bool IsFilterName(std::string_view name) { return Filters().count(std::string(Canonical(name))) > 0; }

Value ApplyFilter(Renderer& r, std::string_view name, Value subject, Args& args) {
  const std::string canonical(Canonical(name));
  const auto it = Filters().find(canonical);
  if (it == Filters().end()) Fail("TemplateRuntimeError", Cat("No filter named '", name, "' found."));
  CheckArity(Cat("do_", canonical), FilterParams().at(canonical), args);
  return it->second(r, subject, args);
}

void CheckArity(std::string_view function, const std::vector<std::string_view>& params, const Args& args) {
  if (!params.empty() && params[0] == "*") return;
  if (args.pos.size() > params.size()) {
    Fail("TypeError", Cat(function, "() takes ", params.size() + 1, " positional argument(s) but ",
                          args.pos.size() + 1, " were given"));
  }
  for (const auto& [k, v] : args.kw) {
    const auto p = std::find(params.begin(), params.end(), k);
    if (p == params.end()) Fail("TypeError", Cat(function, "() got an unexpected keyword argument '", k, "'"));
    if (static_cast<size_t>(p - params.begin()) < args.pos.size()) {
      Fail("TypeError", Cat(function, "() got multiple values for argument '", k, "'"));
    }
  }
}

}  // namespace ferry::text::jinja
