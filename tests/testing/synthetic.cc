#include "tests/testing/synthetic.h"

#include <cmath>
#include <random>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "model/checkpoint/config.h"
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

// The tensor list's vocabulary: a Linear weight (scale 1.5 / sqrt(fan_in)), a norm weight
// (1 + 0.1 N), a small centred vector, any other shape, and A_log's log-uniform values.
SyntheticTensor Matrix(const std::string& name, int64_t rows, int64_t cols) {
  return {name, {rows, cols}, SyntheticTensor::kNormal, 1.5f / std::sqrt(static_cast<float>(cols)), 0.0f};
}
SyntheticTensor Norm(const std::string& name, int64_t n) { return {name, {n}, SyntheticTensor::kNormal, 0.1f, 1.0f}; }
SyntheticTensor Small(const std::string& name, int64_t n, float scale) {
  return {name, {n}, SyntheticTensor::kNormal, scale, 0.0f};
}
SyntheticTensor Shaped(const std::string& name, std::vector<int64_t> shape, float scale, float offset) {
  return {name, std::move(shape), SyntheticTensor::kNormal, scale, offset};
}
SyntheticTensor LogUniform(const std::string& name, int64_t n, float lo, float hi) {
  return {name, {n}, SyntheticTensor::kLogUniform, hi, lo};
}

