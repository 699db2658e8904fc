#include "model/checkpoint/config.h"

#include <cmath>
#include <limits>
#include <optional>
#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ferry::model {
namespace {

using json = nlohmann::json;

// Reads the fields of one JSON object, each error naming the file and the field.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string source, std::string path_prefix)
      : obj_(obj), source_(std::move(source)), prefix_(std::move(path_prefix)) {}

  bool Has(absl::string_view key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field '", prefix_, key, "' ", what));
  }

  // A positive (or, with allow_zero, non-negative) integer; `def` < 0 makes it required.
  absl::StatusOr<int64_t> Int(absl::string_view key, int64_t def = -1, bool allow_zero = false) const {
    if (!Has(key)) {
      if (def < 0) return Error(key, "is missing");
      return def;
    }
    const json& v = obj_.at(std::string(key));
    if (!v.is_number_integer()) return Error(key, absl::StrCat("must be an integer, got ", v.dump()));
    int64_t x = v.get<int64_t>();
    if (x < 0 || (x == 0 && !allow_zero)) {
      return Error(key, absl::StrCat("must be ", allow_zero ? "non-negative" : "positive", ", got ", x));
    }
    return x;
  }

  absl::StatusOr<double> Number(absl::string_view key, std::optional<double> def = std::nullopt) const {
    if (!Has(key)) {
      if (!def) return Error(key, "is missing");
      return *def;
    }
    const json& v = obj_.at(std::string(key));
    if (!v.is_number()) return Error(key, absl::StrCat("must be a number, got ", v.dump()));
    return v.get<double>();
  }

  // A finite number > 0 (an epsilon: zero or less divides by zero or worse).
  absl::StatusOr<double> Positive(absl::string_view key, double def) const {
    FERRY_ASSIGN_OR_RETURN(double x, Number(key, def));
    if (!(x > 0) || !std::isfinite(x)) return Error(key, absl::StrCat("must be a finite number > 0, got ", x));
    return x;
  }

  // An Int at most `most` (a count whose larger values hang or overflow what uses it).
  absl::StatusOr<int64_t> IntAtMost(absl::string_view key, int64_t def, int64_t most) const {
    FERRY_ASSIGN_OR_RETURN(int64_t x, Int(key, def));
    if (x > most) return Error(key, absl::StrCat("is ", x, "; at most ", most, " is supported"));
    return x;
  }

  absl::StatusOr<bool> Bool(absl::string_view key, bool def) const {
    if (!Has(key)) return def;
    const json& v = obj_.at(std::string(key));
    if (!v.is_boolean()) return Error(key, absl::StrCat("must be true or false, got ", v.dump()));
    return v.get<bool>();
  }

  absl::StatusOr<std::string> String(absl::string_view key, std::string def = {}) const {
    if (!Has(key)) return def;
    const json& v = obj_.at(std::string(key));
    if (!v.is_string()) return Error(key, absl::StrCat("must be a string, got ", v.dump()));
    return v.get<std::string>();
  }

  // A list of num_layers strings, each mapped through `parse`; empty when absent.
  template <typename T, typename Parse>
  absl::StatusOr<std::vector<T>> LayerList(absl::string_view key, int64_t num_layers, Parse parse) const {
    std::vector<T> out;
    if (!Has(key)) return out;
    const json& v = obj_.at(std::string(key));
    if (!v.is_array() || static_cast<int64_t>(v.size()) != num_layers) {
      return Error(key, absl::StrCat("must list one entry per layer (", num_layers, "), got ", v.dump()));
    }
    for (size_t i = 0; i < v.size(); ++i) {
      std::optional<T> t = v[i].is_string() ? parse(v[i].get<std::string>()) : std::nullopt;
      if (!t) return Error(key, absl::StrCat("entry ", i, " is ", v[i].dump(), ", which is not known"));
      out.push_back(*t);
    }
    return out;
  }

  const json& obj() const { return obj_; }

