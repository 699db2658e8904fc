// The Jinja engine's evaluator (text/chat_template.h is the interface): runs a parsed template
// over render variables as jinja2's compiled code does in transformers' ImmutableSandboxedEnvironment.
//
// Scoping (as jinja2 3.1 compiles it):
//   - a name resolves through the enclosing scopes, then the render variables, then the globals
//     (range, namespace, dict, raise_exception, strftime_now);
//   - each iteration of a {% for %} body is a new scope under the loop's: what the body assigns is
//     gone at the next iteration and after the loop; the loop's `else` is a scope of its own;
//   - {% if %} makes no scope; a macro body, a {% call %} body, {% generation %}, {% with %},
//     {% filter %} and a {% set %} block each get a new scope;
//   - a macro's free names resolve, when it is called, in the scope it was defined in.
//
// Limits (ChatTemplateLimits): output bytes, steps (loop iterations, macro calls, list elements
// built), macro call depth, bytes of strings built, and wall time (checked every 1024 calls of Work: no
// single operation runs long, since strings, lists and nesting are bounded); exceeding one is an
// Error, never a crash.
//
// Thread safety: a Renderer is one render on one thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/chat_template.h"
#include "text/jinja_parse.h"
#include "text/jinja_value.h"

namespace ferry::text::jinja {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  // The value of `name` here or in an enclosing scope; null when unset.
  const Value* Find(std::string_view name) const;
  void Set(std::string_view name, Value value);
  void Clear() { vars_.clear(); }

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

// Call arguments: positional, then keywords in call order.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument at `index` or named `name`, or null. Builtins read their parameters with it.
  const Value* Get(size_t index, std::string_view name) const;
};

class Renderer {
 public:
  Renderer(const Program& program, Value variables, const ChatTemplateLimits& limits);
  // Clears what closures and namespaces hold, so that reference cycles among them are freed.
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  // The output. Throws Error (with the template line) on a template error or a limit.
  std::string Run();

  // ---- for the builtins (text/jinja_builtins.cc, text/jinja_methods.cc) ----
  Value Call(const Value& callee, Args args);
  Value GetAttr(const Value& obj, std::string_view name);
  Value GetItem(const Value& obj, const Value& key);
  Value ApplyFilterNamed(std::string_view name, Value subject, Args args);
  bool ApplyTestNamed(std::string_view name, const Value& subject, Args args);
  // A string the template built; counted against the limits.
  Value NewStr(std::string s);
  // Fails unless a string of `bytes` may be built.
  void CheckSize(int64_t bytes) const;
  // `n` more units of work (a loop iteration, a macro call, list elements built).
  void Work(int64_t n);
  std::shared_ptr<NamespaceObj> NewNamespace();

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using ScopePtr = std::shared_ptr<Scope>;

  Flow Exec(const Body& body, const ScopePtr& scope, std::string* out);
  Flow ExecStmt(const Stmt& s, const ScopePtr& scope, std::string* out);
  Flow ExecFor(const Stmt& s, const ScopePtr& scope, const Value& iterable, int depth0, std::string* out);
  void Assign(const Target& target, Value value, const ScopePtr& scope);
  void Append(std::string* out, std::string_view text);

  Value Eval(const Expr& e, const ScopePtr& scope);
  Value Lookup(std::string_view name, const ScopePtr& scope);
  Args EvalArgs(const Expr& e, size_t first, const ScopePtr& scope);
  Value EvalFilters(const Expr& e, Value subject, const ScopePtr& scope);  // a chain of kFilter
  Value Slice(const Value& obj, const Expr& slice, const ScopePtr& scope);
  Value CallMacro(const CallableObj& fn, Args args);
  Value MakeMacro(const MacroDef& def, const ScopePtr& closure);
  Value CallLoop(LoopObj& loop, Args args);

  const Program& program_;
  Value variables_;  // a dict
  ChatTemplateLimits limits_;
  int64_t steps_ = 0;
  int64_t work_calls_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int64_t string_bytes_ = 0;
  int call_depth_ = 0;
  int line_ = 0;  // the line being evaluated, for errors
  // What closures and namespaces this render made, to clear at its end: a macro's closure can
  // hold the macro, a namespace itself, and such cycles would never be freed. Weak, and pruned as
  // they grow, so that what dies during the render is not kept.
  template <typename T>
  static void Register(std::vector<std::weak_ptr<T>>* registry, const std::shared_ptr<T>& p);
  std::vector<std::weak_ptr<Scope>> closures_;
  std::vector<std::weak_ptr<NamespaceObj>> namespaces_;
};

// ---- builtins: text/jinja_builtins.cc (filters, tests, globals), text/jinja_methods.cc ----

Value ApplyFilter(Renderer& r, std::string_view name, Value subject, Args& args);
bool ApplyTest(Renderer& r, std::string_view name, const Value& subject, Args& args);
bool IsGlobalName(std::string_view name);
Value CallGlobal(Renderer& r, std::string_view name, Args& args);

enum class MethodLookup { kNone, kSafe, kUnsafe };
// Whether `obj.name` is a method of obj's Python type that the sandbox allows (kSafe), one it
// refuses because it mutates (kUnsafe: list.append, dict.update, ...), or not a method.
MethodLookup LookupMethod(const Value& obj, std::string_view name);
Value CallMethod(Renderer& r, const Value& self, std::string_view name, Args& args);
// The attributes of `loop` (index, first, length, ...); undefined for other names.
Value LoopAttr(const Value& loop, std::string_view name);

// Python's check of a call to a function with `params` after its first (the value): too many
// positional arguments, an unknown keyword, or one given twice is a TypeError. "*" takes any.
void CheckArity(std::string_view function, const std::vector<std::string_view>& params, const Args& args);

// Python's `format % args` (printf-style: %s %r %d %i %f %e %g %x %o %c %%, flags, width,
// precision, %(key)s with a dict).
Value PercentFormat(Renderer& r, const std::string& format, const Value& args);

// Python's int(): from an int, bool, float (truncating) or str (base 10, surrounding whitespace
// and underscores allowed). False when it does not convert.
bool ToInt(const Value& v, int64_t* out);

}  // namespace ferry::text::jinja
