// Methods of the Jinja engine's values (declared in text/jinja_eval.h): Python's str, dict, list
// and tuple methods that templates call ('a b'.split(), d.items(), ...), the sandbox's refusal of
// the mutating ones, the attributes of `loop`, printf-style `%` formatting, and int().
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

#include "text/jinja_eval.h"
#include "text/jinja_strings.h"

namespace ferry::text::jinja {
namespace {

const std::set<std::string, std::less<>> kStrMethods = {
    "capitalize", "casefold", "center", "count", "endswith", "find", "format", "index", "isalnum", "isalpha",
    "isdecimal", "isdigit", "islower", "isnumeric", "isspace", "isupper", "join", "ljust", "lower", "lstrip",
    "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
    "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill"};
const std::set<std::string, std::less<>> kDictMethods = {"items", "keys", "values", "get", "copy"};
const std::set<std::string, std::less<>> kDictUnsafe = {"pop", "popitem", "setdefault", "update", "clear"};
const std::set<std::string, std::less<>> kListMethods = {"count", "index", "copy"};
const std::set<std::string, std::less<>> kListUnsafe = {"append", "extend", "insert", "pop",
                                                         "remove", "reverse", "sort", "clear"};

const Value& Need(const Args& a, size_t index, std::string_view name, std::string_view method) {
  const Value* v = a.Get(index, name);
  if (v == nullptr) Fail("TypeError", Cat(method, "() missing required argument '", name, "'"));
  return *v;
}

std::string NeedStr(const Args& a, size_t index, std::string_view name, std::string_view method) {
  const Value& v = Need(a, index, name, method);
  if (!v.is_string()) {
    Fail("TypeError", Cat(method, "() argument must be str, not ", TypeName(v)));
  }
  return v.s();
}

// Padding to `width` code points with `fill` on the left (`left`) and right (`right`) shares.
std::string Pad(const std::string& s, int64_t left, int64_t right, const std::string& fill) {
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += s;
  for (int64_t k = 0; k < right; ++k) out += fill;
  return out;
}

// str.format: {}, {0}, {name}, {name!r}, {{ and }}; no format specs.
std::string StrFormat(Renderer& r, const std::string& fmt, const Args& a) {
  std::string out;
  size_t auto_index = 0;
  bool manual = false, automatic = false;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out.push_back(c);
      ++i;
      continue;
    }
    if (c == '}') Fail("ValueError", "Single '}' encountered in format string");
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    const size_t end = fmt.find('}', i);
    if (end == std::string::npos) Fail("ValueError", "Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, end - i - 1);
    bool repr = false;
    if (field.size() >= 2 && field[field.size() - 2] == '!') {
      repr = field.back() == 'r';
      field.resize(field.size() - 2);
    }
    if (field.find_first_of(":.[") != std::string::npos) {
      Fail("ValueError", "format specs, attributes and indices in str.format are not supported");
    }
    Value v;
    const bool numbered =
        !field.empty() && std::all_of(field.begin(), field.end(), [](char c) { return c >= '0' && c <= '9'; });
    automatic = automatic || field.empty();
    manual = manual || numbered;
    if (manual && automatic) {
      Fail("ValueError", "cannot switch from manual field specification to automatic field numbering");
    }
    if (field.empty()) {
      if (auto_index >= a.pos.size()) Fail("IndexError", "Replacement index out of range for positional args tuple");
      v = a.pos[auto_index++];
    } else if (numbered) {
      const size_t k = field.size() > 9 ? SIZE_MAX : std::stoul(field);
      if (k >= a.pos.size()) Fail("IndexError", "Replacement index out of range for positional args tuple");
      v = a.pos[k];
    } else {
      const Value* kw = a.Get(SIZE_MAX, field);
      if (kw == nullptr) Fail("KeyError", Cat("'", field, "'"));
      v = *kw;
    }
    out += repr ? Repr(v) : Str(v);
    r.CheckSize(static_cast<int64_t>(out.size()));
    i = end;
  }
  return out;
}

Value StrMethod(Renderer& r, const std::string& s, std::string_view m, Args& a) {
  const auto chars_arg = [&](size_t index) -> std::u32string* {
    static thread_local std::u32string chars;
    const Value* v = a.Get(index, "chars");
    if (v == nullptr || v->is_none()) return nullptr;
    if (!v->is_string()) Fail("TypeError", Cat(m, " arg must be None or str"));
    chars = ToU32(v->s());
    return &chars;
  };
  if (m == "strip") return r.NewStr(PyStrip(s, chars_arg(0), true, true));
  if (m == "lstrip") return r.NewStr(PyStrip(s, chars_arg(0), true, false));
  if (m == "rstrip") return r.NewStr(PyStrip(s, chars_arg(0), false, true));
  if (m == "split" || m == "rsplit") {
    const Value* sep = a.Get(0, "sep");
    const Value* maxsplit = a.Get(1, "maxsplit");
    std::string sep_s;
    if (sep != nullptr && !sep->is_none()) {
      if (!sep->is_string()) Fail("TypeError", Cat("must be str or None, not ", TypeName(*sep)));
      if (sep->s().empty()) Fail("ValueError", "empty separator");
      sep_s = sep->s();
    }
    std::vector<Value> out;
    for (std::string& part : PySplit(s, sep != nullptr && !sep->is_none() ? &sep_s : nullptr,
                                     maxsplit != nullptr ? AsInt(*maxsplit) : -1, m == "rsplit")) {
      out.push_back(Value::Str(std::move(part)));
    }
    r.Work(static_cast<int64_t>(out.size()));
    return Value::List(std::move(out));
  }
  if (m == "splitlines") {
    std::vector<Value> out;
    for (std::string& line : PySplitLines(s)) out.push_back(Value::Str(std::move(line)));
    return Value::List(std::move(out));
  }
  if (m == "startswith" || m == "endswith") {
    const Value& what = Need(a, 0, "prefix", m);
    std::vector<Value> options = what.is_list() && what.list().kind == ListKind::kTuple ? what.list().items
                                                                                        : std::vector<Value>{what};
    for (const Value& o : options) {
      if (!o.is_string()) Fail("TypeError", Cat(m, " first arg must be str or a tuple of str, not ", TypeName(o)));
      const std::string& p = o.s();
      if (p.size() <= s.size() && (m == "startswith" ? s.compare(0, p.size(), p) == 0
                                                     : s.compare(s.size() - p.size(), p.size(), p) == 0)) {
        return Value::Bool(true);
      }
    }
    return Value::Bool(false);
  }
  if (m == "lower" || m == "casefold") return r.NewStr(PyLower(s));
  if (m == "upper") return r.NewStr(PyUpper(s));
  if (m == "title") return r.NewStr(PyTitle(s));
  if (m == "capitalize") return r.NewStr(PyCapitalize(s));
  if (m == "swapcase") return r.NewStr(PySwapcase(s));
  if (m == "replace") {
    const std::string o = NeedStr(a, 0, "old", m), n = NeedStr(a, 1, "new", m);
    const Value* count = a.Get(2, "count");
    const int64_t c = count != nullptr ? AsInt(*count) : -1;
    const int64_t hits = o.empty() ? CodePointCount(s) + 1 : PyCount(s, o);
    r.CheckSize(static_cast<int64_t>(s.size()) + (c < 0 ? hits : std::min(hits, c)) * static_cast<int64_t>(n.size()));
    return r.NewStr(PyReplace(s, o, n, c));
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex") {
    const int64_t at = PyFind(s, NeedStr(a, 0, "sub", m), m[0] == 'r');
    if (at < 0 && (m == "index" || m == "rindex")) Fail("ValueError", "substring not found");
    return Value::Int(at);
  }
  if (m == "count") return Value::Int(PyCount(s, NeedStr(a, 0, "sub", m)));
  if (m == "join") {
    std::string out;
    int64_t k = 0;
    for (const Value& x : Iterate(Need(a, 0, "iterable", m))) {
      if (!x.is_string()) {
        Fail("TypeError", Cat("sequence item ", k, ": expected str instance, ", TypeName(x), " found"));
      }
      if (k++ > 0) out += s;
      out += x.s();
      r.CheckSize(static_cast<int64_t>(out.size()));
    }
    return r.NewStr(std::move(out));
  }
  if (m.substr(0, 2) == "is") return Value::Bool(PyIs(m.substr(2), s));
  if (m == "center" || m == "ljust" || m == "rjust" || m == "zfill") {
    const int64_t width = AsInt(Need(a, 0, "width", m)), len = CodePointCount(s);
    const std::string fill = m == "zfill" ? "0" : a.Get(1, "fillchar") != nullptr ? NeedStr(a, 1, "fillchar", m) : " ";
    if (width <= len) return Value::Str(s);
    r.CheckSize(width * static_cast<int64_t>(fill.size()));
    const int64_t marg = width - len;
    if (m == "ljust") return r.NewStr(Pad(s, 0, marg, fill));
    if (m == "rjust") return r.NewStr(Pad(s, marg, 0, fill));
    if (m == "zfill") {
      const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
      return r.NewStr((sign ? s.substr(0, 1) : "") + Pad(sign ? s.substr(1) : s, marg, 0, "0"));
    }
    const int64_t left = marg / 2 + (marg & width & 1);
    return r.NewStr(Pad(s, left, marg - left, fill));
  }
  if (m == "partition" || m == "rpartition") {
    const std::string sep = NeedStr(a, 0, "sep", m);
    if (sep.empty()) Fail("ValueError", "empty separator");
    const size_t at = m == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos) {
      return m == "partition" ? Value::List({Value::Str(s), Value::Str(""), Value::Str("")}, ListKind::kTuple)
                              : Value::List({Value::Str(""), Value::Str(""), Value::Str(s)}, ListKind::kTuple);
    }
    return Value::List({Value::Str(s.substr(0, at)), Value::Str(sep), Value::Str(s.substr(at + sep.size()))},
                       ListKind::kTuple);
  }
  if (m == "removeprefix" || m == "removesuffix") {
    const std::string p = NeedStr(a, 0, m == "removeprefix" ? "prefix" : "suffix", m);
    if (m == "removeprefix" && s.compare(0, p.size(), p) == 0) return Value::Str(s.substr(p.size()));
    if (m == "removesuffix" && !p.empty() && p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0) {
      return Value::Str(s.substr(0, s.size() - p.size()));
    }
    return Value::Str(s);
  }
  if (m == "format") return r.NewStr(StrFormat(r, s, a));
  Fail("AttributeError", Cat("'str' object has no attribute '", m, "'"));
}