 private:
  const json& obj_;
  std::string source_;
  std::string prefix_;
};

std::optional<AttentionType> ParseAttentionType(const std::string& s) {
  if (s == "deepseek_sparse_attention") return AttentionType::kMla;
  if (s == "linear_attention") return AttentionType::kKda;
  return std::nullopt;
}
std::optional<IndexerType> ParseIndexerType(const std::string& s) {
  if (s == "full") return IndexerType::kFull;
  if (s == "shared") return IndexerType::kShared;
  return std::nullopt;
}
std::optional<MlpType> ParseMlpType(const std::string& s) {
  if (s == "dense") return MlpType::kDense;
  if (s == "sparse") return MlpType::kSparse;
  return std::nullopt;
}

absl::Status ParseTokenIds(const FieldReader& r, absl::string_view key, std::vector<int32_t>* out) {
  if (!r.Has(key)) return absl::OkStatus();
  const json& v = r.obj().at(std::string(key));
  auto one = [&](const json& e) -> absl::Status {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return r.Error(key, absl::StrCat("must hold token ids, got ", e.dump()));
    }
    out->push_back(static_cast<int32_t>(e.get<int64_t>()));
    return absl::OkStatus();
  };
  if (v.is_array()) {
    for (const json& e : v) FERRY_RETURN_IF_ERROR(one(e));
    return absl::OkStatus();
  }
  return one(v);
}

