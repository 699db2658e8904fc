// Values of the Jinja engine behind text/chat_template.h: the Python objects jinja2 works with, and
// the Python operations on them the templates use (str(), repr(), ==, <, truthiness, iteration,
// json.dumps), each written to give Python's result byte for byte.
//
// Ownership: a Value is a small handle; strings, lists and dicts are shared and immutable once
// built (ImmutableSandboxedEnvironment allows no list or dict mutation); a namespace is shared and
// mutable (`{% set ns.x = ... %}` changes it for everyone holding it), as in jinja2.
//
// Errors: the engine throws jinja::Error inside itself; ChatTemplate (text/chat_template.cc) turns
// it into absl::Status at its boundary, so no exception leaves the module.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ferry::text::jinja {

// absl::StrCat that also takes std::string_view (Debian's absl has a string_view of its own).
inline void CatOne(std::string* out, std::string_view s) { out->append(s); }
template <typename T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, char> && !std::is_same_v<T, bool>)
void CatOne(std::string* out, T v) {
  out->append(std::to_string(v));
}
template <typename... T>
void CatTo(std::string* out, const T&... parts) {
  (CatOne(out, parts), ...);
}
template <typename... T>
std::string Cat(const T&... parts) {
  std::string out;
  (CatOne(&out, parts), ...);
  return out;
}

// A template error: the kind Python would raise ("TypeError", "UndefinedError", ...) and its text.
struct Error {
  std::string message;  // e.g. "UndefinedError: 'x' is undefined"
  int line = 0;         // template line (1-based); 0 until the evaluator attaches one
};
[[noreturn]] void Fail(std::string_view kind, std::string_view text);

struct ListObj;
struct DictObj;
struct NamespaceObj;
struct CallableObj;
struct LoopObj;

enum class Type : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable, kLoop };
// How a list prints (Python has distinct types for these; they iterate and index alike).
enum class ListKind : uint8_t { kList, kTuple, kRange, kDictItems, kDictKeys, kDictValues };

class Value {
 public:
  Value() = default;  // undefined, no hint
  // `hint` is the UndefinedError text raised when the value is used ("'x' is undefined"). An
  // undefined prints as "", is falsy, iterates as empty; any other use raises the hint.
  static Value Undefined(std::string hint);
  // An attribute the sandbox refuses ("access to attribute 'append' of 'list' object is unsafe."):
  // an undefined whose use is a SecurityError.
  static Value Unsafe(std::string message);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value Str(std::string s);
  static Value List(std::vector<Value> items, ListKind kind = ListKind::kList);
  static Value Range(int64_t start, int64_t stop, int64_t step);  // REQUIRES: step != 0, at most 100000 items
  static Value Dict(std::shared_ptr<const DictObj> dict);
  static Value Namespace(std::shared_ptr<NamespaceObj> ns);
  static Value Callable(std::shared_ptr<const CallableObj> fn);
  static Value Loop(std::shared_ptr<LoopObj> loop);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_dict() const { return type_ == Type::kDict; }
  // int or bool (Python's bool is an int); is_number() adds float.
  bool is_int() const { return type_ == Type::kInt || type_ == Type::kBool; }
  bool is_number() const { return is_int() || type_ == Type::kFloat; }

  bool b() const { return b_; }
  int64_t i() const { return type_ == Type::kBool ? static_cast<int64_t>(b_) : i_; }  // REQUIRES: is_int()
  double f() const { return type_ == Type::kFloat ? f_ : static_cast<double>(i()); }   // REQUIRES: is_number()
  const std::string& s() const { return *static_cast<const std::string*>(p_.get()); }
  const ListObj& list() const { return *static_cast<const ListObj*>(p_.get()); }
  const DictObj& dict() const { return *static_cast<const DictObj*>(p_.get()); }
  NamespaceObj& ns() const { return *static_cast<NamespaceObj*>(p_.get()); }
  const CallableObj& fn() const { return *static_cast<const CallableObj*>(p_.get()); }
  LoopObj& loop() const { return *static_cast<LoopObj*>(p_.get()); }
  const void* identity() const { return p_.get(); }
  // The UndefinedError this undefined raises when used. REQUIRES: is_undefined()
  [[noreturn]] void FailUndefined() const;

 private:
  Type type_ = Type::kUndefined;
  union {
    bool b_;  // kBool; for an undefined: whether it is Unsafe
    int64_t i_ = 0;
    double f_;
  };
  static Value Boxed(Type type, std::shared_ptr<void> p);  // a value held by reference
  std::shared_ptr<void> p_;  // string, ListObj, DictObj, NamespaceObj, CallableObj, LoopObj, or an undefined's hint
};