// One %-conversion of Python's printf-style formatting.
std::string Convert(char conv, const std::string& flags, int64_t width, int64_t prec, const Value& v) {
  std::string body;
  const bool left = flags.find('-') != std::string::npos;
  bool zero = flags.find('0') != std::string::npos && !left;
  const auto number_error = [&](std::string_view need) {
    Fail("TypeError", Cat("%", std::string(1, conv), " format: ", need, " is required, not ", TypeName(v)));
  };
  if (conv == 's' || conv == 'r' || conv == 'a') {
    body = conv == 's' ? Str(v) : Repr(v);
    if (prec >= 0) body = FromU32(ToU32(body).substr(0, prec));
    zero = false;
  } else if (conv == 'c') {
    if (v.is_string() && CodePointCount(v.s()) == 1) body = v.s();
    else if (v.is_int()) AppendUtf8(static_cast<char32_t>(v.i()), &body);
    else Fail("TypeError", "%c requires int or char");
    zero = false;
  } else {
    std::string spec = "%" + flags;
    if (prec >= 0) spec += "." + std::to_string(prec);
    char buf[512];
    if (conv == 'd' || conv == 'i' || conv == 'u' || conv == 'x' || conv == 'X' || conv == 'o') {
      int64_t i = 0;
      const bool decimal = conv == 'd' || conv == 'i' || conv == 'u';
      if (v.is_int()) {
        i = v.i();
      } else if (v.type() == Type::kFloat && decimal && std::isfinite(v.f())) {
        i = static_cast<int64_t>(v.f());  // %d truncates a float
      } else {
        number_error(decimal ? "a real number" : "an integer");
      }
      std::snprintf(buf, sizeof(buf), (spec + "ll" + (conv == 'u' ? 'd' : conv)).c_str(), static_cast<long long>(i));
    } else if (std::string_view("eEfFgG").find(conv) != std::string_view::npos) {
      if (!v.is_number()) number_error("a real number");
      std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v.f());
    } else {
      Fail("ValueError", Cat("unsupported format character '", std::string(1, conv), "'"));
    }
    body = buf;
  }
  const int64_t len = CodePointCount(body);
  if (width <= len) return body;
  if (left) return body + std::string(width - len, ' ');
  if (zero) {
    const size_t sign = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
    return body.substr(0, sign) + std::string(width - len, '0') + body.substr(sign);
  }
  return std::string(width - len, ' ') + body;
}

}  // namespace