absl::Status ParseText(const FieldReader& r, ModelConfig& c) {
  FERRY_ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size"));
  FERRY_ASSIGN_OR_RETURN(c.hidden_size, r.Int("hidden_size"));
  FERRY_ASSIGN_OR_RETURN(c.num_layers, r.Int("num_hidden_layers"));
  FERRY_ASSIGN_OR_RETURN(double eps, r.Positive("rms_norm_eps", 1e-6));
  c.rms_norm_eps = static_cast<float>(eps);
  // Positions and token counts are int32 on the device.
  FERRY_ASSIGN_OR_RETURN(c.max_position_embeddings,
                         r.IntAtMost("max_position_embeddings", 4096, std::numeric_limits<int32_t>::max()));
  FERRY_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  FERRY_RETURN_IF_ERROR(ParseTokenIds(r, "eos_token_id", &c.eos_token_ids));
  std::vector<int32_t> bos;
  FERRY_RETURN_IF_ERROR(ParseTokenIds(r, "bos_token_id", &bos));
  if (!bos.empty()) c.bos_token_id = bos[0];
  for (const auto& [key, ids] : {std::pair{"eos_token_id", &c.eos_token_ids}, std::pair{"bos_token_id", &bos}}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= c.vocab_size) {
        return r.Error(key, absl::StrCat("names token ", id, ", outside the vocabulary [0, ", c.vocab_size, ")"));
      }
    }
  }

  FERRY_ASSIGN_OR_RETURN(c.num_heads, r.Int("num_attention_heads"));
  FERRY_ASSIGN_OR_RETURN(int64_t kv_heads, r.Int("num_key_value_heads", c.num_heads));
  if (kv_heads != c.num_heads) {
    return r.Error("num_key_value_heads", absl::StrCat("is ", kv_heads, "; MLA needs it equal to "
                                                       "num_attention_heads (", c.num_heads, ")"));
  }
  FERRY_ASSIGN_OR_RETURN(c.q_lora_rank, r.Int("q_lora_rank"));
  FERRY_ASSIGN_OR_RETURN(c.kv_lora_rank, r.Int("kv_lora_rank"));
  FERRY_ASSIGN_OR_RETURN(c.qk_nope_head_dim, r.Int("qk_nope_head_dim"));
  FERRY_ASSIGN_OR_RETURN(c.qk_rope_head_dim, r.Int("qk_rope_head_dim", -1, /*allow_zero=*/true));
  FERRY_ASSIGN_OR_RETURN(c.v_head_dim, r.Int("v_head_dim"));
  if (c.qk_rope_head_dim % 2 != 0) {
    return r.Error("qk_rope_head_dim", absl::StrCat("must be even for RoPE pairs, got ", c.qk_rope_head_dim));
  }
  FERRY_ASSIGN_OR_RETURN(bool attention_bias, r.Bool("attention_bias", false));
  if (attention_bias) {
    return absl::UnimplementedError(absl::StrCat(
        r.Error("attention_bias", "").message(), "is true; GLM-5.x checkpoints have no attention "
                                                 "biases and Ferry does not load them"));
  }
  FERRY_ASSIGN_OR_RETURN(std::string act, r.String("hidden_act", "silu"));
  if (act != "silu") {
    return absl::UnimplementedError(r.Error("hidden_act", absl::StrCat("is '", act, "'; only silu is supported")).message());
  }

  // RoPE: rope_parameters (transformers 5) or the older top-level rope_theta / rope_scaling.
  c.rope_theta = 10000.0;
  if (r.Has("rope_parameters")) {
    const json& rp = r.obj().at("rope_parameters");
    if (!rp.is_object()) return r.Error("rope_parameters", "must be an object");
    FieldReader rr(rp, "", "");
    FERRY_ASSIGN_OR_RETURN(std::string type, rr.String("rope_type", "default"));
    if (type != "default") {
      return absl::UnimplementedError(r.Error("rope_parameters.rope_type",
                                              absl::StrCat("is '", type, "'; only default RoPE is supported")).message());
    }
    if (rr.Has("rope_theta")) {
      auto theta = rr.Number("rope_theta");
      if (!theta.ok()) return r.Error("rope_parameters.rope_theta", "must be a number");
      c.rope_theta = *theta;
    }
  } else {
    FERRY_ASSIGN_OR_RETURN(c.rope_theta, r.Number("rope_theta", 10000.0));
    if (r.Has("rope_scaling")) {
      return absl::UnimplementedError(r.Error("rope_scaling", "is set; only default RoPE is supported").message());
    }
  }
  if (!(c.rope_theta > 0)) return r.Error("rope_theta", absl::StrCat("must be positive, got ", c.rope_theta));

  FERRY_ASSIGN_OR_RETURN(c.index_topk, r.Int("index_topk"));
  FERRY_ASSIGN_OR_RETURN(c.index_head_dim, r.Int("index_head_dim"));
  FERRY_ASSIGN_OR_RETURN(c.index_n_heads, r.Int("index_n_heads"));
  if (c.qk_rope_head_dim > c.index_head_dim) {
    return r.Error("index_head_dim", absl::StrCat("(", c.index_head_dim, ") is smaller than qk_rope_head_dim (",
                                                  c.qk_rope_head_dim, "), whose width the indexer ropes"));
  }

  FERRY_ASSIGN_OR_RETURN(c.intermediate_size, r.Int("intermediate_size"));
  FERRY_ASSIGN_OR_RETURN(c.moe_intermediate_size, r.Int("moe_intermediate_size"));
  FERRY_ASSIGN_OR_RETURN(c.n_routed_experts, r.Int("n_routed_experts"));
  FERRY_ASSIGN_OR_RETURN(c.num_experts_per_tok, r.Int("num_experts_per_tok"));
  FERRY_ASSIGN_OR_RETURN(c.n_shared_experts, r.Int("n_shared_experts", 1, /*allow_zero=*/true));
  FERRY_ASSIGN_OR_RETURN(c.n_group, r.Int("n_group", 1));
  FERRY_ASSIGN_OR_RETURN(c.topk_group, r.Int("topk_group", 1));
  FERRY_ASSIGN_OR_RETURN(c.norm_topk_prob, r.Bool("norm_topk_prob", true));
  FERRY_ASSIGN_OR_RETURN(double scaling, r.Number("routed_scaling_factor", 1.0));
  c.routed_scaling_factor = static_cast<float>(scaling);
  if (c.n_routed_experts % c.n_group != 0) {
    return r.Error("n_group", absl::StrCat("(", c.n_group, ") does not divide n_routed_experts (",
                                           c.n_routed_experts, ")"));
  }
  if (c.topk_group > c.n_group) {
    return r.Error("topk_group", absl::StrCat("(", c.topk_group, ") exceeds n_group (", c.n_group, ")"));
  }
  if (c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group)) {
    return r.Error("num_experts_per_tok",
                   absl::StrCat("(", c.num_experts_per_tok, ") exceeds the ",
                                c.topk_group * (c.n_routed_experts / c.n_group),
                                " experts that topk_group groups hold"));
  }
  if (c.n_routed_experts / c.n_group < 2 && c.n_group > 1) {
    return r.Error("n_group", "leaves fewer than 2 experts a group; group scores sum the top 2");
  }

  // Per-layer schedules. The explicit lists are authoritative; the older scalar forms fill in.
  FERRY_ASSIGN_OR_RETURN(c.layer_types, r.LayerList<AttentionType>("layer_types", c.num_layers, ParseAttentionType));
  if (c.layer_types.empty()) c.layer_types.assign(c.num_layers, AttentionType::kMla);
  FERRY_ASSIGN_OR_RETURN(c.indexer_types, r.LayerList<IndexerType>("indexer_types", c.num_layers, ParseIndexerType));
  if (c.indexer_types.empty()) {
    FERRY_ASSIGN_OR_RETURN(std::string pattern, r.String("index_topk_pattern"));
    if (!pattern.empty()) {
      if (static_cast<int64_t>(pattern.size()) != c.num_layers) {
        return r.Error("index_topk_pattern", absl::StrCat("has ", pattern.size(), " letters for ",
                                                          c.num_layers, " layers"));
      }
      for (char ch : pattern) {
        if (ch != 'F' && ch != 'S') return r.Error("index_topk_pattern", "must hold only 'F' and 'S'");
        c.indexer_types.push_back(ch == 'F' ? IndexerType::kFull : IndexerType::kShared);
      }
    } else {
      c.indexer_types.assign(c.num_layers, IndexerType::kFull);
    }
  }
  FERRY_ASSIGN_OR_RETURN(c.mlp_types, r.LayerList<MlpType>("mlp_layer_types", c.num_layers, ParseMlpType));
  if (c.mlp_types.empty()) {
    FERRY_ASSIGN_OR_RETURN(int64_t first_dense, r.Int("first_k_dense_replace", 0, /*allow_zero=*/true));
    for (int64_t i = 0; i < c.num_layers; ++i) {
      c.mlp_types.push_back(i < first_dense ? MlpType::kDense : MlpType::kSparse);
    }
  }
  // A shared indexer layer needs a full one before it among the MLA layers.
  bool seen_full = false;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.layer_types[i] != AttentionType::kMla) continue;
    if (c.indexer_types[i] == IndexerType::kFull) seen_full = true;
    else if (!seen_full) {
      return r.Error("indexer_types", absl::StrCat("makes layer ", i, " share the top-k of a full "
                                                   "indexer layer, but none comes before it"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseNextExtras(const FieldReader& r, ModelConfig& c) {
  FERRY_ASSIGN_OR_RETURN(c.index_kpool, r.Int("index_kpool", 16));
  FERRY_ASSIGN_OR_RETURN(c.index_kpool_always_select_tail, r.Bool("index_kpool_always_select_tail", true));
  if (c.index_topk % c.index_kpool != 0) {
    return r.Error("index_kpool", absl::StrCat("(", c.index_kpool, ") does not divide index_topk (",
                                               c.index_topk, ")"));
  }
  FERRY_ASSIGN_OR_RETURN(double limit, r.Number("swiglu_limit", 0.0));
  c.swiglu_limit = static_cast<float>(limit);
  FERRY_ASSIGN_OR_RETURN(c.linear_num_heads, r.Int("linear_num_heads"));
  FERRY_ASSIGN_OR_RETURN(c.linear_head_dim, r.Int("linear_head_dim"));
  FERRY_ASSIGN_OR_RETURN(c.linear_conv_kernel_dim, r.Int("linear_conv_kernel_dim", 4));
  FERRY_ASSIGN_OR_RETURN(double lb, r.Number("linear_lower_bound", -5.0));
  c.linear_lower_bound = static_cast<float>(lb);
  FERRY_ASSIGN_OR_RETURN(c.hc_mult, r.Int("hc_mult", 4));
  FERRY_ASSIGN_OR_RETURN(c.hc_sinkhorn_iters, r.IntAtMost("hc_sinkhorn_iters", 20, 1000));
  FERRY_ASSIGN_OR_RETURN(double hc_eps, r.Positive("hc_eps", 1e-6));
  c.hc_eps = static_cast<float>(hc_eps);
  if (c.qk_rope_head_dim != 0) {
    return r.Error("qk_rope_head_dim", absl::StrCat("is ", c.qk_rope_head_dim, "; glm5_next MLA is NoPE (0)"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* FamilyName(Family f) { return f == Family::kGlmMoeDsa ? "glm_moe_dsa" : "glm5_next"; }

std::string ModelConfig::LayerPrefix(int64_t layer) const {
  return absl::StrCat(weight_prefix, "layers.", layer, ".");
}

absl::StatusOr<ModelConfig> ParseModelConfig(const json& j, const std::string& source) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  ModelConfig c;
  FieldReader top(j, source, "");
  FERRY_ASSIGN_OR_RETURN(c.model_type, top.String("model_type"));
  if (c.model_type == "glm_moe_dsa") {
    c.family = Family::kGlmMoeDsa;
    c.weight_prefix = "model.";
    FERRY_RETURN_IF_ERROR(ParseText(top, c));
    for (int64_t i = 0; i < c.num_layers; ++i) {
      if (c.layer_types[i] != AttentionType::kMla) {
        return top.Error("layer_types", absl::StrCat("makes layer ", i, " linear_attention, which "
                                                     "glm_moe_dsa does not have"));
      }
    }
    return c;
  }
  if (c.model_type == "glm5_next") {
    c.family = Family::kGlm5Next;
    c.weight_prefix = "model.language_model.";
    if (!top.Has("text_config") || !j.at("text_config").is_object()) {
      return top.Error("text_config", "is missing; glm5_next keeps its text model there");
    }
    FieldReader text(j.at("text_config"), source, "text_config.");
    FERRY_RETURN_IF_ERROR(ParseText(text, c));
    FERRY_RETURN_IF_ERROR(ParseNextExtras(text, c));
    // transformers hands a shared layer the top-k of the layer just before it; KDA layers hand
    // on none, so a shared MLA layer must directly follow an MLA layer.
    for (int64_t i = 0; i < c.num_layers; ++i) {
      if (c.layer_types[i] == AttentionType::kMla && c.indexer_types[i] == IndexerType::kShared &&
          (i == 0 || c.layer_types[i - 1] != AttentionType::kMla)) {
        return text.Error("indexer_types", absl::StrCat("makes MLA layer ", i, " shared, but layer ", i - 1,
                                                        " is not an MLA layer to share with"));
      }
    }
    // The text model's tie flag may sit at the top level too.
    if (top.Has("tie_word_embeddings")) {
      FERRY_ASSIGN_OR_RETURN(c.tie_word_embeddings, top.Bool("tie_word_embeddings", false));
    }
    return c;
  }
  std::string what = c.model_type.empty() ? "is missing" : absl::StrCat("is '", c.model_type, "'");
  return absl::UnimplementedError(absl::StrCat(source, ": model_type ", what,
                                               "; this build serves glm_moe_dsa and glm5_next"));
}

}  // namespace ferry::model
