// ferry-kernel-check cases for glm5_next's ops (kernels/cuda/next_ops.cu): mHC mixing against
// model::MhcPre's u loop and model::MhcPost, the KDA conv / norms / decay / output against the
// loops of model/blocks/kda.cc, pool keys against model::PooledIndexerPools, and the pooled
// selection's expansion against the CPU backend's (CpuOps::ExpandPoolSelection). Float32 paths to 1e-5; bf16
// outputs to 1e-2.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"
#include "model/checkpoint/config.h"
#include "model/blocks/mhc.h"
#include "model/blocks/pooled_indexer.h"
#include "tests/kernels/harness.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

Result MhcMixCase(std::mt19937& rng, int64_t rows, int64_t S, int64_t D, bool bf16_y) {
  Result r;
  r.tolerance = bf16_y ? 1e-5 : 1e-6;  // y is bf16-exact either way; float32 sums in the same order
  std::vector<float> h = RandomF32(rows * S * D, 1.0f, 0.0f, rng), pre = RandomF32(rows * S, 0.5f, 0.5f, rng);
  model::MhcMix mix;
  mix.pre = pre;
  mix.post = RandomF32(rows * S, 0.5f, 1.0f, rng);
  mix.comb = RandomF32(rows * S * S, 0.3f, 0.25f, rng);
  std::vector<uint16_t> yb;
  std::vector<float> yf;
  RandomBf16(rows * D, 1.0f, 0.0f, rng, &yb, &yf);
  std::vector<float> want_u(rows * D), want_h = h;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < S; ++j) acc += pre[t * S + j] * h[(t * S + j) * D + d];
      want_u[t * D + d] = acc;
    }
  }
  model::ModelConfig c;
  c.hc_mult = S;
  c.hidden_size = D;
  model::MhcPost(mix, c, yf.data(), rows, want_h.data());
  Device dev(&r.error);
  float* dh = dev.Upload(h);
  float* dpre = dev.Upload(pre);
  float* dpost = dev.Upload(mix.post);
  float* dcomb = dev.Upload(mix.comb);
  float* du = dev.Poisoned<float>(rows * D);
  uint16_t* dyb = dev.Upload(yb);
  float* dyf = dev.Upload(yf);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::MhcMixIn(dh, dpre, rows, S, D, du));
  if (bf16_y) {
    HARNESS_CHECK_OK(cu::MhcMixOutBf16(dh, dpost, dcomb, dyb, rows, S, D));
  } else {
    HARNESS_CHECK_OK(cu::MhcMixOutF32(dh, dpost, dcomb, dyf, rows, S, D));
  }
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got_u = dev.Download(du, rows * D), got_h = dev.Download(dh, rows * S * D);
  if (!r.error.empty()) return r;
  r.rel_err = std::max(RelErr(got_u, want_u, &r.unwritten), RelErr(got_h, want_h, &r.unwritten));
  r.note = "mix in, then mix out in place: the worse";
  return r;
}

