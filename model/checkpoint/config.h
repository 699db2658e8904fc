// The model configuration: every config.json field that changes the math of the two GLM-5.x
// families (see docs/models.md), parsed and checked once at load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace ferry::model {

enum class Family { kGlmMoeDsa, kGlm5Next };
// layer_types: "deepseek_sparse_attention" (MLA + indexer) or "linear_attention" (KDA).
enum class AttentionType { kMla, kKda };
// indexer_types: "full" computes the top-k; "shared" reuses the latest full layer's top-k.
enum class IndexerType { kFull, kShared };
// mlp_layer_types: "dense" (SwiGLU MLP) or "sparse" (routed experts + shared expert).
enum class MlpType { kDense, kSparse };

const char* FamilyName(Family f);

struct ModelConfig {
  Family family = Family::kGlmMoeDsa;
  std::string model_type;  // "glm_moe_dsa" or "glm5_next"
  // Prefix of the text model's tensors: "model." or "model.language_model.".
  std::string weight_prefix = "model.";

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  float rms_norm_eps = 1e-5f;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::vector<int32_t> eos_token_ids;  // may be empty
  int32_t bos_token_id = -1;           // -1: none

  // MLA.
  int64_t num_heads = 0;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;  // 0 for glm5_next (NoPE)
  int64_t v_head_dim = 0;
  double rope_theta = 10000.0;

  // Indexer (DSA). glm5_next pools keys in groups of index_kpool (1 = no pooling).
  int64_t index_topk = 0;
  int64_t index_head_dim = 0;
  int64_t index_n_heads = 0;
  int64_t index_kpool = 1;
  bool index_kpool_always_select_tail = true;

  // FFN / MoE.
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_shared_experts = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  float swiglu_limit = 0.0f;  // 0: no clamp (glm_moe_dsa)

  // KDA (glm5_next linear_attention layers).
  int64_t linear_num_heads = 0;
  int64_t linear_head_dim = 0;
  int64_t linear_conv_kernel_dim = 0;
  float linear_lower_bound = -5.0f;

  // Hyper-connections (glm5_next).
  int64_t hc_mult = 1;
  int64_t hc_sinkhorn_iters = 0;
  float hc_eps = 1e-6f;

  // Per layer, num_layers entries each.
  std::vector<AttentionType> layer_types;
  std::vector<IndexerType> indexer_types;
  std::vector<MlpType> mlp_types;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Width of one latent cache row of an MLA layer: c (kv_lora) followed by k_pe (rope).
  int64_t latent_row_width() const { return kv_lora_rank + qk_rope_head_dim; }
  // Whether some layer keeps a recurrent state (KDA) that cannot be rewound by position: a kept
  // conversation then resumes only at the lengths it kept a snapshot of, not at any prefix.
  bool has_linear_attention() const {
    for (AttentionType t : layer_types) {
      if (t == AttentionType::kKda) return true;
    }
    return false;
  }
  std::string LayerPrefix(int64_t layer) const;  // "model.layers.3."
};

// Parses a config.json object. `source` names the file in error messages.
// Errors: INVALID_ARGUMENT naming the field for a missing, mistyped or inconsistent value,
// UNIMPLEMENTED for an unknown architecture or an unsupported feature (rope scaling, biases).
absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& json, const std::string& source);

}  // namespace ferry::model
