#include "model/blocks/kda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/ops.h"

namespace ferry::model {

namespace cpu = ferry::kernels::cpu;

namespace {

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// x / sqrt(sum(x^2) + 1e-6) over d values.
void L2Norm(float* x, int64_t d) {
  const float inv = 1.0f / std::sqrt(cpu::Dot(x, x, d) + 1e-6f);
  for (int64_t i = 0; i < d; ++i) x[i] *= inv;
}

}  // namespace

absl::StatusOr<KdaWeights> LoadKda(const WeightLoader& w, const ModelConfig& c, const TensorParallel& tp) {
  FERRY_RETURN_IF_ERROR(CheckDivisible("linear_num_heads", c.linear_num_heads, tp.world));
  const int64_t HG = c.linear_num_heads, d = c.linear_head_dim, CG = HG * d, D = c.hidden_size,
                K = c.linear_conv_kernel_dim;
  const int64_t H = tp.Local(HG), h0 = tp.Begin(HG);
  const Slice head_rows{h0, h0 + H, 0, -1};
  const Slice chan_rows{h0 * d, (h0 + H) * d, 0, -1};
  KdaWeights k;
  k.heads = H;
  FERRY_ASSIGN_OR_RETURN(k.q_proj, w.Matrix("q_proj.weight", CG, D, chan_rows));
  FERRY_ASSIGN_OR_RETURN(k.k_proj, w.Matrix("k_proj.weight", CG, D, chan_rows));
  FERRY_ASSIGN_OR_RETURN(k.v_proj, w.Matrix("v_proj.weight", CG, D, chan_rows));
  FERRY_ASSIGN_OR_RETURN(k.q_conv, w.Tensor("q_conv1d.weight", {CG, 1, K}, chan_rows));
  FERRY_ASSIGN_OR_RETURN(k.k_conv, w.Tensor("k_conv1d.weight", {CG, 1, K}, chan_rows));
  FERRY_ASSIGN_OR_RETURN(k.v_conv, w.Tensor("v_conv1d.weight", {CG, 1, K}, chan_rows));
  // The config does not name the low-rank width of the decay and output gates: read it off
  // f_a_proj (the shape checks of the other three then hold it to the same width).
  FERRY_ASSIGN_OR_RETURN(std::vector<int64_t> fa_shape, w.Shape("f_a_proj.weight"));
  if (fa_shape.size() != 2 || fa_shape[0] < 1) {
    return absl::InvalidArgumentError(absl::StrCat(w.prefix(), "f_a_proj.weight: expected [rank, ", D,
                                                   "], got ", fa_shape.size(), " dimensions"));
  }
  const int64_t r = fa_shape[0];
  FERRY_ASSIGN_OR_RETURN(k.f_a, w.Matrix("f_a_proj.weight", r, D));
  FERRY_ASSIGN_OR_RETURN(k.f_b, w.Matrix("f_b_proj.weight", CG, r, chan_rows));
  FERRY_ASSIGN_OR_RETURN(k.g_a, w.Matrix("g_a_proj.weight", r, D));
  FERRY_ASSIGN_OR_RETURN(k.g_b, w.Matrix("g_b_proj.weight", CG, r, chan_rows));
  FERRY_ASSIGN_OR_RETURN(k.b_proj, w.Matrix("b_proj.weight", HG, D, head_rows));
  FERRY_ASSIGN_OR_RETURN(k.a_log, w.Vector("A_log", HG, head_rows));
  FERRY_ASSIGN_OR_RETURN(k.dt_bias, w.Vector("dt_bias", CG, chan_rows));
  FERRY_ASSIGN_OR_RETURN(k.o_norm, w.Vector("o_norm.weight", d));
  FERRY_ASSIGN_OR_RETURN(k.o_proj, w.Matrix("o_proj.weight", D, CG, Slice{0, -1, h0 * d, (h0 + H) * d}));
  return k;
}

KdaStateLayout KdaStateLayout::Of(const ModelConfig& c, int64_t heads) {
  const int64_t C = heads * c.linear_head_dim;
  KdaStateLayout out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    out.conv.push_back(-1);
    out.s.push_back(-1);
    if (c.layer_types[static_cast<size_t>(l)] != AttentionType::kKda) continue;
    out.conv.back() = out.floats;
    out.floats += 3 * (c.linear_conv_kernel_dim - 1) * C;
    out.s.back() = out.floats;
    out.floats += heads * c.linear_head_dim * c.linear_head_dim;
  }
  return out;
}

KdaState KdaState::Zero(const ModelConfig& c, int64_t heads) {
  const int64_t C = heads * c.linear_head_dim;
  KdaState s;
  s.conv.assign(static_cast<size_t>(3 * (c.linear_conv_kernel_dim - 1) * C), 0.0f);
  s.s.assign(static_cast<size_t>(heads * c.linear_head_dim * c.linear_head_dim), 0.0f);
  return s;
}

