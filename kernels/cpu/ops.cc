// Dense float32 ops: dot, linear, norms, RoPE, SwiGLU, absorbed MLA attention.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/ops.h"

#include "common/dtype.h"

namespace ferry::kernels::cpu {
namespace {

inline float Combine8(const float* s) {
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// Four dot products against one shared `w` row, each in exactly Dot()'s order.
inline void Dot4(const float* a0, const float* a1, const float* a2, const float* a3, const float* w,
                 int64_t n, float* out) {
  float s0[8] = {}, s1[8] = {}, s2[8] = {}, s3[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float wj = w[i + j];
      s0[j] += a0[i + j] * wj;
      s1[j] += a1[i + j] * wj;
      s2[j] += a2[i + j] * wj;
      s3[j] += a3[i + j] * wj;
    }
  }
  for (int j = 0; i + j < n; ++j) {
    const float wj = w[i + j];
    s0[j] += a0[i + j] * wj;
    s1[j] += a1[i + j] * wj;
    s2[j] += a2[i + j] * wj;
    s3[j] += a3[i + j] * wj;
  }
  out[0] = Combine8(s0);
  out[1] = Combine8(s1);
  out[2] = Combine8(s2);
  out[3] = Combine8(s3);
}

}  // namespace

float Dot(const float* a, const float* b, int64_t n) {
  float s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i + j < n; ++j) s[j] += a[i + j] * b[i + j];
  return Combine8(s);
}

void QuantizeActFp8(const float* x, int64_t rows, int64_t in, uint8_t* q, float* s, int64_t scale_stride) {
  const int64_t groups = (in + 127) / 128;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * 128, c1 = std::min(in, c0 + 128);
      float amax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * in + c]));
      const float scale = amax / 448.0f;
      s[g * scale_stride + r] = scale;
      for (int64_t c = c0; c < c1; ++c) q[r * in + c] = scale > 0.0f ? F32ToF8E4M3(x[r * in + c] / scale) : 0;
    }
  }
}

void LinearW8A8(const uint8_t* qx, const float* sx, int64_t rows, int64_t in, const uint8_t* qw, const float* sw,
                int64_t out, float* y) {
  const int64_t groups = (in + 127) / 128;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t n = 0; n < out; ++n) {
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        float part = 0.0f;
        for (int64_t k = g * 128; k < std::min(in, g * 128 + 128); ++k) {
          part += F8E4M3ToF32(qx[t * in + k]) * F8E4M3ToF32(qw[n * in + k]);
        }
        acc += part * (sx[g * rows + t] * sw[(n / 128) * groups + g]);
      }
      y[t * out + n] = acc;
    }
  }
}

void Linear(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y) {
  int64_t t = 0;
  // Blocks of four rows share each weight row's loads; the per-row order matches Dot().
  for (; t + 4 <= rows; t += 4) {
    const float* x0 = x + t * in;
    for (int64_t n = 0; n < out; ++n) {
      float r[4];
      Dot4(x0, x0 + in, x0 + 2 * in, x0 + 3 * in, w + n * in, in, r);
      for (int k = 0; k < 4; ++k) y[(t + k) * out + n] = r[k];
    }
  }
  for (; t < rows; ++t) {
    for (int64_t n = 0; n < out; ++n) y[t * out + n] = Dot(x + t * in, w + n * in, in);
  }
}

void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x + t * dim;
    float* yr = y + t * dim;
    const float ms = Dot(xr, xr, dim) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(ms + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

void LayerNorm(const float* x, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
               float* y) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x + t * dim;
    float* yr = y + t * dim;
    float mean = 0.0f;
    for (int64_t i = 0; i < dim; ++i) mean += xr[i];
    mean /= static_cast<float>(dim);
    float var = 0.0f;
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
  }
}

std::vector<float> RopeInvFreq(int64_t dim, double theta) {
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[i] = 1.0f / std::pow(base, expo);
  }
  return inv;
}

void RopeInterleaved(float* x, int64_t dim, int64_t pos, const float* inv_freq) {
  const float p = static_cast<float>(pos);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float angle = p * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = b * c + a * s;
  }
}

void SwiGlu(const float* gate, const float* up, int64_t n, float limit, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i], u = up[i];
    if (limit > 0.0f) {
      g = std::fmin(g, limit);
      u = std::fmax(std::fmin(u, limit), -limit);
    }
    out[i] = g / (1.0f + std::exp(-g)) * u;
  }
}

void MlaAttendRow(const float* q_abs, const float* q_pe, int64_t heads, int64_t latent, int64_t rope,
                  const float* cache, int64_t stride, const int32_t* sel, int64_t n_sel, float scale,
                  float* out, float* scratch) {
  for (int64_t h = 0; h < heads; ++h) {
    const float* qa = q_abs + h * latent;
    const float* qp = q_pe + h * rope;
    float m = -INFINITY;
    for (int64_t j = 0; j < n_sel; ++j) {
      const float* row = cache + static_cast<int64_t>(sel[j]) * stride;
      float s = Dot(qa, row, latent);
      if (rope > 0) s += Dot(qp, row + latent, rope);
      s *= scale;
      scratch[j] = s;
      m = std::fmax(m, s);
    }
    float denom = 0.0f;
    for (int64_t j = 0; j < n_sel; ++j) {
      scratch[j] = std::exp(scratch[j] - m);
      denom += scratch[j];
    }
    const float inv = 1.0f / denom;
    float* o = out + h * latent;
    std::memset(o, 0, sizeof(float) * latent);
    for (int64_t j = 0; j < n_sel; ++j) {
      const float p = scratch[j] * inv;
      const float* row = cache + static_cast<int64_t>(sel[j]) * stride;
      for (int64_t i = 0; i < latent; ++i) o[i] += p * row[i];
    }
  }
}

}  // namespace ferry::kernels::cpu
