#include "tests/testing/dsa_oracle.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/config.h"

namespace ferry::testing {
namespace {

using Vec = std::vector<double>;

struct Ctx {
  const model::Checkpoint* ck;
  model::ModelConfig c;
  Vec Load(const std::string& name, std::vector<int64_t> shape) const {
    auto v = ck->LoadF32(name, shape);
    if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
    return Vec(v->begin(), v->end());
  }
};

// y[T, out] = x[T, in] W[out, in]^T
Vec Mm(const Vec& x, int64_t T, int64_t in, const Vec& w, int64_t out) {
  Vec y(T * out, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t k = 0; k < in; ++k) s += x[t * in + k] * w[o * in + k];
      y[t * out + o] = s;
    }
  return y;
}

Vec Rms(const Vec& x, int64_t T, int64_t D, const Vec& w, double eps) {
  Vec y(x.size());
  for (int64_t t = 0; t < T; ++t) {
    double ms = 0;
    for (int64_t i = 0; i < D; ++i) ms += x[t * D + i] * x[t * D + i];
    const double inv = 1.0 / std::sqrt(ms / D + eps);
    for (int64_t i = 0; i < D; ++i) y[t * D + i] = w[i] * x[t * D + i] * inv;
  }
  return y;
}

// Rotates pairs (2i, 2i+1) of v[0..dim) by pos * theta^(-2i/dim).
void Rope(double* v, int64_t dim, int64_t pos, double theta) {
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double ang = pos * std::pow(theta, -2.0 * i / dim);
    const double a = v[2 * i], b = v[2 * i + 1];
    v[2 * i] = a * std::cos(ang) - b * std::sin(ang);
    v[2 * i + 1] = a * std::sin(ang) + b * std::cos(ang);
  }
}

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

Vec Mlp(const Ctx& cx, const std::string& p, const Vec& x, int64_t T, int64_t inter) {
  const int64_t D = cx.c.hidden_size;
  Vec g = Mm(x, T, D, cx.Load(p + "gate_proj.weight", {inter, D}), inter);
  Vec u = Mm(x, T, D, cx.Load(p + "up_proj.weight", {inter, D}), inter);
  for (size_t i = 0; i < g.size(); ++i) g[i] = Silu(g[i]) * u[i];
  return Mm(g, T, inter, cx.Load(p + "down_proj.weight", {D, inter}), D);
}

Vec Moe(const Ctx& cx, const std::string& p, const Vec& x, int64_t T) {
  const auto& c = cx.c;
  const int64_t D = c.hidden_size, E = c.n_routed_experts, per = E / c.n_group;
  Vec logits = Mm(x, T, D, cx.Load(p + "gate.weight", {E, D}), E);
  Vec bias = cx.Load(p + "gate.e_score_correction_bias", {E});
  Vec y(T * D, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    Vec s(E), ch(E);
    for (int64_t e = 0; e < E; ++e) s[e] = 1.0 / (1.0 + std::exp(-logits[t * E + e])), ch[e] = s[e] + bias[e];
    std::vector<std::pair<double, int64_t>> gs;
    for (int64_t g = 0; g < c.n_group; ++g) {
      Vec m(ch.begin() + g * per, ch.begin() + (g + 1) * per);
      std::sort(m.rbegin(), m.rend());
      gs.push_back({-(m[0] + (per > 1 ? m[1] : 0.0)), g});
    }
    std::sort(gs.begin(), gs.end());
    std::vector<std::pair<double, int64_t>> cand;
    for (int64_t k = 0; k < c.topk_group; ++k)
      for (int64_t e = gs[k].second * per; e < (gs[k].second + 1) * per; ++e) cand.push_back({-ch[e], e});
    std::sort(cand.begin(), cand.end());
    double sum = 0;
    for (int64_t k = 0; k < c.num_experts_per_tok; ++k) sum += s[cand[k].second];
    Vec row(x.begin() + t * D, x.begin() + (t + 1) * D);
    for (int64_t k = 0; k < c.num_experts_per_tok; ++k) {
      const int64_t e = cand[k].second;
      double w = s[e];
      if (c.norm_topk_prob) w /= sum + 1e-20;
      w *= c.routed_scaling_factor;
      Vec o = Mlp(cx, p + "experts." + std::to_string(e) + ".", row, 1, c.moe_intermediate_size);
      for (int64_t i = 0; i < D; ++i) y[t * D + i] += w * o[i];
    }
  }
  if (c.n_shared_experts > 0) {
    Vec sh = Mlp(cx, p + "shared_experts.", x, T, c.moe_intermediate_size * c.n_shared_experts);
    for (size_t i = 0; i < y.size(); ++i) y[i] += sh[i];
  }
  return y;
}

}  // namespace

