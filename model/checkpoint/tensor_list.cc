#include "model/checkpoint/tensor_list.h"

#include <cmath>
#include <utility>

namespace ferry::model {
namespace {

// The listing's vocabulary. A Linear weight [rows, cols] (values 1.5 / sqrt(fan_in)); a matrix
// that is a plain parameter rather than a Linear (same values); a norm weight (1 + 0.1 N); a
// small centred vector; any other shape; A_log's log-uniform values.
ModelTensor Linear(const std::string& name, int64_t rows, int64_t cols) {
  ModelTensor t{name, {rows, cols}};
  t.linear = true;
  t.scale = 1.5f / std::sqrt(static_cast<float>(cols));
  return t;
}
ModelTensor Param(const std::string& name, int64_t rows, int64_t cols) {
  ModelTensor t = Linear(name, rows, cols);
  t.linear = false;
  return t;
}
ModelTensor Norm(const std::string& name, int64_t n) {
  ModelTensor t{name, {n}};
  t.scale = 0.1f;
  t.offset = 1.0f;
  return t;
}
ModelTensor Small(const std::string& name, int64_t n, float scale) {
  ModelTensor t{name, {n}};
  t.scale = scale;
  return t;
}
ModelTensor Shaped(const std::string& name, std::vector<int64_t> shape, float scale, float offset) {
  ModelTensor t{name, std::move(shape)};
  t.scale = scale;
  t.offset = offset;
  return t;
}
ModelTensor LogUniform(const std::string& name, int64_t n, float lo, float hi) {
  ModelTensor t{name, {n}};
  t.kind = ModelTensor::kLogUniform;
  t.scale = hi;
  t.offset = lo;
  return t;
}
// `t`, split over the ranks along `dim` in `units` equal parts.
ModelTensor Split(ModelTensor t, int dim, int64_t units) {
  t.split_dim = dim;
  t.split_units = units;
  return t;
}

// Layer i's dense MLP or MoE (router, bias, experts, shared expert) under `m`: gate and up split
// by rows, down by columns, in units of the intermediate width (model/blocks/ffn.cc).
void AddFfn(const ModelConfig& c, int64_t i, const std::string& m, std::vector<ModelTensor>* t) {
  const int64_t D = c.hidden_size;
  auto mlp = [&](const std::string& q, int64_t inter) {
    t->push_back(Split(Linear(q + "gate_proj.weight", inter, D), 0, inter));
    t->push_back(Split(Linear(q + "up_proj.weight", inter, D), 0, inter));
    t->push_back(Split(Linear(q + "down_proj.weight", D, inter), 1, inter));
  };
  if (c.mlp_types[static_cast<size_t>(i)] == MlpType::kDense) {
    mlp(m, c.intermediate_size);
    return;
  }
  t->push_back(Param(m + "gate.weight", c.n_routed_experts, D));
  t->push_back(Small(m + "gate.e_score_correction_bias", c.n_routed_experts, 0.05f));
  for (int64_t e = 0; e < c.n_routed_experts; ++e) mlp(m + "experts." + std::to_string(e) + ".", c.moe_intermediate_size);
  if (c.n_shared_experts > 0) mlp(m + "shared_experts.", c.moe_intermediate_size * c.n_shared_experts);
}

}  // namespace

int64_t ModelTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ModelTensor> DsaTensors(const ModelConfig& c) {
  std::vector<ModelTensor> t;
  const int64_t D = c.hidden_size, H = c.num_heads, L = c.kv_lora_rank, N = c.qk_nope_head_dim,
                P = c.qk_rope_head_dim, V = c.v_head_dim, QL = c.q_lora_rank;
  t.push_back(Param("model.embed_tokens.weight", c.vocab_size, D));
  t.push_back(Norm("model.norm.weight", D));
  if (!c.tie_word_embeddings) t.push_back(Linear("lm_head.weight", c.vocab_size, D));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = c.LayerPrefix(i);
    t.push_back(Norm(p + "input_layernorm.weight", D));
    t.push_back(Norm(p + "post_attention_layernorm.weight", D));
    const std::string a = p + "self_attn.";
    t.push_back(Linear(a + "q_a_proj.weight", QL, D));
    t.push_back(Norm(a + "q_a_layernorm.weight", QL));
    t.push_back(Split(Linear(a + "q_b_proj.weight", H * (N + P), QL), 0, H));
    t.push_back(Linear(a + "kv_a_proj_with_mqa.weight", L + P, D));
    t.push_back(Norm(a + "kv_a_layernorm.weight", L));
    t.push_back(Split(Linear(a + "kv_b_proj.weight", H * (N + V), L), 0, H));
    t.push_back(Split(Linear(a + "o_proj.weight", D, H * V), 1, H));
    if (c.indexer_types[i] == IndexerType::kFull) {
      t.push_back(Linear(a + "indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, QL));
      t.push_back(Linear(a + "indexer.wk.weight", c.index_head_dim, D));
      t.push_back(Norm(a + "indexer.k_norm.weight", c.index_head_dim));
      t.push_back(Small(a + "indexer.k_norm.bias", c.index_head_dim, 0.2f));
      t.push_back(Linear(a + "indexer.weights_proj.weight", c.index_n_heads, D));
    }
    AddFfn(c, i, p + "mlp.", &t);
  }
  return t;
}

std::vector<ModelTensor> NextTensors(const ModelConfig& c) {
  std::vector<ModelTensor> t;
  const int64_t D = c.hidden_size, H = c.num_heads, L = c.kv_lora_rank, N = c.qk_nope_head_dim, V = c.v_head_dim,
                QL = c.q_lora_rank, S = c.hc_mult, M = (2 + S) * S, Hl = c.linear_num_heads, d = c.linear_head_dim,
                C = Hl * d, K = c.linear_conv_kernel_dim, Di = c.index_head_dim;
  const std::string top = c.weight_prefix;
  t.push_back(Param(top + "embed_tokens.weight", c.vocab_size, D));
  t.push_back(Norm(top + "norm.weight", D));
  if (!c.tie_word_embeddings) t.push_back(Linear("lm_head.weight", c.vocab_size, D));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = c.LayerPrefix(i);
    for (const char* site : {"hc_attn", "hc_ffn"}) {
      t.push_back(Param(p + site + "_fn", M, S * D));
      t.push_back(Small(p + site + "_base", M, 0.2f));
      t.push_back(Shaped(p + site + "_scale", {3}, 0.2f, 1.0f));
    }
    t.push_back(Norm(p + "input_layernorm.weight", D));
    t.push_back(Norm(p + "post_attention_layernorm.weight", D));
    const std::string a = p + "self_attn.";
    if (c.layer_types[i] == AttentionType::kKda) {
      // Channels split by KDA head (model/blocks/kda.cc); f_a / g_a and o_norm are replicated.
      for (const char* x : {"q", "k", "v"}) {
        t.push_back(Split(Linear(a + x + "_proj.weight", C, D), 0, Hl));
        t.push_back(Split(Shaped(a + x + "_conv1d.weight", {C, 1, K}, 0.5f, 0.0f), 0, Hl));
      }
      t.push_back(Linear(a + "f_a_proj.weight", d, D));
      t.push_back(Split(Linear(a + "f_b_proj.weight", C, d), 0, Hl));
      t.push_back(Linear(a + "g_a_proj.weight", d, D));
      t.push_back(Split(Linear(a + "g_b_proj.weight", C, d), 0, Hl));
      t.push_back(Split(Linear(a + "b_proj.weight", Hl, D), 0, Hl));
      t.push_back(Split(LogUniform(a + "A_log", Hl, 1.0f, 16.0f), 0, Hl));
      t.push_back(Split(Shaped(a + "dt_bias", {C}, 0.5f, -2.0f), 0, Hl));
      t.push_back(Norm(a + "o_norm.weight", d));
      t.push_back(Split(Linear(a + "o_proj.weight", D, C), 1, Hl));
    } else {
      t.push_back(Linear(a + "q_a_proj.weight", QL, D));
      t.push_back(Norm(a + "q_a_layernorm.weight", QL));
      t.push_back(Split(Linear(a + "q_b_proj.weight", H * N, QL), 0, H));
      t.push_back(Linear(a + "kv_a_proj_with_mqa.weight", L, D));
      t.push_back(Norm(a + "kv_a_layernorm.weight", L));
      t.push_back(Split(Linear(a + "kv_b_proj.weight", H * (N + V), L), 0, H));
      t.push_back(Split(Linear(a + "o_proj.weight", D, H * V), 1, H));
      if (c.indexer_types[i] == IndexerType::kFull) {
        const std::string ip = a + "indexer.";
        t.push_back(Linear(ip + "wq_b.weight", c.index_n_heads * Di, QL));
        t.push_back(Linear(ip + "wk.weight", Di, D));
        t.push_back(Norm(ip + "k_norm.weight", Di));
        t.push_back(Small(ip + "k_norm.bias", Di, 0.2f));
        t.push_back(Linear(ip + "weights_proj.weight", c.index_n_heads, D));
        t.push_back(Param(ip + "index_kpool_compress_gate", Di, D));
        t.push_back(Shaped(ip + "index_kpool_compress_ape", {c.index_kpool, Di}, 0.2f, 0.0f));
      }
    }
    AddFfn(c, i, p + "mlp.", &t);
  }
  return t;
}

std::vector<ModelTensor> ModelTensors(const ModelConfig& c) {
  return c.family == Family::kGlmMoeDsa ? DsaTensors(c) : NextTensors(c);
}

}  // namespace ferry::model