// Draws each tensor's values in list order from one generator (the order fixes the bytes).
class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}
  RawTensor Draw(const SyntheticTensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    if (t.kind == SyntheticTensor::kLogUniform) {
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

// Layer i's dense MLP or MoE (router, bias, experts, shared expert) under `m`.
void AddFfn(const model::ModelConfig& c, int64_t i, const std::string& m, std::vector<SyntheticTensor>* t) {
  const int64_t D = c.hidden_size;
  auto mlp = [&](const std::string& q, int64_t inter) {
    t->push_back(Matrix(q + "gate_proj.weight", inter, D));
    t->push_back(Matrix(q + "up_proj.weight", inter, D));
    t->push_back(Matrix(q + "down_proj.weight", D, inter));
  };
  if (c.mlp_types[static_cast<size_t>(i)] == model::MlpType::kDense) {
    mlp(m, c.intermediate_size);
    return;
  }
  t->push_back(Matrix(m + "gate.weight", c.n_routed_experts, D));
  t->push_back(Small(m + "gate.e_score_correction_bias", c.n_routed_experts, 0.05f));
  for (int64_t e = 0; e < c.n_routed_experts; ++e) mlp(m + "experts." + std::to_string(e) + ".", c.moe_intermediate_size);
  if (c.n_shared_experts > 0) mlp(m + "shared_experts.", c.moe_intermediate_size * c.n_shared_experts);
}

model::ModelConfig Parse(const nlohmann::json& config) {
  auto parsed = model::ParseModelConfig(config, "synthetic config.json");
  if (!parsed.ok()) throw std::runtime_error(std::string(parsed.status().message()));
  return *parsed;
}

std::vector<RawTensor> DrawAll(const std::vector<SyntheticTensor>& specs, uint32_t seed) {
  Gen g(seed);
  std::vector<RawTensor> t;
  t.reserve(specs.size());
  for (const SyntheticTensor& s : specs) t.push_back(g.Draw(s));
  return t;
}

}  // namespace

int64_t SyntheticTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<SyntheticTensor> SyntheticDsaTensors(const model::ModelConfig& c) {
  std::vector<SyntheticTensor> t;
  const int64_t D = c.hidden_size, H = c.num_heads, L = c.kv_lora_rank, N = c.qk_nope_head_dim,
                P = c.qk_rope_head_dim, V = c.v_head_dim, QL = c.q_lora_rank;
  t.push_back(Matrix("model.embed_tokens.weight", c.vocab_size, D));
  t.push_back(Norm("model.norm.weight", D));
  if (!c.tie_word_embeddings) t.push_back(Matrix("lm_head.weight", c.vocab_size, D));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = c.LayerPrefix(i);
    t.push_back(Norm(p + "input_layernorm.weight", D));
    t.push_back(Norm(p + "post_attention_layernorm.weight", D));
    const std::string a = p + "self_attn.";
    t.push_back(Matrix(a + "q_a_proj.weight", QL, D));
    t.push_back(Norm(a + "q_a_layernorm.weight", QL));
    t.push_back(Matrix(a + "q_b_proj.weight", H * (N + P), QL));
    t.push_back(Matrix(a + "kv_a_proj_with_mqa.weight", L + P, D));
    t.push_back(Norm(a + "kv_a_layernorm.weight", L));
    t.push_back(Matrix(a + "kv_b_proj.weight", H * (N + V), L));
    t.push_back(Matrix(a + "o_proj.weight", D, H * V));
    if (c.indexer_types[i] == model::IndexerType::kFull) {
      t.push_back(Matrix(a + "indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, QL));
      t.push_back(Matrix(a + "indexer.wk.weight", c.index_head_dim, D));
      t.push_back(Norm(a + "indexer.k_norm.weight", c.index_head_dim));
      t.push_back(Small(a + "indexer.k_norm.bias", c.index_head_dim, 0.2f));
      t.push_back(Matrix(a + "indexer.weights_proj.weight", c.index_n_heads, D));
    }
    AddFfn(c, i, p + "mlp.", &t);
  }
  return t;
}

void WriteSyntheticDsa(const std::string& dir, const nlohmann::json& config, uint32_t seed, int shards) {
  const std::vector<RawTensor> t = DrawAll(SyntheticDsaTensors(Parse(config)), seed);
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

std::vector<SyntheticTensor> SyntheticNextTensors(const model::ModelConfig& c) {
  std::vector<SyntheticTensor> t;
  const int64_t D = c.hidden_size, H = c.num_heads, L = c.kv_lora_rank, N = c.qk_nope_head_dim, V = c.v_head_dim,
                QL = c.q_lora_rank, S = c.hc_mult, M = (2 + S) * S, Hl = c.linear_num_heads, d = c.linear_head_dim,
                C = Hl * d, K = c.linear_conv_kernel_dim, Di = c.index_head_dim;
  const std::string top = c.weight_prefix;
  t.push_back(Matrix(top + "embed_tokens.weight", c.vocab_size, D));
  t.push_back(Norm(top + "norm.weight", D));
  if (!c.tie_word_embeddings) t.push_back(Matrix("lm_head.weight", c.vocab_size, D));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = c.LayerPrefix(i);
    for (const char* site : {"hc_attn", "hc_ffn"}) {
      t.push_back(Matrix(p + site + "_fn", M, S * D));
      t.push_back(Small(p + site + "_base", M, 0.2f));
      t.push_back(Shaped(p + site + "_scale", {3}, 0.2f, 1.0f));
    }
    t.push_back(Norm(p + "input_layernorm.weight", D));
    t.push_back(Norm(p + "post_attention_layernorm.weight", D));
    const std::string a = p + "self_attn.";
    if (c.layer_types[i] == model::AttentionType::kKda) {
      for (const char* x : {"q", "k", "v"}) {
        t.push_back(Matrix(a + x + "_proj.weight", C, D));
        t.push_back(Shaped(a + x + "_conv1d.weight", {C, 1, K}, 0.5f, 0.0f));
      }
      t.push_back(Matrix(a + "f_a_proj.weight", d, D));
      t.push_back(Matrix(a + "f_b_proj.weight", C, d));
      t.push_back(Matrix(a + "g_a_proj.weight", d, D));
      t.push_back(Matrix(a + "g_b_proj.weight", C, d));
      t.push_back(Matrix(a + "b_proj.weight", Hl, D));
      t.push_back(LogUniform(a + "A_log", Hl, 1.0f, 16.0f));
      t.push_back(Shaped(a + "dt_bias", {C}, 0.5f, -2.0f));
      t.push_back(Norm(a + "o_norm.weight", d));
      t.push_back(Matrix(a + "o_proj.weight", D, C));
    } else {
      t.push_back(Matrix(a + "q_a_proj.weight", QL, D));
      t.push_back(Norm(a + "q_a_layernorm.weight", QL));
      t.push_back(Matrix(a + "q_b_proj.weight", H * N, QL));
      t.push_back(Matrix(a + "kv_a_proj_with_mqa.weight", L, D));
      t.push_back(Norm(a + "kv_a_layernorm.weight", L));
      t.push_back(Matrix(a + "kv_b_proj.weight", H * (N + V), L));
      t.push_back(Matrix(a + "o_proj.weight", D, H * V));
      if (c.indexer_types[i] == model::IndexerType::kFull) {
        const std::string ip = a + "indexer.";
        t.push_back(Matrix(ip + "wq_b.weight", c.index_n_heads * Di, QL));
        t.push_back(Matrix(ip + "wk.weight", Di, D));
        t.push_back(Norm(ip + "k_norm.weight", Di));
        t.push_back(Small(ip + "k_norm.bias", Di, 0.2f));
        t.push_back(Matrix(ip + "weights_proj.weight", c.index_n_heads, D));
        t.push_back(Matrix(ip + "index_kpool_compress_gate", Di, D));
        t.push_back(Shaped(ip + "index_kpool_compress_ape", {c.index_kpool, Di}, 0.2f, 0.0f));
      }
    }
    AddFfn(c, i, p + "mlp.", &t);
  }
  return t;
}

void WriteSyntheticNext(const std::string& dir, const nlohmann::json& config, uint32_t seed) {
  const std::vector<RawTensor> t = DrawAll(SyntheticNextTensors(Parse(config)), seed);
  WriteFile(dir + "/config.json", config.dump(2));
  WriteSafetensors(dir + "/model.safetensors", t, {{"format", "pt"}});
}

}  // namespace ferry::testing