// Conv over two pieces (the tail carries over), L2 norms, decay, sigmoid and the gated output.
Result KdaOpsCase(std::mt19937& rng, int64_t n, int64_t H, int64_t d, int64_t K, bool bf16) {
  Result r;
  r.tolerance = bf16 ? 1e-2 : 1e-5;
  const int64_t C = H * d, n1 = n / 3;
  std::vector<uint16_t> xb, fb, gb;
  std::vector<float> xf, ff, gf;
  RandomBf16(n * C, 1.0f, 0.0f, rng, &xb, &xf);
  RandomBf16(n * C, 1.0f, 0.0f, rng, &fb, &ff);
  RandomBf16(n * C, 2.0f, 0.0f, rng, &gb, &gf);
  std::vector<float> w = RandomF32(C * K, 0.5f, 0.0f, rng), tail = RandomF32((K - 1) * C, 1.0f, 0.0f, rng);
  std::vector<float> a_log = RandomF32(H, 0.5f, 0.0f, rng), dt = RandomF32(C, 0.5f, 0.0f, rng);
  std::vector<float> o = RandomF32(n * C, 1.0f, 0.0f, rng), o_norm = RandomF32(d, 0.1f, 1.0f, rng);
  std::vector<float> beta = RandomF32(n * H, 2.0f, 0.0f, rng);
  // CPU loops (model/blocks/kda.cc's order).
  std::vector<float> want_y(n * C), want_tail = tail, want_g(n * C), want_out(n * C), want_beta = beta;
  {
    std::vector<float> window((K - 1 + n) * C);
    std::copy(tail.begin(), tail.end(), window.begin());
    std::copy(xf.begin(), xf.end(), window.begin() + (K - 1) * C);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t ch = 0; ch < C; ++ch) {
        float acc = 0.0f;
        for (int64_t j = 0; j < K; ++j) acc += w[ch * K + j] * window[(t + j) * C + ch];
        want_y[t * C + ch] = acc / (1.0f + std::exp(-acc));
      }
    }
    std::copy(window.begin() + n * C, window.begin() + (n + K - 1) * C, want_tail.begin());
    const float qs = 1.0f / std::sqrt(static_cast<float>(d));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        float* v = &want_y[t * C + h * d];
        const float inv = 1.0f / std::sqrt(cpu::Dot(v, v, d) + 1e-6f);
        for (int64_t i = 0; i < d; ++i) v[i] = v[i] * inv * qs;
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t ch = 0; ch < C; ++ch) {
        want_g[t * C + ch] = -5.0f / (1.0f + std::exp(-(std::exp(a_log[ch / d]) * (ff[t * C + ch] + dt[ch]))));
      }
    }
    for (float& x : want_beta) x = 1.0f / (1.0f + std::exp(-x));
    cpu::RmsNorm(o.data(), n * H, d, o_norm.data(), 1e-5f, want_out.data());
    for (int64_t i = 0; i < n * C; ++i) want_out[i] *= 1.0f / (1.0f + std::exp(-gf[i]));
  }
  Device dev(&r.error);
  uint16_t* dxb = dev.Upload(xb);
  float* dxf = dev.Upload(xf);
  float* dw = dev.Upload(w);
  float* dtail = dev.Upload(tail);
  float* dy = dev.Poisoned<float>(n * C);
  uint16_t* dfb = dev.Upload(fb);
  float* dff = dev.Upload(ff);
  float* dalog = dev.Upload(a_log);
  float* ddt = dev.Upload(dt);
  float* dg = dev.Poisoned<float>(n * C);
  float* dbeta = dev.Upload(beta);
  float* dob = dev.Upload(o);
  float* dnorm = dev.Upload(o_norm);
  uint16_t* dgb = dev.Upload(gb);
  float* dgf = dev.Upload(gf);
  uint16_t* doutb = dev.Poisoned<uint16_t>(n * C);
  float* doutf = dev.Poisoned<float>(n * C);
  if (!r.error.empty()) return r;
  if (bf16) {
    HARNESS_CHECK_OK(cu::KdaConvSiluBf16(dxb, n1, C, K, dw, dtail, dy));
    HARNESS_CHECK_OK(cu::KdaConvSiluBf16(dxb + n1 * C, n - n1, C, K, dw, dtail, dy + n1 * C));
    HARNESS_CHECK_OK(cu::KdaDecayBf16(dfb, n, H, d, dalog, ddt, -5.0f, dg));
    HARNESS_CHECK_OK(cu::KdaOutputBf16(dob, dgb, n, H, d, dnorm, 1e-5f, doutb));
  } else {
    HARNESS_CHECK_OK(cu::KdaConvSiluF32(dxf, n1, C, K, dw, dtail, dy));
    HARNESS_CHECK_OK(cu::KdaConvSiluF32(dxf + n1 * C, n - n1, C, K, dw, dtail, dy + n1 * C));
    HARNESS_CHECK_OK(cu::KdaDecayF32(dff, n, H, d, dalog, ddt, -5.0f, dg));
    HARNESS_CHECK_OK(cu::KdaOutputF32(dob, dgf, n, H, d, dnorm, 1e-5f, doutf));
  }
  HARNESS_CHECK_OK(cu::KdaL2Norm(dy, n, H, d, 1.0f / std::sqrt(static_cast<float>(d))));
  HARNESS_CHECK_OK(cu::SigmoidF32(dbeta, n * H));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> y = dev.Download(dy, n * C), tl = dev.Download(dtail, tail.size()), g = dev.Download(dg, n * C),
                     bt = dev.Download(dbeta, beta.size());
  std::vector<float> out = bf16 ? ToF32(dev.Download(doutb, n * C)) : dev.Download(doutf, n * C);
  if (!r.error.empty()) return r;
  const double conv_tol_scale = bf16 ? 1.0 : 1.0;  // inputs are bf16-exact in both paths
  r.rel_err = std::max({RelErr(y, want_y, &r.unwritten) * conv_tol_scale, RelErr(g, want_g, &r.unwritten),
                        RelErr(bt, want_beta, &r.unwritten), RelErr(out, want_out, &r.unwritten)});
  for (size_t i = 0; i < tl.size(); ++i) r.mismatched += tl[i] != want_tail[i];  // the tail is moved, not computed
  r.note = "conv in two pieces + l2norm, decay, sigmoid, output: the worst";
  return r;
}

