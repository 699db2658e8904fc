#include "model/checkpoint/quantization.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/nvfp4.h"
#include "common/status.h"

namespace ferry::model {
namespace {

// Glob match of the whole of `s`: '*' any run of characters (none included), '?' any one.
bool Glob(absl::string_view p, absl::string_view s) {
  size_t pi = 0, si = 0, star = absl::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != absl::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

// The exclusion lists' keys, in every spelling the releases use.
constexpr const char* kExclusionKeys[] = {"exclude_modules", "ignore", "modules_to_not_convert", "ignored_layers"};

}  // namespace

const char* WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kBf16: return "bf16";
    case WeightFormat::kFp8Block: return "fp8 (block scales)";
    case WeightFormat::kFp8Tensor: return "fp8 (a scale a tensor)";
    case WeightFormat::kNvfp4: return "nvfp4";
  }
  return "?";
}

bool ModuleMatches(absl::string_view pattern, absl::string_view module) {
  // Whatever the pattern matches starts with its literal head, and so must the module.
  const absl::string_view head = pattern.substr(0, pattern.find_first_of("*?"));
  if (!absl::StartsWith(module, head)) return false;
  if (Glob(pattern, module)) return true;
  for (size_t dot = module.find('.'); dot != absl::string_view::npos; dot = module.find('.', dot + 1)) {
    if (Glob(pattern, module.substr(0, dot))) return true;
  }
  return false;
}

const nlohmann::json* QuantizationScheme::Block(const nlohmann::json& config, const nlohmann::json& hf_quant) {
  if (config.is_object()) {
    if (auto it = config.find("quantization_config"); it != config.end() && it->is_object()) return &*it;
  }
  if (hf_quant.is_object()) {
    if (auto it = hf_quant.find("quantization"); it != hf_quant.end() && it->is_object()) return &*it;
  }
  return nullptr;
}

absl::StatusOr<QuantizationScheme> QuantizationScheme::Parse(const nlohmann::json* block, const std::string& where) {
  QuantizationScheme s;
  if (block == nullptr || !block->is_object()) return s;
  const nlohmann::json& q = *block;
  if (auto b = q.find("weight_block_size"); b != q.end()) {
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() || !(*b)[1].is_number_integer() ||
        (*b)[0].get<int64_t>() <= 0 || (*b)[1].get<int64_t>() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": quantization_config.weight_block_size must be two positive integers, got ", b->dump()));
    }
    s.fp8_block_rows_ = (*b)[0].get<int64_t>();
    s.fp8_block_cols_ = (*b)[1].get<int64_t>();
  }
  auto text = [](const nlohmann::json& e, const char* key) {
    auto it = e.find(key);
    return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  // An NVFP4 entry (the whole block, or a quantized_layers one) must use groups of 16, wherever
  // it states the size: its group_size, or its config_groups' weights.
  auto group_of_16 = [&](const nlohmann::json& e) -> absl::Status {
    auto refuse = [&](const nlohmann::json& g) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": NVFP4 with group_size ", g.dump(), "; only groups of ", kNvfp4Group, " exist"));
    };
    if (auto g = e.find("group_size"); g != e.end() && !(g->is_number_integer() && g->get<int64_t>() == kNvfp4Group)) {
      return refuse(*g);
    }
    if (auto groups = e.find("config_groups"); groups != e.end() && groups->is_object()) {
      for (const auto& [name, group] : groups->items()) {
        if (!group.is_object() || !group.contains("weights") || !group["weights"].is_object()) continue;
        const nlohmann::json& w = group["weights"];
        if (auto g = w.find("group_size"); g != w.end() && !(g->is_number_integer() && g->get<int64_t>() == kNvfp4Group)) {
          return refuse(*g);
        }
      }
    }
    return absl::OkStatus();
  };
  auto format_of_algo = [&](const std::string& algo, WeightFormat* f) {
    if (algo == "NVFP4" || algo == "W4A16_NVFP4") *f = WeightFormat::kNvfp4;
    else if (algo == "FP8") *f = WeightFormat::kFp8Tensor;
    else return false;
    return true;
  };

  const std::string method = text(q, "quant_method"), algo = text(q, "quant_algo");
  s.method_ = algo.empty() ? method : absl::StrCat(algo, method.empty() ? "" : absl::StrCat(" (", method, ")"));
  if (algo == "NVFP4" || algo == "W4A16_NVFP4") {
    FERRY_RETURN_IF_ERROR(group_of_16(q));
    s.nvfp4_ = true;
    s.base_ = WeightFormat::kNvfp4;
  } else if (algo == "MIXED_PRECISION") {
    s.mixed_ = true;
  } else if (!format_of_algo(algo, &s.base_)) {
    // transformers' FP8 (the GLM-5 / DeepSeek releases); a block that only sizes FP8 blocks too.
    if (method == "fp8" || (algo.empty() && method.empty() && q.contains("weight_block_size"))) {
      s.base_ = WeightFormat::kFp8Block;
    } else {
      s.known_ = false;
    }
  }
  if (auto layers = q.find("quantized_layers"); layers != q.end() && !layers->is_null()) {
    if (!layers->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": quantization_config.quantized_layers must map module "
                                                            "names to their quantization, got ", layers->dump()));
    }
    for (const auto& [module, entry] : layers->items()) {
      if (!entry.is_object()) continue;
      WeightFormat f = WeightFormat::kBf16;
      if (!format_of_algo(text(entry, "quant_algo"), &f)) {
        if (s.mixed_) s.known_ = false;
        continue;
      }
      if (f == WeightFormat::kNvfp4) {
        FERRY_RETURN_IF_ERROR(group_of_16(entry));
        s.nvfp4_ = true;
      }
      if (module.find_first_of("*?") == std::string::npos) {
        s.exact_layers_.emplace(module, f);
      } else {
        s.layers_.emplace_back(module, f);
      }
    }
  }
  for (const char* key : kExclusionKeys) {
    auto list = q.find(key);
    if (list == q.end() || list->is_null()) continue;
    bool names = list->is_array();
    for (const auto& e : names ? *list : nlohmann::json::array()) names = names && e.is_string();
    if (!names) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": quantization_config.", key, " must be a list of module names, got ", list->dump()));
    }
    for (const auto& e : *list) s.excluded_.push_back(e.get<std::string>());
  }
  if (auto groups = q.find("config_groups"); groups != q.end() && groups->is_object()) {
    for (const auto& [name, group] : groups->items()) {
      if (!group.is_object() || !group.contains("input_activations")) continue;
      const nlohmann::json& a = group["input_activations"];
      if (a.is_object() && a.contains("dynamic") && a["dynamic"].is_boolean() && !a["dynamic"].get<bool>()) {
        s.input_scales_ = true;
      }
    }
  }
  return s;
}