void KdaProject(const KdaWeights& w, const ModelConfig& c, const float* a, int64_t rows, KdaInputs* in) {
  const int64_t H = w.heads, d = c.linear_head_dim, C = H * d, D = c.hidden_size;
  const int64_t r = w.f_a.rows;
  in->q.resize(static_cast<size_t>(rows * C));
  in->k.resize(in->q.size());
  in->v.resize(in->q.size());
  in->g.resize(in->q.size());
  in->gate.resize(in->q.size());
  in->beta.resize(static_cast<size_t>(rows * H));
  cpu::Linear(a, rows, D, w.q_proj.ptr(), C, in->q.data());
  cpu::Linear(a, rows, D, w.k_proj.ptr(), C, in->k.data());
  cpu::Linear(a, rows, D, w.v_proj.ptr(), C, in->v.data());
  std::vector<float> low(static_cast<size_t>(rows * r));
  cpu::Linear(a, rows, D, w.f_a.ptr(), r, low.data());
  cpu::Linear(low.data(), rows, r, w.f_b.ptr(), C, in->g.data());
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t ch = 0; ch < C; ++ch) {
      float& g = in->g[t * C + ch];
      g = c.linear_lower_bound * Sigmoid(std::exp(w.a_log.data[ch / d]) * (g + w.dt_bias.data[ch]));
    }
  }
  cpu::Linear(a, rows, D, w.g_a.ptr(), r, low.data());
  cpu::Linear(low.data(), rows, r, w.g_b.ptr(), C, in->gate.data());
  for (float& x : in->gate) x = Sigmoid(x);
  cpu::Linear(a, rows, D, w.b_proj.ptr(), H, in->beta.data());
  for (float& x : in->beta) x = Sigmoid(x);
}

namespace {

// Causal depthwise conv + SiLU of n rows of one of q/k/v, continuing from `tail` [K-1, C] and
// leaving the last K-1 inputs there.
void ConvSilu(const float* x, int64_t n, int64_t C, int64_t K, const float* weight, float* tail, float* y) {
  std::vector<float> window(static_cast<size_t>((K - 1 + n) * C));
  std::copy_n(tail, (K - 1) * C, window.data());
  std::copy_n(x, n * C, window.data() + (K - 1) * C);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t ch = 0; ch < C; ++ch) {
      float acc = 0.0f;
      for (int64_t j = 0; j < K; ++j) acc += weight[ch * K + j] * window[(t + j) * C + ch];
      y[t * C + ch] = acc / (1.0f + std::exp(-acc));
    }
  }
  std::copy_n(window.data() + n * C, (K - 1) * C, tail);
}

// Token-by-token gated delta rule for one head: q, k [n, stride] (head slice), v likewise.
void RecurrentHead(const float* q, const float* k, const float* v, const float* g, const float* beta,
                   int64_t n, int64_t stride, int64_t beta_stride, int64_t d, float* s, float* o) {
  std::vector<float> u(static_cast<size_t>(d));
  for (int64_t t = 0; t < n; ++t) {
    const float* qt = q + t * stride;
    const float* kt = k + t * stride;
    const float* vt = v + t * stride;
    const float* gt = g + t * stride;
    for (int64_t i = 0; i < d; ++i) {
      const float decay = std::exp(gt[i]);
      for (int64_t j = 0; j < d; ++j) s[i * d + j] *= decay;
    }
    // u = beta (v - S^T k)
    for (int64_t j = 0; j < d; ++j) {
      float acc = 0.0f;
      for (int64_t i = 0; i < d; ++i) acc += s[i * d + j] * kt[i];
      u[j] = beta[t * beta_stride] * (vt[j] - acc);
    }
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = 0; j < d; ++j) s[i * d + j] += kt[i] * u[j];
    }
    float* ot = o + t * stride;
    for (int64_t j = 0; j < d; ++j) {
      float acc = 0.0f;
      for (int64_t i = 0; i < d; ++i) acc += s[i * d + j] * qt[i];
      ot[j] = acc;
    }
  }
}