// Pool keys of pools [p0, p1) of one conversation over shuffled pages, against the CPU twin.
Result PooledKeysCase(std::mt19937& rng, int64_t len, int64_t kpool, int64_t dim, int64_t page_rows, bool bf16) {
  Result r;
  r.tolerance = bf16 ? 1e-2 : 1e-5;
  const int64_t pages = (len + page_rows - 1) / page_rows + 1, table_stride = pages;
  // Page layout: [keys | gates | pools], each page_rows x dim.
  const int64_t page_stride = 3 * page_rows * dim;
  std::vector<uint16_t> arena_b;
  std::vector<float> arena_f;
  RandomBf16(pages * page_stride, 1.0f, 0.0f, rng, &arena_b, &arena_f);
  std::vector<int32_t> table(table_stride);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  auto at = [&](int region, int64_t t) { return table[t / page_rows] * page_stride + region * page_rows * dim + (t % page_rows) * dim; };
  model::ModelConfig c;
  c.index_head_dim = dim;
  c.index_kpool = kpool;
  model::PooledIndexerWeights w;
  w.ape.data = RandomF32(kpool * dim, 0.5f, 0.0f, rng);
  w.ape.rows = kpool;
  w.ape.cols = dim;
  std::vector<float> rowbuf;
  std::vector<std::vector<float>> rows_kg(len);
  for (int64_t t = 0; t < len; ++t) {
    rows_kg[t].assign(2 * dim, 0.0f);
    std::copy_n(&arena_f[at(0, t)], dim, rows_kg[t].data());
    std::copy_n(&arena_f[at(1, t)], dim, rows_kg[t].data() + dim);
  }
  const int64_t p0 = 1, p1 = len / kpool;  // pool 0 "cached" already
  std::vector<float> pools(static_cast<size_t>(p1 * dim), 0.0f);
  model::PooledIndexerPools(
      w.ape.data.data(), dim, kpool, p0, p1, [&](int64_t t) -> const float* { return rows_kg[t].data(); },
      [&](int64_t t) -> const float* { return rows_kg[t].data() + dim; },
      [&](int64_t p) -> float* { return pools.data() + p * dim; });
  std::vector<float> want;
  std::vector<float> got;
  Device dev(&r.error);
  int32_t* dtable = dev.Upload(table);
  float* dape = dev.Upload(w.ape.data);
  if (bf16) {
    uint16_t* arena = dev.Upload(arena_b);
    if (!r.error.empty()) return r;
    auto view = [&](int region) {
      return cu::PagedCacheBf16{arena + region * page_rows * dim, pages, page_rows, page_stride, dim, dtable, table_stride};
    };
    HARNESS_CHECK_OK(cu::PooledKeysBf16(view(0), view(1), view(2), 0, p0, p1, kpool, dape));
    HARNESS_CHECK_OK(cu::Synchronize());
    const std::vector<float> all = ToF32(dev.Download(arena, arena_b.size()));
    for (int64_t p = p0; p < p1; ++p) got.insert(got.end(), &all[at(2, p)], &all[at(2, p)] + dim);
  } else {
    float* arena = dev.Upload(arena_f);
    if (!r.error.empty()) return r;
    auto view = [&](int region) {
      return cu::PagedCacheF32{arena + region * page_rows * dim, pages, page_rows, page_stride, dim, dtable, table_stride};
    };
    HARNESS_CHECK_OK(cu::PooledKeysF32(view(0), view(1), view(2), 0, p0, p1, kpool, dape));
    HARNESS_CHECK_OK(cu::Synchronize());
    const std::vector<float> all = dev.Download(arena, arena_f.size());
    for (int64_t p = p0; p < p1; ++p) got.insert(got.end(), &all[at(2, p)], &all[at(2, p)] + dim);
  }
  if (!r.error.empty()) return r;
  want.assign(pools.begin() + p0 * dim, pools.end());
  r.rel_err = RelErr(got, want, &r.unwritten);
  return r;
}