const char* Nvfp4NumericsName(Nvfp4Numerics n) { return n == Nvfp4Numerics::kW4A4 ? "w4a4" : "w4a16"; }

absl::StatusOr<Nvfp4Numerics> ParseNvfp4Numerics(const std::string& name) {
  if (name == "w4a16") return Nvfp4Numerics::kW4A16;
  if (name == "w4a4") return Nvfp4Numerics::kW4A4;
  return absl::InvalidArgumentError(absl::StrCat("NVFP4 numerics '", name, "': expected w4a16 or w4a4"));
}

WeightFormat QuantizationScheme::FormatOf(absl::string_view module, int64_t cols) const {
  for (const std::string& p : excluded_) {
    if (ModuleMatches(p, module)) return WeightFormat::kBf16;
  }
  WeightFormat f = base_;
  if (mixed_) f = LayerFormat(module);
  if (f == WeightFormat::kNvfp4 && cols % kNvfp4Group != 0) return WeightFormat::kBf16;
  return f;
}

WeightFormat QuantizationScheme::LayerFormat(absl::string_view module) const {
  // The module or a module holding it, by name; then the wildcard entries.
  for (size_t end = module.size(); end != absl::string_view::npos && end > 0; end = module.rfind('.', end - 1)) {
    if (auto it = exact_layers_.find(module.substr(0, end)); it != exact_layers_.end()) return it->second;
  }
  for (const auto& [key, format] : layers_) {
    if (ModuleMatches(key, module)) return format;
  }
  return WeightFormat::kBf16;
}

std::string QuantizationScheme::Describe() const {
  if (method_.empty() && base_ == WeightFormat::kBf16 && !mixed_) return "bf16 (no quantization_config)";
  std::string out = absl::StrCat(method_.empty() ? WeightFormatName(base_) : method_, ": ");
  if (!known_) return absl::StrCat(out, "a method whose weight formats this reader does not know");
  absl::StrAppend(&out, mixed_ ? absl::StrCat(layers_.size() + exact_layers_.size(), " quantized_layers entries")
                               : absl::StrCat("Linear weights ", WeightFormatName(base_)));
  if (base_ == WeightFormat::kFp8Block && !mixed_) {
    absl::StrAppend(&out, " ", fp8_block_rows_, "x", fp8_block_cols_);
  }
  absl::StrAppend(&out, ", ", excluded_.size(), excluded_.size() == 1 ? " exclusion pattern" : " exclusion patterns");
  if (input_scales_) absl::StrAppend(&out, ", static input scales");
  return out;
}

}  // namespace ferry::model