Value PercentFormat(Renderer& r, const std::string& format, const Value& args) {
  const bool tuple = args.is_list() && args.list().kind == ListKind::kTuple;
  // Python takes a dict, or anything else with __getitem__ but a tuple or str (an undefined too),
  // as the mapping of %(key)s; such an argument left unused is no error.
  const bool mapping = args.is_dict() || args.is_undefined() || (args.is_list() && !tuple);
  const std::vector<Value> items = tuple ? args.list().items : std::vector<Value>{args};
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) Fail("ValueError", "incomplete format");
    const Value* value = nullptr;
    Value keyed;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos) Fail("ValueError", "incomplete format key");
      if (args.is_undefined()) args.FailUndefined();
      if (!args.is_dict()) Fail("TypeError", "format requires a mapping");
      const Value* v = args.dict().Find(std::string_view(format).substr(i + 1, close - i - 1));
      if (v == nullptr) Fail("KeyError", Cat("'", format.substr(i + 1, close - i - 1), "'"));
      keyed = *v;
      value = &keyed;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos) flags += format[i++];
    const auto number = [&]() -> int64_t {
      if (i < format.size() && format[i] == '*') {
        ++i;
        if (next >= items.size() || !items[next].is_int()) Fail("TypeError", "* wants int");
        return items[next++].i();
      }
      int64_t n = 0;
      bool any = false;
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') n = n * 10 + (format[i++] - '0'), any = true;
      return any ? n : -1;
    };
    const int64_t width = number();
    int64_t prec = -1;
    if (i < format.size() && format[i] == '.') {
      ++i;
      prec = std::max<int64_t>(0, number());
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) Fail("ValueError", "incomplete format");
    const char conv = format[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (value == nullptr) {
      if (next >= items.size()) Fail("TypeError", "not enough arguments for format string");
      value = &items[next++];
    }
    out += Convert(conv, flags, width, prec, *value);
    r.CheckSize(static_cast<int64_t>(out.size()));
  }
  if (!used_mapping && next < items.size() && !mapping) {
    Fail("TypeError", "not all arguments converted during string formatting");
  }
  return r.NewStr(std::move(out));
}