Result ExpandCase(std::mt19937& rng, int64_t kpool, int64_t keep) {
  Result r;
  std::vector<int64_t> pos = {0, 5, kpool * keep - 1, kpool * keep + kpool - 2, kpool * keep + kpool - 1, 300, 301};
  const int64_t rows = static_cast<int64_t>(pos.size());
  std::vector<int32_t> ids(rows * keep, -1), offsets = {0}, want;
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t n = (pos[t] + 1) / kpool;
    std::vector<int32_t> row;
    if (n <= keep) {
      for (int64_t i = 0; i <= pos[t]; ++i) row.push_back(static_cast<int32_t>(i));
    } else {
      std::vector<int32_t> all(n);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      all.resize(keep);
      std::sort(all.begin(), all.end());
      for (int64_t j = 0; j < keep; ++j) {
        ids[t * keep + j] = all[j];
        for (int64_t i = 0; i < kpool; ++i) row.push_back(static_cast<int32_t>(all[j] * kpool + i));
      }
      for (int64_t i = n * kpool; i <= pos[t]; ++i) row.push_back(static_cast<int32_t>(i));
    }
    want.insert(want.end(), row.begin(), row.end());
    offsets.push_back(static_cast<int32_t>(want.size()));
  }
  Device dev(&r.error);
  int32_t* dids = dev.Upload(ids);
  int64_t* dpos = dev.Upload(pos);
  int32_t* doff = dev.Upload(offsets);
  int32_t* dsel = dev.Poisoned<int32_t>(want.size());
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::ExpandPoolSelection(dids, keep, dpos, rows, kpool, doff, dsel));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<int32_t> got = dev.Download(dsel, want.size());
  if (!r.error.empty()) return r;
  for (size_t i = 0; i < want.size(); ++i) r.mismatched += got[i] != want[i];
  return r;
}

// The row-invariant Linear: against cpu::Linear by norm, and each row computed alone must equal
// the same row computed in the batch, bit for bit.
Result RowInvariantCase(std::mt19937& rng, int64_t rows, int64_t in, int64_t out) {
  Result r;
  r.tolerance = 1e-5;
  std::vector<float> x = RandomF32(rows * in, 1.0f, 0.0f, rng), w = RandomF32(out * in, 0.05f, 0.0f, rng);
  std::vector<float> want(rows * out);
  cpu::Linear(x.data(), rows, in, w.data(), out, want.data());
  Device dev(&r.error);
  float* dx = dev.Upload(x);
  float* dw = dev.Upload(w);
  float* dy = dev.Poisoned<float>(rows * out);
  float* dy1 = dev.Poisoned<float>(out);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::LinearF32RowInvariant(dx, rows, in, dw, out, dy));
  const int64_t pick = rows / 2;
  HARNESS_CHECK_OK(cu::LinearF32RowInvariant(dx + pick * in, 1, in, dw, out, dy1));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got = dev.Download(dy, rows * out), one = dev.Download(dy1, out);
  if (!r.error.empty()) return r;
  r.rel_err = RelErr(got, want, &r.unwritten);
  for (int64_t o = 0; o < out; ++o) r.mismatched += std::memcmp(&one[o], &got[pick * out + o], sizeof(float)) != 0;
  r.note = "row alone vs in the batch: bit-identical";
  return r;
}