// The same rule over one chunk of n tokens in closed form (see kda.h): with G the in-chunk
// cumulative log decay, A[i][j] = sum_c k_i k_j exp(G_i - G_j) for j < i, solve
// u_i = beta_i (v_i - S0^T (exp(G_i) k_i) - sum_{j<i} A[i][j] u_j), then
// o_i = S0^T (exp(G_i) q_i) + sum_{j<=i} (sum_c q_i k_j exp(G_i - G_j)) u_j and
// S <- exp(G_n) S0 + sum_j (exp(G_n - G_j) k_j) u_j^T. Every exponent is <= 0.
void ChunkHead(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t n,
               int64_t stride, int64_t beta_stride, int64_t d, float* s, float* o) {
  std::vector<float> G(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < d; ++i) {
    float acc = 0.0f;
    for (int64_t t = 0; t < n; ++t) G[t * d + i] = (acc += g[t * stride + i]);
  }
  std::vector<float> u(static_cast<size_t>(n * d)), w(static_cast<size_t>(d));
  for (int64_t t = 0; t < n; ++t) {
    const float* kt = k + t * stride;
    for (int64_t i = 0; i < d; ++i) w[i] = std::exp(G[t * d + i]) * kt[i];
    float* ut = u.data() + t * d;
    for (int64_t j = 0; j < d; ++j) {
      float acc = 0.0f;
      for (int64_t i = 0; i < d; ++i) acc += s[i * d + j] * w[i];
      ut[j] = v[t * stride + j] - acc;
    }
    for (int64_t p = 0; p < t; ++p) {
      const float* kp = k + p * stride;
      float a = 0.0f;
      for (int64_t i = 0; i < d; ++i) a += kt[i] * kp[i] * std::exp(G[t * d + i] - G[p * d + i]);
      const float* up = u.data() + p * d;
      for (int64_t j = 0; j < d; ++j) ut[j] -= a * up[j];
    }
    for (int64_t j = 0; j < d; ++j) ut[j] *= beta[t * beta_stride];
  }
  for (int64_t t = 0; t < n; ++t) {
    const float* qt = q + t * stride;
    for (int64_t i = 0; i < d; ++i) w[i] = std::exp(G[t * d + i]) * qt[i];
    float* ot = o + t * stride;
    for (int64_t j = 0; j < d; ++j) {
      float acc = 0.0f;
      for (int64_t i = 0; i < d; ++i) acc += s[i * d + j] * w[i];
      ot[j] = acc;
    }
    for (int64_t p = 0; p <= t; ++p) {
      const float* kp = k + p * stride;
      float b = 0.0f;
      for (int64_t i = 0; i < d; ++i) b += qt[i] * kp[i] * std::exp(G[t * d + i] - G[p * d + i]);
      const float* up = u.data() + p * d;
      for (int64_t j = 0; j < d; ++j) ot[j] += b * up[j];
    }
  }
  const float* Gn = G.data() + (n - 1) * d;
  for (int64_t i = 0; i < d; ++i) {
    const float decay = std::exp(Gn[i]);
    for (int64_t j = 0; j < d; ++j) s[i * d + j] *= decay;
  }
  for (int64_t p = 0; p < n; ++p) {
    const float* kp = k + p * stride;
    const float* up = u.data() + p * d;
    for (int64_t i = 0; i < d; ++i) {
      const float kd = std::exp(Gn[i] - G[p * d + i]) * kp[i];
      for (int64_t j = 0; j < d; ++j) s[i * d + j] += kd * up[j];
    }
  }
}

}  // namespace

void KdaRun(const KdaWeights& w, const ModelConfig& c, const KdaInputs& in, int64_t begin, int64_t n,
            int64_t pos0, int64_t chunk, KdaStateView state, float* o) {
  const int64_t H = w.heads, d = c.linear_head_dim, C = H * d, K = c.linear_conv_kernel_dim;
  std::vector<float> q(static_cast<size_t>(n * C)), k(q.size()), v(q.size());
  float* tails = state.conv;
  ConvSilu(in.q.data() + begin * C, n, C, K, w.q_conv.ptr(), tails, q.data());
  ConvSilu(in.k.data() + begin * C, n, C, K, w.k_conv.ptr(), tails + (K - 1) * C, k.data());
  ConvSilu(in.v.data() + begin * C, n, C, K, w.v_conv.ptr(), tails + 2 * (K - 1) * C, v.data());
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      float* qh = q.data() + t * C + h * d;
      L2Norm(qh, d);
      for (int64_t i = 0; i < d; ++i) qh[i] *= q_scale;
      L2Norm(k.data() + t * C + h * d, d);
    }
  }
  const float* g = in.g.data() + begin * C;
  const float* beta = in.beta.data() + begin * H;
  for (int64_t h = 0; h < H; ++h) {
    float* s = state.s + h * d * d;
    const int64_t off = h * d;
    if (chunk <= 0) {
      RecurrentHead(q.data() + off, k.data() + off, v.data() + off, g + off, beta + h, n, C, H, d, s, o + off);
      continue;
    }
    for (int64_t t = 0; t < n;) {
      // Chunks end at absolute multiples of `chunk`, so a chunk never depends on how the caller
      // split the prompt beyond its first partial chunk.
      const int64_t len = std::min(n - t, chunk - (pos0 + t) % chunk);
      ChunkHead(q.data() + t * C + off, k.data() + t * C + off, v.data() + t * C + off, g + t * C + off,
                beta + t * H + h, len, C, H, d, s, o + t * C + off);
      t += len;
    }
  }
}

void KdaOutput(const KdaWeights& w, const ModelConfig& c, const KdaInputs& in, const float* o, int64_t rows,
               float* out) {
  const int64_t H = w.heads, d = c.linear_head_dim, C = H * d;
  std::vector<float> normed(static_cast<size_t>(rows * C));
  cpu::RmsNorm(o, rows * H, d, w.o_norm.ptr(), c.rms_norm_eps, normed.data());
  for (int64_t i = 0; i < rows * C; ++i) normed[i] *= in.gate[i];
  cpu::Linear(normed.data(), rows, C, w.o_proj.ptr(), c.hidden_size, out);
}

}  // namespace ferry::model
