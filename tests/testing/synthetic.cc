#include "tests/testing/synthetic.h"

#include <cmath>
#include <random>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "model/checkpoint/config.h"
#include "model/checkpoint/tensor_list.h"
#include "tests/testing/files.h"

namespace ferry::testing {

nlohmann::json SmallDsaConfig() {
  return nlohmann::json{
      {"architectures", {"GlmMoeDsaForCausalLM"}},
      {"model_type", "glm_moe_dsa"},
      {"vocab_size", 96},
      {"hidden_size", 64},
      {"intermediate_size", 96},
      {"moe_intermediate_size", 16},
      {"num_hidden_layers", 4},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 4},
      {"q_lora_rank", 48},
      {"kv_lora_rank", 32},
      {"qk_nope_head_dim", 16},
      {"qk_rope_head_dim", 8},
      {"v_head_dim", 16},
      {"n_routed_experts", 16},
      {"num_experts_per_tok", 4},
      {"n_shared_experts", 1},
      {"n_group", 1},
      {"topk_group", 1},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 2.5},
      {"index_topk", 8},
      {"index_head_dim", 16},
      {"index_n_heads", 8},
      {"indexer_types", {"full", "full", "shared", "full"}},
      {"mlp_layer_types", {"dense", "sparse", "sparse", "sparse"}},
      {"rms_norm_eps", 1e-5},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
      {"max_position_embeddings", 4096},
      {"eos_token_id", 1},
      {"tie_word_embeddings", false},
  };
}

namespace {

// Draws each tensor's values in list order from one generator (the order fixes the bytes).
class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}
  RawTensor Draw(const model::ModelTensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    if (t.kind == model::ModelTensor::kLogUniform) {
      std::uniform_real_distribution<float> u(t.offset, t.scale);
      for (float& x : v) x = std::log(u(rng_));
    } else {
      std::normal_distribution<float> dist(0.0f, 1.0f);
      for (float& x : v) x = t.offset + t.scale * dist(rng_);
    }
    return Bf16Tensor(t.name, t.shape, v);
  }

 private:
  std::mt19937 rng_;
};

model::ModelConfig Parse(const nlohmann::json& config) {
  auto parsed = model::ParseModelConfig(config, "synthetic config.json");
  if (!parsed.ok()) throw std::runtime_error(std::string(parsed.status().message()));
  return *parsed;
}

std::vector<RawTensor> DrawAll(const std::vector<model::ModelTensor>& specs, uint32_t seed) {
  Gen g(seed);
  std::vector<RawTensor> t;
  t.reserve(specs.size());
  for (const model::ModelTensor& s : specs) t.push_back(g.Draw(s));
  return t;
}

}  // namespace

void WriteSyntheticDsa(const std::string& dir, const nlohmann::json& config, uint32_t seed, int shards) {
  const std::vector<RawTensor> t = DrawAll(model::DsaTensors(Parse(config)), seed);
  WriteFile(dir + "/config.json", config.dump(2));
  if (shards <= 1) {
    WriteSafetensors(dir + "/model.safetensors", t, {{"format", "pt"}});
    return;
  }
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  const size_t per = (t.size() + shards - 1) / shards;
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<RawTensor> part;
    for (size_t i = s * per; i < std::min(t.size(), (s + 1) * per); ++i) {
      part.push_back(t[i]);
      index["weight_map"][t[i].name] = name;
    }
    WriteSafetensors(dir + "/" + name, part, {{"format", "pt"}});
  }
  WriteFile(dir + "/model.safetensors.index.json", index.dump(2));
}

nlohmann::json SmallNextConfig() {
  nlohmann::json text = {
      {"model_type", "glm5_next_text"},
      {"vocab_size", 96},
      {"hidden_size", 64},
      {"intermediate_size", 96},
      {"moe_intermediate_size", 16},
      {"num_hidden_layers", 6},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 4},
      {"q_lora_rank", 48},
      {"kv_lora_rank", 32},
      {"qk_nope_head_dim", 16},
      {"qk_rope_head_dim", 0},
      {"v_head_dim", 16},
      {"n_routed_experts", 8},
      {"num_experts_per_tok", 2},
      {"n_shared_experts", 1},
      {"n_group", 1},
      {"topk_group", 1},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 2.5},
      {"index_topk", 8},
      {"index_head_dim", 16},
      {"index_n_heads", 4},
      {"index_kpool", 4},
      {"index_kpool_always_select_tail", true},
      {"linear_num_heads", 2},
      {"linear_head_dim", 16},
      {"linear_conv_kernel_dim", 4},
      {"linear_lower_bound", -5.0},
      {"hc_mult", 4},
      {"hc_sinkhorn_iters", 20},
      {"hc_eps", 1e-6},
      {"swiglu_limit", 10.0},
      {"rms_norm_eps", 1e-5},
      {"max_position_embeddings", 4096},
      {"layer_types", {"linear_attention", "linear_attention", "deepseek_sparse_attention", "linear_attention",
                       "deepseek_sparse_attention", "deepseek_sparse_attention"}},
      {"indexer_types", {"full", "full", "full", "full", "full", "shared"}},
      {"mlp_layer_types", {"dense", "sparse", "sparse", "sparse", "sparse", "sparse"}},
      {"tie_word_embeddings", false},
  };
  return nlohmann::json{{"architectures", {"Glm5NextForConditionalGeneration"}},
                        {"model_type", "glm5_next"},
                        {"tie_word_embeddings", false},
                        {"text_config", text}};
}

void WriteSyntheticNext(const std::string& dir, const nlohmann::json& config, uint32_t seed) {
  const std::vector<RawTensor> t = DrawAll(model::NextTensors(Parse(config)), seed);
  WriteFile(dir + "/config.json", config.dump(2));
  WriteSafetensors(dir + "/model.safetensors", t, {{"format", "pt"}});
}

}  // namespace ferry::testing