// The one-launch forms against the single launches (KdaOpsCase checks those against the CPU), bit
// for bit: KdaConvSiluQkv* vs three KdaConvSilu* (outputs and tails, tails laid one after another),
// KdaL2NormQk vs two KdaL2Norm; and MhcStreamsF32 against the CPU's copy of u into every stream.
Result KdaQkvCase(std::mt19937& rng, int64_t n, int64_t H, int64_t d, int64_t K, bool bf16) {
  Result r;
  r.tolerance = 0.0;
  const int64_t C = H * d, S = 4;
  Device dev(&r.error);
  std::vector<float> tails = RandomF32(3 * (K - 1) * C, 1.0f, 0.0f, rng), u = RandomF32(n * C, 1.0f, 0.0f, rng);
  float* tail_one = dev.Upload(tails);
  float* tail_three = dev.Upload(tails);
  const uint16_t* xb[3];
  const float* xf[3];
  const float* w[3];
  float *y_one[3], *y_three[3];
  for (int i = 0; i < 3; ++i) {
    std::vector<uint16_t> b;
    std::vector<float> f;
    RandomBf16(n * C, 1.0f, 0.0f, rng, &b, &f);
    xb[i] = dev.Upload(b);
    xf[i] = dev.Upload(f);
    w[i] = dev.Upload(RandomF32(C * K, 0.5f, 0.0f, rng));
    y_one[i] = dev.Poisoned<float>(n * C);
    y_three[i] = dev.Poisoned<float>(n * C);
  }
  float* du = dev.Upload(u);
  float* dh = dev.Poisoned<float>(n * S * C);
  if (!r.error.empty()) return r;
  if (bf16) {
    HARNESS_CHECK_OK(cu::KdaConvSiluQkvBf16(xb, n, C, K, w, tail_one, y_one));
    for (int i = 0; i < 3; ++i) {
      HARNESS_CHECK_OK(cu::KdaConvSiluBf16(xb[i], n, C, K, w[i], tail_three + i * (K - 1) * C, y_three[i]));
    }
  } else {
    HARNESS_CHECK_OK(cu::KdaConvSiluQkvF32(xf, n, C, K, w, tail_one, y_one));
    for (int i = 0; i < 3; ++i) {
      HARNESS_CHECK_OK(cu::KdaConvSiluF32(xf[i], n, C, K, w[i], tail_three + i * (K - 1) * C, y_three[i]));
    }
  }
  const float qs = 1.0f / std::sqrt(static_cast<float>(d));
  HARNESS_CHECK_OK(cu::KdaL2NormQk(y_one[0], qs, y_one[1], n, H, d));
  HARNESS_CHECK_OK(cu::KdaL2Norm(y_three[0], n, H, d, qs));
  HARNESS_CHECK_OK(cu::KdaL2Norm(y_three[1], n, H, d, 1.0f));
  HARNESS_CHECK_OK(cu::MhcStreamsF32(du, n, S, C, dh));
  HARNESS_CHECK_OK(cu::Synchronize());
  auto same = [&](const float* a, const float* b, size_t m) {
    const std::vector<float> va = dev.Download(a, m), vb = dev.Download(b, m);
    for (size_t i = 0; i < m && i < va.size() && i < vb.size(); ++i) {
      r.mismatched += std::memcmp(&va[i], &vb[i], sizeof(float)) != 0;
    }
  };
  for (int i = 0; i < 3; ++i) same(y_one[i], y_three[i], n * C);
  same(tail_one, tail_three, 3 * (K - 1) * C);
  std::vector<float> want_h(n * S * C);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < S; ++j) std::copy(&u[t * C], &u[t * C] + C, &want_h[(t * S + j) * C]);
  }
  const std::vector<float> got_h = dev.Download(dh, n * S * C);
  if (!r.error.empty()) return r;
  r.rel_err = RelErr(got_h, want_h, &r.unwritten);
  r.note = "qkv conv, qk norm: one launch vs three/two, bit for bit; streams vs the CPU";
  return r;
}

