#include "kernels/cpu/ops.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "tests/catch.h"

namespace ferry::kernels::cpu {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double MaxRelErr(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

TEST_CASE("Linear matches a float64 reference and is independent of the batch", "[ops]") {
  std::mt19937 rng(1);
  for (int64_t rows : {1, 3, 4, 7, 9}) {
    for (int64_t in : {1, 8, 13, 64}) {
      const int64_t out = 5;
      auto x = Random(rows * in, rng), w = Random(out * in, rng);
      std::vector<float> y(rows * out);
      Linear(x.data(), rows, in, w.data(), out, y.data());
      std::vector<double> ref(rows * out);
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t n = 0; n < out; ++n)
          for (int64_t k = 0; k < in; ++k) ref[t * out + n] += double(x[t * in + k]) * w[n * in + k];
      CHECK(MaxRelErr(y, ref) < 1e-6);
      // Each row alone gives the same bits as inside the batch.
      for (int64_t t = 0; t < rows; ++t) {
        std::vector<float> one(out);
        Linear(x.data() + t * in, 1, in, w.data(), out, one.data());
        for (int64_t n = 0; n < out; ++n) REQUIRE(one[n] == y[t * out + n]);
      }
    }
  }
}

TEST_CASE("RmsNorm and LayerNorm", "[ops]") {
  std::mt19937 rng(2);
  const int64_t rows = 3, dim = 24;
  auto x = Random(rows * dim, rng, 3.0f), w = Random(dim, rng), b = Random(dim, rng);
  std::vector<float> y(rows * dim), z(rows * dim);
  RmsNorm(x.data(), rows, dim, w.data(), 1e-5f, y.data());
  LayerNorm(x.data(), rows, dim, w.data(), b.data(), 1e-6f, z.data());
  std::vector<double> ry(rows * dim), rz(rows * dim);
  for (int64_t t = 0; t < rows; ++t) {
    double ms = 0, mean = 0, var = 0;
    for (int64_t i = 0; i < dim; ++i) ms += double(x[t * dim + i]) * x[t * dim + i], mean += x[t * dim + i];
    ms /= dim;
    mean /= dim;
    for (int64_t i = 0; i < dim; ++i) var += (x[t * dim + i] - mean) * (x[t * dim + i] - mean);
    var /= dim;
    for (int64_t i = 0; i < dim; ++i) {
      ry[t * dim + i] = x[t * dim + i] / std::sqrt(ms + 1e-5) * w[i];
      rz[t * dim + i] = (x[t * dim + i] - mean) / std::sqrt(var + 1e-6) * w[i] + b[i];
    }
  }
  CHECK(MaxRelErr(y, ry) < 1e-6);
  CHECK(MaxRelErr(z, rz) < 1e-6);
  // In place gives the same result.
  std::vector<float> inplace = x;
  RmsNorm(inplace.data(), rows, dim, w.data(), 1e-5f, inplace.data());
  CHECK(inplace == y);
}

TEST_CASE("interleaved RoPE rotates adjacent pairs and scores depend on relative position", "[ops]") {
  const int64_t dim = 16;
  auto inv = RopeInvFreq(dim, 10000.0);
  REQUIRE(inv.size() == 8);
  CHECK(inv[0] == 1.0f);
  CHECK(std::fabs(inv[1] - std::pow(10000.0, -2.0 / 16)) < 1e-7);

  // The first pair rotates by exactly `pos` radians (inv_freq[0] = 1).
  std::vector<float> e(dim, 0.0f);
  e[0] = 1.0f;
  RopeInterleaved(e.data(), dim, 2, inv.data());
  CHECK(std::fabs(e[0] - std::cos(2.0f)) < 1e-6);
  CHECK(std::fabs(e[1] - std::sin(2.0f)) < 1e-6);
  for (int i = 2; i < dim; ++i) CHECK(e[i] == 0.0f);

  std::mt19937 rng(3);
  auto q = Random(dim, rng), k = Random(dim, rng);
  auto score = [&](int64_t pq, int64_t pk) {
    auto a = q, b = k;
    RopeInterleaved(a.data(), dim, pq, inv.data());
    RopeInterleaved(b.data(), dim, pk, inv.data());
    return Dot(a.data(), b.data(), dim);
  };
  CHECK(std::fabs(score(7, 3) - score(14, 10)) < 1e-4);
  CHECK(std::fabs(score(0, 0) - Dot(q.data(), k.data(), dim)) < 1e-6);
  CHECK(std::fabs(score(7, 3) - score(3, 7)) > 1e-3);  // not symmetric: it is a rotation
}

TEST_CASE("TopKIndices: largest first - ties to the lower index - ascending output", "[ops]") {
  const std::vector<float> s = {0.0f, 3.0f, 1.0f, 3.0f, 0.0f, NAN, 2.0f, 0.0f};
  CHECK(TopKIndices(s.data(), 8, 3) == std::vector<int32_t>{1, 3, 6});
  CHECK(TopKIndices(s.data(), 8, 5) == std::vector<int32_t>{0, 1, 2, 3, 6});  // zero tie: index 0 wins
  CHECK(TopKIndices(s.data(), 8, 7) == std::vector<int32_t>{0, 1, 2, 3, 4, 6, 7});
  CHECK(TopKIndices(s.data(), 8, 20).size() == 8);  // clamped; NaN included last
  CHECK(TopKIndices(s.data(), 8, 0).empty());
  const std::vector<float> zeros(10, 0.0f);
  CHECK(TopKIndices(zeros.data(), 10, 4) == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(ArgMax(s.data(), 8) == 1);
}

TEST_CASE("RouteRow matches a brute-force reading of the routing rule", "[ops]") {
  std::mt19937 rng(4);
  RoutingParams p;
  p.n_experts = 16;
  p.top_k = 4;
  p.n_group = 4;
  p.topk_group = 2;
  p.norm_topk_prob = true;
  p.routed_scaling_factor = 2.5f;
  for (int trial = 0; trial < 50; ++trial) {
    auto logits = Random(16, rng), bias = Random(16, rng, 0.1f);
    int32_t ex[4];
    float w[4];
    RouteRow(logits.data(), bias.data(), p, ex, w);
    // Reference: sort groups by the sum of their two best biased scores, keep two, then the
    // four best biased scores among their experts.
    std::vector<double> s(16), c(16);
    for (int e = 0; e < 16; ++e) s[e] = 1.0 / (1.0 + std::exp(-double(logits[e]))), c[e] = s[e] + bias[e];
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < 4; ++g) {
      std::vector<double> m(c.begin() + 4 * g, c.begin() + 4 * g + 4);
      std::sort(m.rbegin(), m.rend());
      groups.push_back({-(m[0] + m[1]), g});
    }
    std::sort(groups.begin(), groups.end());
    std::vector<std::pair<double, int>> cand;
    for (int gi = 0; gi < 2; ++gi)
      for (int e = 4 * groups[gi].second; e < 4 * groups[gi].second + 4; ++e) cand.push_back({-c[e], e});
    std::sort(cand.begin(), cand.end());
    std::vector<int> want;
    for (int i = 0; i < 4; ++i) want.push_back(cand[i].second);
    std::sort(want.begin(), want.end());
    double sum = 0;
    for (int e : want) sum += s[e];
    for (int i = 0; i < 4; ++i) {
      REQUIRE(ex[i] == want[i]);
      CHECK(std::fabs(w[i] - s[want[i]] / sum * 2.5) < 1e-5);
    }
  }
}

TEST_CASE("absorbed MLA attention equals the expanded form", "[ops]") {
  std::mt19937 rng(5);
  const int64_t H = 3, L = 12, N = 5, P = 4, S = 9;
  auto w_uk = Random(H * N * L, rng, 0.3f);  // per head [N, L]
  auto q_nope = Random(H * N, rng), q_pe = Random(H * P, rng);
  auto cache = Random(S * (L + P), rng);
  const std::vector<int32_t> sel = {0, 2, 3, 7, 8};
  const float scale = 0.37f;
  // q_abs[h] = W_UK_h^T q_nope_h.
  std::vector<float> q_abs(H * L, 0.0f);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t i = 0; i < N; ++i) q_abs[h * L + l] += w_uk[(h * N + i) * L + l] * q_nope[h * N + i];
  std::vector<float> out(H * L), scratch(sel.size());
  MlaAttendRow(q_abs.data(), q_pe.data(), H, L, P, cache.data(), L + P, sel.data(), sel.size(), scale,
               out.data(), scratch.data());
  // Expanded: k_nope_s = W_UK c_s per head, softmax of (q_nope·k_nope + q_pe·k_pe) * scale.
  std::vector<double> ref(H * L, 0.0);
  for (int64_t h = 0; h < H; ++h) {
    std::vector<double> sc;
    for (int32_t s : sel) {
      const float* row = cache.data() + s * (L + P);
      double v = 0;
      for (int64_t i = 0; i < N; ++i) {
        double k = 0;
        for (int64_t l = 0; l < L; ++l) k += double(w_uk[(h * N + i) * L + l]) * row[l];
        v += q_nope[h * N + i] * k;
      }
      for (int64_t j = 0; j < P; ++j) v += double(q_pe[h * P + j]) * row[L + j];
      sc.push_back(v * scale);
    }
    double m = *std::max_element(sc.begin(), sc.end()), den = 0;
    for (double& v : sc) den += (v = std::exp(v - m));
    for (size_t j = 0; j < sel.size(); ++j)
      for (int64_t l = 0; l < L; ++l) ref[h * L + l] += sc[j] / den * cache[sel[j] * (L + P) + l];
  }
  CHECK(MaxRelErr(out, ref) < 1e-5);
}

