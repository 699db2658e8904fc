// KDA: the chunked closed form against the token-by-token recurrence on random inputs, and the
// recurrence against a float64 reading of the rule.
#include "model/blocks/kda.h"

#include <cmath>
#include <random>

#include "tests/catch.h"

namespace ferry::model {
namespace {

ModelConfig SmallKda() {
  ModelConfig c;
  c.hidden_size = 16;
  c.linear_num_heads = 3;
  c.linear_head_dim = 8;
  c.linear_conv_kernel_dim = 4;
  c.linear_lower_bound = -5.0f;
  c.rms_norm_eps = 1e-5f;
  return c;
}

// Conv weights and per-token inputs drawn at random; g spans the whole (-5, 0) range.
void RandomInputs(const ModelConfig& c, int64_t n, std::mt19937& rng, KdaWeights* w, KdaInputs* in) {
  const int64_t H = c.linear_num_heads, C = H * c.linear_head_dim, K = c.linear_conv_kernel_dim;
  w->heads = H;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (Weight* cw : {&w->q_conv, &w->k_conv, &w->v_conv}) {
    cw->rows = C;
    cw->cols = K;
    cw->data.resize(C * K);
    for (float& x : cw->data) x = 0.5f * nd(rng);
  }
  for (auto* v : {&in->q, &in->k, &in->v}) {
    v->resize(n * C);
    for (float& x : *v) x = nd(rng);
  }
  in->g.resize(n * C);
  for (float& x : in->g) x = c.linear_lower_bound * ud(rng);
  in->beta.resize(n * H);
  for (float& x : in->beta) x = ud(rng);
}

double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * double(a[i] - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

TEST_CASE("KDA: chunked form equals the recurrence - whatever the chunk alignment", "[kda]") {
  const ModelConfig c = SmallKda();
  const int64_t C = c.linear_num_heads * c.linear_head_dim, n = 70;
  std::mt19937 rng(11);
  KdaWeights w;
  KdaInputs in;
  RandomInputs(c, n, rng, &w, &in);
  KdaState rec = KdaState::Zero(c, c.linear_num_heads);
  std::vector<float> o_rec(n * C);
  KdaRun(w, c, in, 0, n, 5, 0, &rec, o_rec.data());
  for (int64_t chunk : {1, 3, 16, 64}) {
    KdaState st = KdaState::Zero(c, c.linear_num_heads);
    std::vector<float> o(n * C);
    KdaRun(w, c, in, 0, n, 5, chunk, &st, o.data());
    INFO("chunk " << chunk);
    CHECK(RelErr(o, o_rec) < 1e-5);
    CHECK(RelErr(st.s, rec.s) < 1e-5);
    CHECK(st.conv == rec.conv);
  }
  // Split in two calls: the state carries over exactly as in one call.
  KdaState st = KdaState::Zero(c, c.linear_num_heads);
  std::vector<float> o(n * C);
  KdaRun(w, c, in, 0, 30, 5, 0, &st, o.data());
  KdaRun(w, c, in, 30, n - 30, 35, 0, &st, o.data() + 30 * C);
  CHECK(o == o_rec);
  CHECK(st.s == rec.s);
}

TEST_CASE("KDA: the recurrence follows the gated delta rule", "[kda]") {
  const ModelConfig c = SmallKda();
  const int64_t H = c.linear_num_heads, d = c.linear_head_dim, C = H * d, K = c.linear_conv_kernel_dim, n = 9;
  std::mt19937 rng(12);
  KdaWeights w;
  KdaInputs in;
  RandomInputs(c, n, rng, &w, &in);
  KdaState st = KdaState::Zero(c, c.linear_num_heads);
  std::vector<float> o(n * C);
  KdaRun(w, c, in, 0, n, 0, 0, &st, o.data());
  // float64: conv + SiLU, l2 norms, q scale, then S <- diag(e^g) S; S += k (beta (v - S^T k))^T; o = S^T q.
  std::vector<double> ref(n * C);
  for (int64_t h = 0; h < H; ++h) {
    std::vector<double> S(d * d, 0.0);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> q(d), k(d), v(d);
      for (int64_t i = 0; i < d; ++i) {
        const int64_t ch = h * d + i;
        auto conv = [&](const std::vector<float>& x, const Weight& cw) {
          double acc = 0;
          for (int64_t j = 0; j < K; ++j) {
            const int64_t s = t - (K - 1) + j;
            if (s >= 0) acc += double(cw.data[ch * K + j]) * x[s * C + ch];
          }
          return acc / (1.0 + std::exp(-acc));
        };
        q[i] = conv(in.q, w.q_conv);
        k[i] = conv(in.k, w.k_conv);
        v[i] = conv(in.v, w.v_conv);
      }
      double qn = 0, kn = 0;
      for (int64_t i = 0; i < d; ++i) qn += q[i] * q[i], kn += k[i] * k[i];
      for (int64_t i = 0; i < d; ++i) q[i] = q[i] / std::sqrt(qn + 1e-6) / std::sqrt(double(d)), k[i] /= std::sqrt(kn + 1e-6);
      for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j) S[i * d + j] *= std::exp(double(in.g[t * C + h * d + i]));
      for (int64_t j = 0; j < d; ++j) {
        double m = 0;
        for (int64_t i = 0; i < d; ++i) m += S[i * d + j] * k[i];
        const double u = in.beta[t * H + h] * (v[j] - m);
        for (int64_t i = 0; i < d; ++i) S[i * d + j] += k[i] * u;
      }
      for (int64_t j = 0; j < d; ++j) {
        double acc = 0;
        for (int64_t i = 0; i < d; ++i) acc += S[i * d + j] * q[i];
        ref[t * C + h * d + j] = acc;
      }
    }
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < o.size(); ++i) num += (o[i] - ref[i]) * (o[i] - ref[i]), den += ref[i] * ref[i];
  CHECK(std::sqrt(num / den) < 1e-5);
}

}  // namespace
}  // namespace ferry::model