// The fused mHC input ops against their unfused launches, bit for bit: RmsNormLinearF32RowInvariant
// vs RmsNormF32 (weight of ones) + LinearF32RowInvariant, and MhcMixInNorm* vs MhcMixIn + the
// RMSNorm into y (u too); by norm against the CPU (RMSNorm then Linear; the mix then RMSNorm).
Result MhcFusedCase(std::mt19937& rng, int64_t rows, int64_t S, int64_t D, int64_t M, bool bf16_y) {
  Result r;
  r.tolerance = bf16_y ? 1e-2 : 1e-5;
  const float eps = 1e-6f;
  std::vector<float> h = RandomF32(rows * S * D, 1.0f, 0.0f, rng), pre = RandomF32(rows * S, 0.5f, 0.5f, rng);
  std::vector<float> fn = RandomF32(M * S * D, 0.05f, 0.0f, rng), ones(S * D, 1.0f);
  std::vector<uint16_t> wb;
  std::vector<float> wf;
  RandomBf16(D, 0.5f, 1.0f, rng, &wb, &wf);
  // CPU: logits = Linear(RmsNorm(h)); u = the mix; y = RmsNorm(u) * w.
  std::vector<float> normed(rows * S * D), want_m(rows * M), want_u(rows * D), want_y(rows * D);
  cpu::RmsNorm(h.data(), rows, S * D, ones.data(), eps, normed.data());
  cpu::Linear(normed.data(), rows, S * D, fn.data(), M, want_m.data());
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < S; ++j) acc += pre[t * S + j] * h[(t * S + j) * D + d];
      want_u[t * D + d] = acc;
    }
  }
  cpu::RmsNorm(want_u.data(), rows, D, wf.data(), eps, want_y.data());
  Device dev(&r.error);
  float* dh = dev.Upload(h);
  float* dpre = dev.Upload(pre);
  float* dfn = dev.Upload(fn);
  float* dones = dev.Upload(ones);
  float* dwf = dev.Upload(wf);
  uint16_t* dwb = dev.Upload(wb);
  float* dnormed = dev.Poisoned<float>(rows * S * D);
  float *dm = dev.Poisoned<float>(rows * M), *dm2 = dev.Poisoned<float>(rows * M);
  float *du = dev.Poisoned<float>(rows * D), *du2 = dev.Poisoned<float>(rows * D);
  float *dyf = dev.Poisoned<float>(rows * D), *dyf2 = dev.Poisoned<float>(rows * D);
  uint16_t *dyb = dev.Poisoned<uint16_t>(rows * D), *dyb2 = dev.Poisoned<uint16_t>(rows * D);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::RmsNormLinearF32RowInvariant(dh, rows, S * D, eps, dfn, M, dm));
  HARNESS_CHECK_OK(cu::RmsNormF32(dh, rows, S * D, dones, eps, dnormed));
  HARNESS_CHECK_OK(cu::LinearF32RowInvariant(dnormed, rows, S * D, dfn, M, dm2));
  if (bf16_y) {
    HARNESS_CHECK_OK(cu::MhcMixInNormToBf16(dh, dpre, rows, S, D, dwb, eps, du, dyb));
    HARNESS_CHECK_OK(cu::MhcMixIn(dh, dpre, rows, S, D, du2));
    HARNESS_CHECK_OK(cu::RmsNormF32ToBf16(du2, rows, D, dwb, eps, dyb2));
  } else {
    HARNESS_CHECK_OK(cu::MhcMixInNormF32(dh, dpre, rows, S, D, dwf, eps, du, dyf));
    HARNESS_CHECK_OK(cu::MhcMixIn(dh, dpre, rows, S, D, du2));
    HARNESS_CHECK_OK(cu::RmsNormF32(du2, rows, D, dwf, eps, dyf2));
  }
  // The Sinkhorn folded in too (one launch when S == 4): pre, post, comb, u and y as MhcSinkhorn then
  // MhcMixInNorm*, on the logits just made.
  const std::vector<float> scale = {0.9f, 1.1f, 0.7f}, base = RandomF32(M, 0.5f, 0.0f, rng);
  float* dscale = dev.Upload(scale);
  float* dbase = dev.Upload(base);
  float *pre1 = dev.Poisoned<float>(rows * S), *post1 = dev.Poisoned<float>(rows * S);
  float *comb1 = dev.Poisoned<float>(rows * S * S), *pre2 = dev.Poisoned<float>(rows * S);
  float *post2 = dev.Poisoned<float>(rows * S), *comb2 = dev.Poisoned<float>(rows * S * S);
  float *su1 = dev.Poisoned<float>(rows * D), *su2 = dev.Poisoned<float>(rows * D);
  float *sy1 = dev.Poisoned<float>(rows * D), *sy2 = dev.Poisoned<float>(rows * D);
  uint16_t *sb1 = dev.Poisoned<uint16_t>(rows * D), *sb2 = dev.Poisoned<uint16_t>(rows * D);
  if (!r.error.empty()) return r;
  const bool sink = M == (2 + S) * S;
  if (sink) {
    HARNESS_CHECK_OK(cu::MhcSinkhorn(dm, rows, S, dscale, dbase, 1e-6f, 20, pre2, post2, comb2));
    if (bf16_y) {
      HARNESS_CHECK_OK(cu::MhcSinkhornMixInNormToBf16(dm, dscale, dbase, 1e-6f, 20, pre1, post1, comb1, dh, rows, S,
                                                      D, dwb, eps, su1, sb1));
      HARNESS_CHECK_OK(cu::MhcMixInNormToBf16(dh, pre2, rows, S, D, dwb, eps, su2, sb2));
    } else {
      HARNESS_CHECK_OK(cu::MhcSinkhornMixInNormF32(dm, dscale, dbase, 1e-6f, 20, pre1, post1, comb1, dh, rows, S, D,
                                                   dwf, eps, su1, sy1));
      HARNESS_CHECK_OK(cu::MhcMixInNormF32(dh, pre2, rows, S, D, dwf, eps, su2, sy2));
    }
  }
  HARNESS_CHECK_OK(cu::Synchronize());
  auto same = [&](const auto& a, const auto& b) {
    for (size_t i = 0; i < a.size(); ++i) r.mismatched += std::memcmp(&a[i], &b[i], sizeof(a[i])) != 0;
  };
  if (sink) {
    same(dev.Download(pre1, rows * S), dev.Download(pre2, rows * S));
    same(dev.Download(post1, rows * S), dev.Download(post2, rows * S));
    same(dev.Download(comb1, rows * S * S), dev.Download(comb2, rows * S * S));
    same(dev.Download(su1, rows * D), dev.Download(su2, rows * D));
    if (bf16_y) {
      same(dev.Download(sb1, rows * D), dev.Download(sb2, rows * D));
    } else {
      same(dev.Download(sy1, rows * D), dev.Download(sy2, rows * D));
    }
  }
  const std::vector<float> m = dev.Download(dm, rows * M), m2 = dev.Download(dm2, rows * M);
  const std::vector<float> u = dev.Download(du, rows * D), u2 = dev.Download(du2, rows * D);
  same(m, m2);
  same(u, u2);
  std::vector<float> y;
  if (bf16_y) {
    const std::vector<uint16_t> yb = dev.Download(dyb, rows * D), yb2 = dev.Download(dyb2, rows * D);
    same(yb, yb2);
    y = ToF32(yb);
  } else {
    y = dev.Download(dyf, rows * D);
    same(y, dev.Download(dyf2, rows * D));
  }
  if (!r.error.empty()) return r;
  r.rel_err = std::max({RelErr(m, want_m, &r.unwritten), RelErr(u, want_u, &r.unwritten),
                        RelErr(y, want_y, &r.unwritten)});
  r.note = "fused vs unfused launches bit for bit (and the Sinkhorn folded in when M = (2+S)S); logits, u, y vs "
           "the CPU: the worst";
  return r;
}

}  // namespace