MethodLookup LookupMethod(const Value& obj, std::string_view name) {
  if (name.size() > 4 && name.substr(0, 2) == "__" && name.substr(name.size() - 2) == "__") return MethodLookup::kUnsafe;
  switch (obj.type()) {
    case Type::kString: return kStrMethods.count(name) ? MethodLookup::kSafe : MethodLookup::kNone;
    case Type::kDict:
      if (kDictMethods.count(name)) return MethodLookup::kSafe;
      return kDictUnsafe.count(name) ? MethodLookup::kUnsafe : MethodLookup::kNone;
    case Type::kList: {
      const ListKind k = obj.list().kind;
      if (k == ListKind::kList) {
        if (kListMethods.count(name)) return MethodLookup::kSafe;
        return kListUnsafe.count(name) ? MethodLookup::kUnsafe : MethodLookup::kNone;
      }
      if (k == ListKind::kTuple || k == ListKind::kRange) {
        return name == "count" || name == "index" ? MethodLookup::kSafe : MethodLookup::kNone;
      }
      return MethodLookup::kNone;
    }
    default: return MethodLookup::kNone;
  }
}

Value CallMethod(Renderer& r, const Value& self, std::string_view name, Args& args) {
  switch (self.type()) {
    case Type::kString: return StrMethod(r, self.s(), name, args);
    case Type::kDict: {
      const DictObj& d = self.dict();
      if (name == "get") {
        const Value* v = d.Find(Need(args, 0, "key", name));
        return v != nullptr ? *v : args.pos.size() > 1 ? args.pos[1] : Value::None();
      }
      if (name == "copy") return self;
      std::vector<Value> out;
      for (const auto& [k, v] : d.items) {
        out.push_back(name == "items" ? Value::List({k, v}, ListKind::kTuple) : name == "keys" ? k : v);
      }
      r.Work(static_cast<int64_t>(out.size()));
      return Value::List(std::move(out), name == "items"  ? ListKind::kDictItems
                                         : name == "keys" ? ListKind::kDictKeys
                                                          : ListKind::kDictValues);
    }
    case Type::kList: {
      if (name == "copy") return Value::List(self.list().items);
      const Value& x = Need(args, 0, "value", name);
      const auto& items = self.list().items;
      int64_t count = 0;
      for (size_t k = 0; k < items.size(); ++k) {
        if (!Equal(items[k], x)) continue;
        if (name == "index") return Value::Int(static_cast<int64_t>(k));
        ++count;
      }
      if (name == "index") Fail("ValueError", Cat(Repr(x), " is not in list"));
      return Value::Int(count);
    }
    case Type::kLoop: {
      LoopObj& loop = self.loop();
      if (name == "cycle") {
        if (args.pos.empty()) Fail("TypeError", "no items for cycling given");
        return args.pos[loop.index0 % args.pos.size()];
      }
      const Value key = Value::List(args.pos, ListKind::kTuple);
      if (loop.changed_called && Equal(loop.last_changed, key)) return Value::Bool(false);
      loop.changed_called = true;
      loop.last_changed = key;
      return Value::Bool(true);
    }
    default: break;
  }
  Fail("AttributeError", Cat("'", TypeName(self), "' object has no attribute '", name, "'"));
}