TEST_CASE("IndexerScoresRow applies ReLU before the head weights", "[ops]") {
  std::mt19937 rng(6);
  const int64_t Hi = 4, Di = 8, S = 6;
  auto q = Random(Hi * Di, rng), w = Random(Hi, rng), keys = Random(S * Di, rng);
  std::vector<float> got(S);
  IndexerScoresRow(q.data(), w.data(), Hi, Di, keys.data(), Di, S, 0.5f, got.data());
  std::vector<double> ref(S, 0.0);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < Hi; ++h) {
      double d = 0;
      for (int64_t i = 0; i < Di; ++i) d += double(q[h * Di + i]) * keys[s * Di + i];
      ref[s] += w[h] * std::max(0.0, d * 0.5);
    }
  CHECK(MaxRelErr(got, ref) < 1e-6);
}

TEST_CASE("SwiGlu with and without the clamp", "[ops]") {
  const std::vector<float> g = {-20.0f, 0.5f, 30.0f}, u = {3.0f, -40.0f, 2.0f};
  std::vector<float> out(3);
  SwiGlu(g.data(), u.data(), 3, 0.0f, out.data());
  auto silu = [](float x) { return x / (1.0f + std::exp(-x)); };
  CHECK(out[2] == silu(30.0f) * 2.0f);
  SwiGlu(g.data(), u.data(), 3, 10.0f, out.data());
  CHECK(out[0] == silu(-20.0f) * 3.0f);    // gate clamped only from above
  CHECK(out[1] == silu(0.5f) * -10.0f);    // up clamped to [-10, 10]
  CHECK(out[2] == silu(10.0f) * 2.0f);
}