// Lists and dicts nest at most this deep (a namespace counts 1), so that printing, comparing and
// destroying them cannot exhaust the stack; deeper is a RecursionError, as in Python.
constexpr int kMaxNesting = 512;
int NestingDepth(const Value& v);

// Guards a recursive walk over values (printing, comparing, JSON) against structures that reach
// back into themselves through a namespace or nest deeper than the stack allows: constructing
// more than kMaxNesting + 8 nested guards on a thread is a RecursionError.
class NestingGuard {
 public:
  NestingGuard();
  ~NestingGuard() { --depth_; }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;

 private:
  static thread_local int depth_;
};

struct ListObj {
  std::vector<Value> items;
  ListKind kind = ListKind::kList;
  int64_t start = 0, stop = 0, step = 1;  // kRange only, for printing "range(0, 3)"
  int depth = 1;
};

// A Python dict: insertion-ordered, keys compared as Python compares them (1 == 1.0 == True).
// Lookups scan the items, or a hash index of the string keys once Index() built one.
struct DictObj {
  std::vector<std::pair<Value, Value>> items;
  int depth = 1;
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  // Replaces the value of an equal key, else appends. Throws TypeError for an unhashable key.
  // Drops the index.
  void Set(Value key, Value value);
  // Appends a string key known not to be there yet (a JSON object's), without a search.
  void Append(std::string key, Value value);
  // Indexes the string keys when there are many. Invariant: items does not change afterwards
  // except through Set, which drops the index (the index points into the items' key strings).
  void Index();

 private:
  std::shared_ptr<const std::unordered_map<std::string_view, size_t>> index_;
};

struct NamespaceObj {
  DictObj attrs;
};

struct MacroDef;  // text/jinja_parse.h
struct Stmt;      // text/jinja_parse.h
class Scope;      // text/jinja_eval.h

enum class CallableKind : uint8_t {
  kMacro,   // a {% macro %}, or the body of a {% call %} block (`caller`)
  kGlobal,  // range, namespace, dict, raise_exception, strftime_now
  kMethod,  // a method bound to `self`: 'a b'.split, d.items, loop.cycle
};
struct CallableObj {
  CallableKind kind = CallableKind::kGlobal;
  std::string name;                // the macro's, global's or method's name
  Value self;                      // kMethod
  const MacroDef* macro = nullptr;  // kMacro
  std::shared_ptr<Scope> closure;  // kMacro: the scope it was defined in, where its free names resolve
};

// The `loop` variable of a {% for %}.
struct LoopObj {
  std::vector<Value> items;
  int64_t index0 = 0;
  int depth0 = 0;
  const Stmt* stmt = nullptr;   // the for, for `loop(...)` in a recursive loop
  std::shared_ptr<Scope> scope;  // the scope the for ran in
  Value last_changed;           // loop.changed()
  bool changed_called = false;
};

// A Python type name as TypeError messages write it: "int", "str", "NoneType", "list", ...
std::string TypeName(const Value& v);
// jinja2's object_type_repr: "None", or "dict object", "jinja2.utils.Namespace object".
std::string ObjectTypeRepr(const Value& v);

bool Truthy(const Value& v);
std::string Str(const Value& v);   // Python str()
std::string Repr(const Value& v);  // Python repr()
std::string FloatRepr(double f);   // repr(float): shortest round trip, "1.0", "1e+16", "inf"
bool Equal(const Value& a, const Value& b);
// Python's a < b (or <=, >, >= by `op`: "<", "<=", ">", ">="); TypeError for unordered types.
bool Less(const Value& a, const Value& b, std::string_view op);
// `x in container` as Python evaluates it.
bool Contains(const Value& container, const Value& x);
// Python iteration: list items, dict keys, a string's characters; undefined is empty; anything
// else is a TypeError.
std::vector<Value> Iterate(const Value& v);
// len(); TypeError for values without one.
int64_t Length(const Value& v);
// An integer argument (int or bool) as Python's __index__ takes it: an undefined raises its
// UndefinedError, anything else is a TypeError.
int64_t AsInt(const Value& v);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' tojson calls it.
struct JsonOptions {
  bool ensure_ascii = false;
  bool indent_set = false;
  std::string indent;                              // the indent string, when indent_set
  std::string item_sep = ", ", key_sep = ": ";     // json.dumps' separators
  bool sort_keys = false;
};
std::string ToJson(const Value& v, const JsonOptions& options);

// The render variables: JSON objects become dicts keeping their key order, integers int, other
// numbers float. INVALID (TypeError) for integers beyond int64 and nesting deeper than 256.
Value FromJson(const nlohmann::ordered_json& j);

}  // namespace ferry::text::jinja
