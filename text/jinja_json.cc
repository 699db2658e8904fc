// json.dumps and json.loads for the Jinja engine's values (text/jinja_value.h): transformers' tojson
// filter is json.dumps(x, ensure_ascii, indent, separators, sort_keys), and the render variables
// arrive as JSON.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "text/jinja_strings.h"
#include "text/jinja_value.h"

namespace ferry::text::jinja {
namespace {

void JsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = NextCodePoint(s, &i);
    switch (c) {
      case '"': out->append("\\\""); continue;
      case '\\': out->append("\\\\"); continue;
      case '\n': out->append("\\n"); continue;
      case '\r': out->append("\\r"); continue;
      case '\t': out->append("\\t"); continue;
      case '\b': out->append("\\b"); continue;
      case '\f': out->append("\\f"); continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        const uint32_t v = static_cast<uint32_t>(c) - 0x10000;
        absl::StrAppendFormat(out, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        absl::StrAppendFormat(out, "\\u%04x", static_cast<uint32_t>(c));
      }
    } else {
      out->append(s.substr(at, i - at));
    }
  }
  out->push_back('"');
}

std::string JsonFloat(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return FloatRepr(f);
}

// json.dumps' key conversion: str as is, numbers, booleans and None as their JSON text.
std::string JsonKey(const Value& k) {
  switch (k.type()) {
    case Type::kString: return k.s();
    case Type::kBool: return k.b() ? "true" : "false";
    case Type::kInt: return Cat(k.i());
    case Type::kFloat: return JsonFloat(k.f());
    case Type::kNone: return "null";
    default: Fail("TypeError", Cat("keys must be str, int, float, bool or None, not ", TypeName(k)));
  }
}

void JsonTo(const Value& v, const JsonOptions& o, int level, std::string* out) {
  NestingGuard guard;
  const auto newline = [&](int lv) {
    out->push_back('\n');
    for (int k = 0; k < lv; ++k) out->append(o.indent);
  };
  switch (v.type()) {
    case Type::kNone: out->append("null"); return;
    case Type::kBool: out->append(v.b() ? "true" : "false"); return;
    case Type::kInt: CatTo(out, v.i()); return;
    case Type::kFloat: out->append(JsonFloat(v.f())); return;
    case Type::kString: JsonString(v.s(), o.ensure_ascii, out); return;
    case Type::kList: {
      const ListObj& l = v.list();
      if (l.kind != ListKind::kList && l.kind != ListKind::kTuple) break;
      if (l.items.empty()) {
        out->append("[]");
        return;
      }
      out->push_back('[');
      for (size_t k = 0; k < l.items.size(); ++k) {
        if (k) out->append(o.item_sep);
        if (o.indent_set) newline(level + 1);
        JsonTo(l.items[k], o, level + 1, out);
      }
      if (o.indent_set) newline(level);
      out->push_back(']');
      return;
    }
    case Type::kDict: {
      const DictObj& d = v.dict();
      if (d.items.empty()) {
        out->append("{}");
        return;
      }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : d.items) items.push_back(&kv);
      if (o.sort_keys) {  // Python sorts the keys themselves (mixed types are a TypeError), then converts them
        std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) {
          return Less(a->first, b->first, "<");
        });
      }
      out->push_back('{');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out->append(o.item_sep);
        if (o.indent_set) newline(level + 1);
        JsonString(JsonKey(items[k]->first), o.ensure_ascii, out);
        out->append(o.key_sep);
        JsonTo(items[k]->second, o, level + 1, out);
      }
      if (o.indent_set) newline(level);
      out->push_back('}');
      return;
    }
    default: break;
  }
  Fail("TypeError", Cat("Object of type ", TypeName(v), " is not JSON serializable"));
}

Value FromJsonAt(const nlohmann::ordered_json& j, int depth) {
  if (depth > 256) Fail("TypeError", "the render variables nest deeper than 256");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::None();
    case nlohmann::ordered_json::value_t::boolean: return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) Fail("TypeError", Cat("integer ", u, " is beyond int64"));
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(FromJsonAt(x, depth + 1));
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<DictObj>();
      d->items.reserve(j.size());
      for (const auto& [k, x] : j.items()) d->Append(k, FromJsonAt(x, depth + 1));  // keys are unique
      d->Index();
      return Value::Dict(std::move(d));
    }
    default: Fail("TypeError", "binary or discarded JSON values cannot be rendered");
  }
}

}  // namespace

std::string ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  JsonTo(v, options, 0, &out);
  return out;
}

Value FromJson(const nlohmann::ordered_json& j) { return FromJsonAt(j, 0); }

}  // namespace ferry::text::jinja