std::vector<double> DsaOracleLogits(const std::string& dir, const std::vector<int32_t>& tokens) {
  auto ck = model::Checkpoint::Open(dir);
  if (!ck.ok()) throw std::runtime_error(std::string(ck.status().message()));
  auto cfg = model::ParseModelConfig(ck->config_json(), "config.json");
  if (!cfg.ok()) throw std::runtime_error(std::string(cfg.status().message()));
  Ctx cx{&*ck, *cfg};
  const auto& c = cx.c;
  const int64_t T = static_cast<int64_t>(tokens.size()), D = c.hidden_size, H = c.num_heads,
                L = c.kv_lora_rank, N = c.qk_nope_head_dim, P = c.qk_rope_head_dim, V = c.v_head_dim,
                QL = c.q_lora_rank, Hi = c.index_n_heads, Di = c.index_head_dim;
  Vec emb = cx.Load("model.embed_tokens.weight", {c.vocab_size, D});
  Vec x(T * D);
  for (int64_t t = 0; t < T; ++t) std::copy_n(emb.begin() + tokens[t] * D, D, x.begin() + t * D);

  std::vector<std::vector<int64_t>> sel(T);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = c.LayerPrefix(l), a = p + "self_attn.";
    Vec h = Rms(x, T, D, cx.Load(p + "input_layernorm.weight", {D}), c.rms_norm_eps);
    Vec cq = Rms(Mm(h, T, D, cx.Load(a + "q_a_proj.weight", {QL, D}), QL), T, QL,
                 cx.Load(a + "q_a_layernorm.weight", {QL}), 1e-6);
    Vec q = Mm(cq, T, QL, cx.Load(a + "q_b_proj.weight", {H * (N + P), QL}), H * (N + P));
    Vec kv = Mm(h, T, D, cx.Load(a + "kv_a_proj_with_mqa.weight", {L + P, D}), L + P);
    Vec cn(T * L), kpe(T * P);
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(kv.begin() + t * (L + P), L, cn.begin() + t * L);
      std::copy_n(kv.begin() + t * (L + P) + L, P, kpe.begin() + t * P);
      Rope(&kpe[t * P], P, t, c.rope_theta);
      for (int64_t hh = 0; hh < H; ++hh) Rope(&q[(t * H + hh) * (N + P) + N], P, t, c.rope_theta);
    }
    cn = Rms(cn, T, L, cx.Load(a + "kv_a_layernorm.weight", {L}), 1e-6);
    Vec kvb = Mm(cn, T, L, cx.Load(a + "kv_b_proj.weight", {H * (N + V), L}), H * (N + V));

    if (c.indexer_types[l] == model::IndexerType::kFull) {
      const std::string ip = a + "indexer.";
      Vec qi = Mm(cq, T, QL, cx.Load(ip + "wq_b.weight", {Hi * Di, QL}), Hi * Di);
      Vec ki = Mm(h, T, D, cx.Load(ip + "wk.weight", {Di, D}), Di);
      Vec kw = cx.Load(ip + "k_norm.weight", {Di}), kb = cx.Load(ip + "k_norm.bias", {Di});
      Vec hw = Mm(h, T, D, cx.Load(ip + "weights_proj.weight", {Hi, D}), Hi);
      for (int64_t t = 0; t < T; ++t) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < Di; ++i) mean += ki[t * Di + i];
        mean /= Di;
        for (int64_t i = 0; i < Di; ++i) var += (ki[t * Di + i] - mean) * (ki[t * Di + i] - mean);
        var /= Di;
        for (int64_t i = 0; i < Di; ++i) ki[t * Di + i] = (ki[t * Di + i] - mean) / std::sqrt(var + 1e-6) * kw[i] + kb[i];
        Rope(&ki[t * Di], P, t, c.rope_theta);
        for (int64_t hh = 0; hh < Hi; ++hh) Rope(&qi[(t * Hi + hh) * Di], P, t, c.rope_theta);
      }
      for (int64_t t = 0; t < T; ++t) {
        std::vector<std::pair<double, int64_t>> sc;
        for (int64_t s = 0; s <= t; ++s) {
          double v = 0;
          for (int64_t hh = 0; hh < Hi; ++hh) {
            double d = 0;
            for (int64_t i = 0; i < Di; ++i) d += qi[(t * Hi + hh) * Di + i] * ki[s * Di + i];
            v += hw[t * Hi + hh] / std::sqrt(double(Hi)) * std::max(0.0, d / std::sqrt(double(Di)));
          }
          sc.push_back({-v, s});
        }
        std::sort(sc.begin(), sc.end());
        sel[t].clear();
        for (int64_t k = 0; k < std::min<int64_t>(c.index_topk, t + 1); ++k) sel[t].push_back(sc[k].second);
      }
    }
    Vec o(T * H * V, 0.0);
    const double scale = 1.0 / std::sqrt(double(N + P));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hh = 0; hh < H; ++hh) {
        Vec sc;
        for (int64_t s : sel[t]) {
          double v = 0;
          for (int64_t i = 0; i < N; ++i) v += q[(t * H + hh) * (N + P) + i] * kvb[(s * H + hh) * (N + V) + i];
          for (int64_t i = 0; i < P; ++i) v += q[(t * H + hh) * (N + P) + N + i] * kpe[s * P + i];
          sc.push_back(v * scale);
        }
        const double m = *std::max_element(sc.begin(), sc.end());
        double den = 0;
        for (double& v : sc) den += (v = std::exp(v - m));
        for (size_t j = 0; j < sel[t].size(); ++j)
          for (int64_t i = 0; i < V; ++i) o[(t * H + hh) * V + i] += sc[j] / den * kvb[(sel[t][j] * H + hh) * (N + V) + N + i];
      }
    Vec att = Mm(o, T, H * V, cx.Load(a + "o_proj.weight", {D, H * V}), D);
    for (size_t i = 0; i < x.size(); ++i) x[i] += att[i];
    Vec b = Rms(x, T, D, cx.Load(p + "post_attention_layernorm.weight", {D}), c.rms_norm_eps);
    Vec f = c.mlp_types[l] == model::MlpType::kDense ? Mlp(cx, p + "mlp.", b, T, c.intermediate_size)
                                                     : Moe(cx, p + "mlp.", b, T);
    for (size_t i = 0; i < x.size(); ++i) x[i] += f[i];
  }
  x = Rms(x, T, D, cx.Load("model.norm.weight", {D}), c.rms_norm_eps);
  const std::string head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  return Mm(x, T, D, cx.Load(head, {c.vocab_size, D}), c.vocab_size);
}

}  // namespace ferry::testing
