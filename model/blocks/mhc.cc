#include "model/blocks/mhc.h"

#include <cmath>

#include "common/status.h"
#include "kernels/cpu/ops.h"

namespace ferry::model {

namespace cpu = ferry::kernels::cpu;

absl::StatusOr<MhcWeights> LoadMhc(const WeightLoader& w, const std::string& site, const ModelConfig& c) {
  const int64_t S = c.hc_mult, M = (2 + S) * S;
  MhcWeights m;
  FERRY_ASSIGN_OR_RETURN(m.fn, w.Matrix(site + "_fn", M, S * c.hidden_size));
  FERRY_ASSIGN_OR_RETURN(m.base, w.Vector(site + "_base", M));
  FERRY_ASSIGN_OR_RETURN(m.scale, w.Vector(site + "_scale", 3));
  return m;
}

void MhcPre(const MhcWeights& w, const ModelConfig& c, const float* h, int64_t rows, MhcMix* mix, float* u) {
  const int64_t S = c.hc_mult, D = c.hidden_size, M = (2 + S) * S;
  const float eps = c.hc_eps;
  std::vector<float> r(static_cast<size_t>(rows * S * D)), m(static_cast<size_t>(rows * M));
  std::vector<float> ones(static_cast<size_t>(S * D), 1.0f);
  cpu::RmsNorm(h, rows, S * D, ones.data(), c.rms_norm_eps, r.data());
  cpu::Linear(r.data(), rows, S * D, w.fn.ptr(), M, m.data());
  mix->pre.resize(static_cast<size_t>(rows * S));
  mix->post.resize(static_cast<size_t>(rows * S));
  mix->comb.resize(static_cast<size_t>(rows * S * S));
  const float* scale = w.scale.ptr();
  const float* base = w.base.ptr();
  auto sigmoid = [](float x) { return 1.0f / (1.0f + std::exp(-x)); };
  for (int64_t t = 0; t < rows; ++t) {
    const float* mt = m.data() + t * M;
    float* pre = mix->pre.data() + t * S;
    float* post = mix->post.data() + t * S;
    float* comb = mix->comb.data() + t * S * S;
    for (int64_t j = 0; j < S; ++j) {
      pre[j] = sigmoid(mt[j] * scale[0] + base[j]) + eps;
      post[j] = 2.0f * sigmoid(mt[S + j] * scale[1] + base[S + j]);
    }
    for (int64_t i = 0; i < S; ++i) {
      float* row = comb + i * S;
      float mx = -INFINITY;
      for (int64_t k = 0; k < S; ++k) {
        row[k] = mt[2 * S + i * S + k] * scale[2] + base[2 * S + i * S + k];
        mx = std::fmax(mx, row[k]);
      }
      float sum = 0.0f;
      for (int64_t k = 0; k < S; ++k) sum += (row[k] = std::exp(row[k] - mx));
      for (int64_t k = 0; k < S; ++k) row[k] = row[k] / sum + eps;
    }
    auto col_norm = [&] {
      for (int64_t k = 0; k < S; ++k) {
        float s = 0.0f;
        for (int64_t i = 0; i < S; ++i) s += comb[i * S + k];
        for (int64_t i = 0; i < S; ++i) comb[i * S + k] /= s + eps;
      }
    };
    auto row_norm = [&] {
      for (int64_t i = 0; i < S; ++i) {
        float s = 0.0f;
        for (int64_t k = 0; k < S; ++k) s += comb[i * S + k];
        for (int64_t k = 0; k < S; ++k) comb[i * S + k] /= s + eps;
      }
    };
    col_norm();
    for (int64_t it = 1; it < c.hc_sinkhorn_iters; ++it) {
      row_norm();
      col_norm();
    }
    float* ut = u + t * D;
    const float* ht = h + t * S * D;
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < S; ++j) acc += pre[j] * ht[j * D + d];
      ut[d] = acc;
    }
  }
}

void MhcPost(const MhcMix& mix, const ModelConfig& c, const float* y, int64_t rows, float* h) {
  const int64_t S = c.hc_mult, D = c.hidden_size;
  std::vector<float> next(static_cast<size_t>(S * D));
  for (int64_t t = 0; t < rows; ++t) {
    float* ht = h + t * S * D;
    const float* post = mix.post.data() + t * S;
    const float* comb = mix.comb.data() + t * S * S;
    const float* yt = y + t * D;
    for (int64_t k = 0; k < S; ++k) {
      for (int64_t d = 0; d < D; ++d) {
        float acc = post[k] * yt[d];
        for (int64_t j = 0; j < S; ++j) acc += comb[j * S + k] * ht[j * D + d];
        next[k * D + d] = acc;
      }
    }
    std::copy(next.begin(), next.end(), ht);
  }
}

}  // namespace ferry::model