TEST_CASE("QuantizeActFp8: a group's largest value maps to 448 - zeros stay zero", "[cpu][fp8]") {
  // Two rows of 200 columns: groups [0, 128) and [128, 200).
  std::vector<float> x(400, 0.0f);
  for (int c = 0; c < 128; ++c) x[c] = 0.01f * static_cast<float>(c - 64);  // row 0, group 0: max |x| 0.64
  for (int c = 128; c < 200; ++c) x[c] = 3.0f;                              // row 0, group 1: constant
  // row 1, group 0: zeros; group 1: one value
  x[200 + 130] = -5.0f;
  std::vector<uint8_t> q(400);
  std::vector<float> s(2 * 3, -1.0f);  // groups major, stride 3
  QuantizeActFp8(x.data(), 2, 200, q.data(), s.data(), 3);
  CHECK(s[0 * 3 + 0] == 0.64f / 448.0f);
  CHECK(s[1 * 3 + 0] == 3.0f / 448.0f);
  CHECK(s[0 * 3 + 1] == 0.0f);
  CHECK(s[1 * 3 + 1] == 5.0f / 448.0f);
  CHECK(s[2] == -1.0f);  // past the rows: untouched
  CHECK(q[0] == 0xfe);    // -0.64 -> -448
  CHECK(q[128] == 0x7e);  // 3 -> 448
  CHECK(q[200] == 0);     // the zero group
  CHECK(q[200 + 130] == 0xfe);
  CHECK(q[200 + 131] == 0);
  // Every quantized value is within half a step (1/16 relative) of x / s.
  for (int c = 1; c < 128; ++c) {
    const float v = F8E4M3ToF32(q[c]) * s[0];
    CHECK(std::fabs(v - x[c]) <= std::fabs(x[c]) / 16.0f + 1e-6f);
  }
}

TEST_CASE("LinearW8A8 is Linear over the dequantized operands", "[cpu][fp8]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 0x7e);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t rows = 3, in = 300, out = 130, groups = 3;
  std::vector<float> x(rows * in);
  for (float& v : x) v = u(rng);
  std::vector<uint8_t> qx(rows * in), qw(out * in);
  std::vector<float> sx(groups * rows), sw(2 * groups), xd(rows * in), wd(out * in), want(rows * out), got(rows * out);
  QuantizeActFp8(x.data(), rows, in, qx.data(), sx.data(), rows);
  for (auto& b : qw) b = static_cast<uint8_t>(byte(rng) | (u(rng) < 0 ? 0x80 : 0));
  for (float& v : sw) v = 1e-3f * (1.0f + u(rng) * 0.5f);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t k = 0; k < in; ++k) xd[t * in + k] = F8E4M3ToF32(qx[t * in + k]) * sx[(k / 128) * rows + t];
  }
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t k = 0; k < in; ++k) wd[n * in + k] = F8E4M3ToF32(qw[n * in + k]) * sw[(n / 128) * groups + k / 128];
  }
  Linear(xd.data(), rows, in, wd.data(), out, want.data());
  LinearW8A8(qx.data(), sx.data(), rows, in, qw.data(), sw.data(), out, got.data());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  CHECK(std::sqrt(num / den) < 1e-5);
}

}  // namespace
}  // namespace ferry::kernels::cpu