Value LoopAttr(const Value& loop_value, std::string_view name) {
  const LoopObj& loop = loop_value.loop();
  const int64_t n = static_cast<int64_t>(loop.items.size()), k = loop.index0;
  if (name == "index") return Value::Int(k + 1);
  if (name == "index0") return Value::Int(k);
  if (name == "revindex") return Value::Int(n - k);
  if (name == "revindex0") return Value::Int(n - k - 1);
  if (name == "first") return Value::Bool(k == 0);
  if (name == "last") return Value::Bool(k == n - 1);
  if (name == "length") return Value::Int(n);
  if (name == "depth") return Value::Int(loop.depth0 + 1);
  if (name == "depth0") return Value::Int(loop.depth0);
  if (name == "previtem") return k > 0 ? loop.items[k - 1] : Value::Undefined("there is no previous item");
  if (name == "nextitem") return k + 1 < n ? loop.items[k + 1] : Value::Undefined("there is no next item");
  if (name == "cycle" || name == "changed") {
    auto fn = std::make_shared<CallableObj>();
    fn->kind = CallableKind::kMethod;
    fn->name = std::string(name);
    fn->self = loop_value;
    return Value::Callable(std::move(fn));
  }
  return Value::Undefined(Cat("'jinja2.runtime.LoopContext object' has no attribute '", name, "'"));
}

bool ToInt(const Value& v, int64_t* out) {
  if (v.is_undefined()) v.FailUndefined();
  if (v.is_int()) {
    *out = v.i();
    return true;
  }
  if (v.type() == Type::kFloat) {
    if (!std::isfinite(v.f()) || std::fabs(v.f()) >= 9.2e18) return false;
    *out = static_cast<int64_t>(v.f());
    return true;
  }
  if (!v.is_string()) return false;
  std::string s = PyStrip(v.s(), nullptr, true, true);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) neg = s[0] == '-', s.erase(0, 1);
  std::string digits;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '_' && k > 0 && k + 1 < s.size() && s[k - 1] != '_' && s[k + 1] != '_') continue;
    if (s[k] < '0' || s[k] > '9') return false;
    digits.push_back(s[k]);
  }
  if (digits.empty()) return false;
  const auto res = std::from_chars(digits.data(), digits.data() + digits.size(), *out);
  if (res.ec != std::errc()) return false;
  if (neg) *out = -*out;
  return true;
}

}  // namespace ferry::text::jinja