void AddNextCases(std::vector<Case>* cases) {
  auto add = [&](std::string name, std::function<Result(std::mt19937&)> f) { cases->push_back({std::move(name), f}); };
  add("mhc_mix in+out rows=37 streams=4 dim=128 y=f32", [](std::mt19937& g) { return MhcMixCase(g, 37, 4, 128, false); });
  add("mhc_mix in+out rows=5 streams=4 dim=4096 y=bf16", [](std::mt19937& g) { return MhcMixCase(g, 5, 4, 4096, true); });
  add("kda conv+norm+decay+output n=37 heads=4 d=32 k=4 f32", [](std::mt19937& g) { return KdaOpsCase(g, 37, 4, 32, 4, false); });
  add("kda conv+norm+decay+output n=9 heads=64 d=128 k=4 bf16", [](std::mt19937& g) { return KdaOpsCase(g, 9, 64, 128, 4, true); });
  add("pooled_keys len=90 kpool=4 dim=32 page=16 f32", [](std::mt19937& g) { return PooledKeysCase(g, 90, 4, 32, 16, false); });
  add("pooled_keys len=1000 kpool=4 dim=128 page=64 bf16", [](std::mt19937& g) { return PooledKeysCase(g, 1000, 4, 128, 64, true); });
  add("kda qkv conv + qk norm in one launch, mhc streams n=3 heads=8 d=128 k=4 bf16",
      [](std::mt19937& g) { return KdaQkvCase(g, 3, 8, 128, 4, true); });
  add("kda qkv conv + qk norm in one launch, mhc streams n=5 heads=3 d=32 k=3 f32",
      [](std::mt19937& g) { return KdaQkvCase(g, 5, 3, 32, 3, false); });
  add("mhc fused in (+ sinkhorn) rows=3 streams=4 dim=4096 logits=24 y=bf16",
      [](std::mt19937& g) { return MhcFusedCase(g, 3, 4, 4096, 24, true); });
  add("mhc fused in (+ sinkhorn) rows=5 streams=4 dim=128 logits=24 y=f32",
      [](std::mt19937& g) { return MhcFusedCase(g, 5, 4, 128, 24, false); });
  add("mhc fused in (+ sinkhorn: 3 streams take the two-launch path) rows=2 streams=3 dim=32 logits=15 y=f32",
      [](std::mt19937& g) { return MhcFusedCase(g, 2, 3, 32, 15, false); });
  add("mhc fused in rows=2 streams=3 dim=30 logits=16 y=f32 (unaligned widths: scalar paths)",
      [](std::mt19937& g) { return MhcFusedCase(g, 2, 3, 30, 16, false); });
  add("linear_f32_row_invariant rows=49 in=512 out=24", [](std::mt19937& g) { return RowInvariantCase(g, 49, 512, 24); });
  add("linear_f32_row_invariant rows=7 in=16384 out=24", [](std::mt19937& g) { return RowInvariantCase(g, 7, 16384, 24); });
  add("expand_pool_selection kpool=4 keep=4", [](std::mt19937& g) { return ExpandCase(g, 4, 4); });
  add("expand_pool_selection kpool=4 keep=64", [](std::mt19937& g) { return ExpandCase(g, 4, 64); });
  add("expand_pool_selection kpool=4 keep=512", [](std::mt19937& g) { return ExpandCase(g, 4, 512); });
}

}  // namespace ferry::harness
