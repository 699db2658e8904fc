// ferry-kernel-check cases for the dense ops: LinearBf16, GroupedLinearBf16, RopeInterleavedBf16,
// SwiGluBf16, KdaRecurrentStep, MhcSinkhorn. bf16 outputs are held to 1e-2 relative norm error
// (output rounding is about 2^-9); float32 ones that follow the CPU's order of operations to 1e-5.
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
#include "tests/kernels/harness.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

// LinearBf16 against the CPU. With `gemv` (a decode-sized batch): the shape must take GemvBf16,
// and each row of the batch must equal that row alone bit for bit (batch invariance).
Result LinearCase(std::mt19937& rng, int64_t rows, int64_t in, int64_t out, bool gemv) {
  Result r;
  r.tolerance = 1e-2;
  std::vector<uint16_t> xb, wb;
  std::vector<float> xf, wf;
  RandomBf16(rows * in, 1.0f, 0.0f, rng, &xb, &xf);
  RandomBf16(out * in, 0.05f, 0.0f, rng, &wb, &wf);
  std::vector<float> want(rows * out);
  cpu::Linear(xf.data(), rows, in, wf.data(), out, want.data());
  Device dev(&r.error);
  uint16_t* x = dev.Upload(xb);
  uint16_t* w = dev.Upload(wb);
  uint16_t* y = dev.Poisoned<uint16_t>(rows * out);
  uint16_t* alone = gemv ? dev.Poisoned<uint16_t>(rows * out) : nullptr;
  if (!r.error.empty()) return r;
  if (gemv && !cu::GemvApplies(x, rows, in, w)) {
    r.error = "GemvApplies is false for this shape: the case would not test GemvBf16";
    return r;
  }
  HARNESS_CHECK_OK(cu::LinearBf16(x, rows, in, w, out, y));
  for (int64_t i = 0; gemv && i < rows; ++i) {
    HARNESS_CHECK_OK(cu::LinearBf16(x + i * in, 1, in, w, out, alone + i * out));
  }
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint16_t> got = dev.Download(y, rows * out);
  if (gemv) {
    const std::vector<uint16_t> one = dev.Download(alone, rows * out);
    for (size_t i = 0; i < got.size() && r.error.empty(); ++i) r.mismatched += got[i] != one[i];
  }
  if (!r.error.empty()) return r;
  r.rel_err = RelErr(ToF32(got), want, &r.unwritten);
  return r;
}

// One problem of the several-products cases: random x [rows, in] and w [out, in] on the device,
// a poisoned y for the call under test and one for LinearBf16 alone; the CPU's product is
// appended to *want.
struct LinearProblemData {
  const uint16_t* x;
  const uint16_t* w;
  uint16_t* y;
  uint16_t* alone;
  int64_t rows, in, out;
};

LinearProblemData MakeLinearProblem(Device& dev, std::mt19937& rng, int64_t rows, int64_t in, int64_t out,
                                    std::vector<float>* want) {
  std::vector<uint16_t> xb, wb;
  std::vector<float> xf, wf;
  RandomBf16(std::max<int64_t>(rows, 1) * in, 1.0f, 0.0f, rng, &xb, &xf);
  RandomBf16(out * in, 0.05f, 0.0f, rng, &wb, &wf);
  std::vector<float> y(rows * out);
  if (rows > 0) cpu::Linear(xf.data(), rows, in, wf.data(), out, y.data());
  want->insert(want->end(), y.begin(), y.end());
  const int64_t cap = std::max<int64_t>(rows, 1) * out;
  return {dev.Upload(xb), dev.Upload(wb), dev.Poisoned<uint16_t>(cap), dev.Poisoned<uint16_t>(cap), rows, in, out};
}

// After the call under test: each problem through LinearBf16 alone, its y equal to that bit for
// bit (mismatched), and all of them against the CPU by norm.
void CheckLinearProblems(Device& dev, const std::vector<LinearProblemData>& p, const std::vector<float>& want,
                         Result* r) {
  for (const LinearProblemData& q : p) {
    if (q.rows > 0 && r->error.empty()) {
      if (absl::Status st = cu::LinearBf16(q.x, q.rows, q.in, q.w, q.out, q.alone); !st.ok()) {
        r->error = std::string(st.message());
      }
    }
  }
  if (absl::Status st = cu::Synchronize(); !st.ok() && r->error.empty()) r->error = std::string(st.message());
  std::vector<float> got;
  for (const LinearProblemData& q : p) {
    const int64_t m = q.rows * q.out;
    if (m == 0 || !r->error.empty()) continue;
    const std::vector<uint16_t> a = dev.Download(q.y, m), b = dev.Download(q.alone, m);
    if (!r->error.empty()) return;
    for (int64_t i = 0; i < m; ++i) r->mismatched += a[i] != b[i];
    const std::vector<float> f = ToF32(a);
    got.insert(got.end(), f.begin(), f.end());
  }
  if (r->error.empty()) r->rel_err = RelErr(got, want, &r->unwritten);
}

// GroupedLinearBf16 over `rows_per_group` (zeros skipped): each group against the CPU, and bit for
// bit against LinearBf16 of that group alone (mismatched counts differing elements).
Result GroupedLinearCase(std::mt19937& rng, const std::vector<int64_t>& rows_per_group, int64_t in, int64_t out) {
  Result r;
  r.tolerance = 1e-2;
  Device dev(&r.error);
  std::vector<LinearProblemData> p;
  std::vector<cu::LinearGroupBf16> groups;
  std::vector<float> want;
  for (int64_t rows : rows_per_group) {
    p.push_back(MakeLinearProblem(dev, rng, rows, in, out, &want));
    groups.push_back({p.back().x, rows, p.back().w, p.back().y});
  }
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::GroupedLinearBf16(groups.data(), static_cast<int64_t>(groups.size()), in, out));
  CheckLinearProblems(dev, p, want, &r);
  return r;
}

// LinearBf16Many over problems {in, out} of `rows` rows (their own x): each y_i against the CPU,
// and bit for bit against LinearBf16 of that problem alone. With rows <= kGemvMaxRows it is one
// GemvKernel launch over all of them; above, one LinearBf16 call each.
Result LinearManyCase(std::mt19937& rng, int64_t rows, const std::vector<std::pair<int64_t, int64_t>>& shapes) {
  Result r;
  r.tolerance = 1e-2;
  Device dev(&r.error);
  std::vector<LinearProblemData> p;
  std::vector<cu::LinearProblemBf16> many;
  std::vector<float> want;
  for (auto [in, out] : shapes) {
    p.push_back(MakeLinearProblem(dev, rng, rows, in, out, &want));
    many.push_back({p.back().x, in, p.back().w, out, p.back().y});
  }
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::LinearBf16Many(many.data(), static_cast<int64_t>(many.size()), rows));
  CheckLinearProblems(dev, p, want, &r);
  return r;
}

struct RopeShape {
  int64_t rows, heads, row_stride, head_stride, offset, dim;
  double theta;
  int64_t max_pos;
};

// In place: the rotated slices are compared by norm, every other element must keep its bits.
Result RopeCase(std::mt19937& rng, const RopeShape& s) {
  Result r;
  r.tolerance = 1e-2;
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  RandomBf16(s.rows * s.row_stride, 1.0f, 0.0f, rng, &xb, &xf);
  std::uniform_int_distribution<int64_t> pos_dist(0, s.max_pos);
  std::vector<int64_t> pos(s.rows);
  for (auto& p : pos) p = pos_dist(rng);
  pos[0] = s.max_pos;
  const std::vector<float> inv_freq = cpu::RopeInvFreq(s.dim, s.theta);
  std::vector<char> in_slice(xb.size(), 0);
  std::vector<float> want_slices;
  for (int64_t t = 0; t < s.rows; ++t) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t at = t * s.row_stride + h * s.head_stride + s.offset;
      std::vector<float> v(xf.begin() + at, xf.begin() + at + s.dim);
      cpu::RopeInterleaved(v.data(), s.dim, pos[t], inv_freq.data());
      want_slices.insert(want_slices.end(), v.begin(), v.end());
      std::fill(in_slice.begin() + at, in_slice.begin() + at + s.dim, 1);
    }
  }
  Device dev(&r.error);
  uint16_t* x = dev.Upload(xb);
  int64_t* p = dev.Upload(pos);
  float* f = dev.Upload(inv_freq);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::RopeInterleavedBf16(x, s.rows, s.heads, s.row_stride, s.head_stride, s.offset, s.dim, p, f));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint16_t> got_bits = dev.Download(x, xb.size());
  if (!r.error.empty()) return r;
  std::vector<float> got_slices;
  for (int64_t t = 0; t < s.rows; ++t) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t at = t * s.row_stride + h * s.head_stride + s.offset;
      for (int64_t i = 0; i < s.dim; ++i) got_slices.push_back(Bf16ToF32(got_bits[at + i]));
    }
  }
  for (size_t i = 0; i < xb.size(); ++i) r.mismatched += (!in_slice[i] && got_bits[i] != xb[i]) ? 1 : 0;
  r.rel_err = RelErr(got_slices, want_slices, &r.unwritten);
  return r;
}

// gate/up wide enough (N(0, 6^2)) that a limit of 7 or 10 clamps a fair share of them.
Result SwiGluCase(std::mt19937& rng, int64_t rows, int64_t cols, bool fused, float limit, bool in_place) {
  Result r;
  r.tolerance = 1e-2;
  const int64_t stride = fused ? 2 * cols : cols;
  std::vector<uint16_t> gb, ub;
  std::vector<float> gf, uf;
  RandomBf16(rows * stride, 6.0f, 0.0f, rng, &gb, &gf);  // fused: [gate | up] per row
  RandomBf16(fused ? 0 : rows * cols, 6.0f, 0.0f, rng, &ub, &uf);
  std::vector<float> want(rows * cols);
  for (int64_t t = 0; t < rows; ++t) {
    const float* g = gf.data() + t * stride;
    const float* u = fused ? g + cols : uf.data() + t * cols;
    cpu::SwiGlu(g, u, cols, limit, want.data() + t * cols);
  }
  Device dev(&r.error);
  uint16_t* g = dev.Upload(gb);
  uint16_t* u = fused ? g + cols : dev.Upload(ub);
  uint16_t* out = in_place ? g : dev.Poisoned<uint16_t>(rows * cols);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::SwiGluBf16(g, u, rows, cols, stride, limit, out));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got = ToF32(dev.Download(out, rows * cols));
  if (!r.error.empty()) return r;
  r.rel_err = RelErr(got, want, &r.unwritten);
  return r;
}

// The token-by-token rule of model/blocks/kda.cc (RecurrentHead) for one token of one head.
void KdaStepRef(float* s, const float* q, const float* k, const float* v, const float* g, float beta, int64_t d,
                float* o) {
  std::vector<float> u(d);
  for (int64_t i = 0; i < d; ++i) {
    const float decay = std::exp(g[i]);
    for (int64_t j = 0; j < d; ++j) s[i * d + j] *= decay;
  }
  for (int64_t j = 0; j < d; ++j) {
    float acc = 0.0f;
    for (int64_t i = 0; i < d; ++i) acc += s[i * d + j] * k[i];
    u[j] = beta * (v[j] - acc);
  }
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) s[i * d + j] += k[i] * u[j];
  }
  for (int64_t j = 0; j < d; ++j) {
    float acc = 0.0f;
    for (int64_t i = 0; i < d; ++i) acc += s[i * d + j] * q[i];
    o[j] = acc;
  }
}

// `steps` consecutive tokens on rows with scattered state slots; the last row, when bad_slot,
// names a slot outside the arena and must get NaN outputs and leave every state alone. Slots no
// row names must keep their bits.
Result KdaCase(std::mt19937& rng, int64_t rows, int64_t heads, int64_t d, int64_t n_slots, int steps,
               bool bad_slot) {
  Result r;
  r.tolerance = 1e-5;  // the CPU's order of float32 operations; only expf differs
  const int64_t hd = heads * d, slot_size = heads * d * d;
  std::vector<int32_t> perm(n_slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> slots(perm.begin(), perm.begin() + rows);
  if (bad_slot) slots[rows - 1] = static_cast<int32_t>(n_slots);
  std::vector<float> state = RandomF32(n_slots * slot_size, 0.1f, 0.0f, rng);
  const std::vector<float> state0 = state;
  Device dev(&r.error);
  float* st = dev.Upload(state);
  int32_t* sl = dev.Upload(slots);
  if (!r.error.empty()) return r;
  std::vector<float> got_o, want_o;
  auto sigmoid = [](float x) { return 1.0f / (1.0f + std::exp(-x)); };
  for (int step = 0; step < steps; ++step) {
    std::vector<float> q = RandomF32(rows * hd, 1.0f, 0.0f, rng), k = RandomF32(rows * hd, 1.0f, 0.0f, rng);
    std::vector<float> v = RandomF32(rows * hd, 1.0f, 0.0f, rng), g = RandomF32(rows * hd, 2.0f, 0.0f, rng);
    std::vector<float> beta = RandomF32(rows * heads, 1.0f, 0.0f, rng);
    for (int64_t t = 0; t < rows * heads; ++t) {  // the model's normalisation and ranges
      float nq = 0, nk = 0;
      for (int64_t i = 0; i < d; ++i) nq += q[t * d + i] * q[t * d + i], nk += k[t * d + i] * k[t * d + i];
      for (int64_t i = 0; i < d; ++i) {
        q[t * d + i] *= 1.0f / std::sqrt(nq + 1e-6f) / std::sqrt(static_cast<float>(d));
        k[t * d + i] *= 1.0f / std::sqrt(nk + 1e-6f);
        g[t * d + i] = -5.0f * sigmoid(g[t * d + i]);
      }
      beta[t] = sigmoid(beta[t]);
    }
    std::vector<float> want(rows * hd);
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t at = t * hd + h * d;
        if (slots[t] >= n_slots) {
          std::fill(want.begin() + at, want.begin() + at + d, NAN);
          continue;
        }
        KdaStepRef(state.data() + slots[t] * slot_size + h * d * d, q.data() + at, k.data() + at, v.data() + at,
                   g.data() + at, beta[t * heads + h], d, want.data() + at);
      }
    }
    float* dq = dev.Upload(q);
    float* dk = dev.Upload(k);
    float* dv = dev.Upload(v);
    float* dg = dev.Upload(g);
    float* db = dev.Upload(beta);
    float* o = dev.Poisoned<float>(rows * hd);
    if (!r.error.empty()) return r;
    HARNESS_CHECK_OK(cu::KdaRecurrentStep(st, sl, n_slots, rows, heads, d, dq, dk, dv, dg, db, o));
    HARNESS_CHECK_OK(cu::Synchronize());
    const std::vector<float> got = dev.Download(o, rows * hd);
    got_o.insert(got_o.end(), got.begin(), got.end());
    want_o.insert(want_o.end(), want.begin(), want.end());
  }
  const std::vector<float> got_state = dev.Download(st, state.size());
  if (!r.error.empty()) return r;
  std::vector<char> named(n_slots, 0);
  for (int32_t s : slots) {
    if (s < n_slots) named[s] = 1;
  }
  for (int64_t s = 0; s < n_slots; ++s) {
    if (named[s]) continue;
    r.mismatched += std::memcmp(&got_state[s * slot_size], &state0[s * slot_size], slot_size * sizeof(float)) != 0;
  }
  // Outputs and final states together.
  got_o.insert(got_o.end(), got_state.begin(), got_state.end());
  want_o.insert(want_o.end(), state.begin(), state.end());
  r.rel_err = RelErr(got_o, want_o, &r.unwritten);
  return r;
}

// The CPU twin is model::MhcPre itself, on an input built so that its m is exactly the m given
// to the kernel: D = 1, h = ones (so r = ones with rms_norm_eps 0) and fn[i] = [m_i, 0, ...].
Result MhcCase(std::mt19937& rng, int64_t rows, int64_t S, int64_t iters) {
  Result r;
  r.tolerance = 1e-5;
  const int64_t M = (2 + S) * S;
  const std::vector<float> m = RandomF32(rows * M, 1.5f, 0.0f, rng);
  const std::vector<float> base = RandomF32(M, 0.5f, 0.0f, rng);
  const std::vector<float> scale = {0.8f, 1.1f, 1.7f};
  model::ModelConfig c;
  c.hidden_size = 1;
  c.hc_mult = S;
  c.hc_sinkhorn_iters = iters;
  c.hc_eps = 1e-6f;
  c.rms_norm_eps = 0.0f;
  model::MhcWeights w;
  w.fn.rows = M;
  w.fn.cols = S;
  w.base.data = base;
  w.base.rows = M;
  w.base.cols = 1;
  w.scale.data = scale;
  w.scale.rows = 3;
  w.scale.cols = 1;
  const std::vector<float> h(S, 1.0f);
  std::vector<float> want_pre, want_post, want_comb, u(1);
  for (int64_t t = 0; t < rows; ++t) {
    w.fn.data.assign(M * S, 0.0f);
    for (int64_t i = 0; i < M; ++i) w.fn.data[i * S] = m[t * M + i];
    model::MhcMix mix;
    model::MhcPre(w, c, h.data(), 1, &mix, u.data());
    want_pre.insert(want_pre.end(), mix.pre.begin(), mix.pre.end());
    want_post.insert(want_post.end(), mix.post.begin(), mix.post.end());
    want_comb.insert(want_comb.end(), mix.comb.begin(), mix.comb.end());
  }
  Device dev(&r.error);
  float* dm = dev.Upload(m);
  float* dscale = dev.Upload(scale);
  float* dbase = dev.Upload(base);
  float* pre = dev.Poisoned<float>(rows * S);
  float* post = dev.Poisoned<float>(rows * S);
  float* comb = dev.Poisoned<float>(rows * S * S);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::MhcSinkhorn(dm, rows, S, dscale, dbase, c.hc_eps, iters, pre, post, comb));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got = dev.Download(pre, rows * S);
  const std::vector<float> got_post = dev.Download(post, rows * S), got_comb = dev.Download(comb, rows * S * S);
  if (!r.error.empty()) return r;
  got.insert(got.end(), got_post.begin(), got_post.end());
  got.insert(got.end(), got_comb.begin(), got_comb.end());
  std::vector<float> want = want_pre;
  want.insert(want.end(), want_post.begin(), want_post.end());
  want.insert(want.end(), want_comb.begin(), want_comb.end());
  r.rel_err = RelErr(got, want, &r.unwritten);
  return r;
}

}  // namespace

void AddDenseCases(std::vector<Case>* cases) {
  // Linear: toy, GLM-5.3-Flash q_a_proj (4096 -> 1536), GLM-5.2 kv_a_proj_with_mqa (6144 -> 576)
  // and q_b_proj (2048 -> 64 x 256), ragged sizes, a wide batch.
  for (auto [rows, in, out] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 64, 24}, {5, 4096, 1536}, {33, 6144, 576}, {16, 2048, 16384}, {7, 100, 33}, {130, 512, 4096}}) {
    cases->push_back({absl::StrCat("linear_bf16 rows=", rows, " in=", in, " out=", out),
                      [=](std::mt19937& rng) { return LinearCase(rng, rows, in, out, false); }});
  }
  // Decode-sized batches (GemvBf16): GLM-5.3-Flash KDA q_proj at batch 4, GLM-5.2 o_proj at 3,
  // GLM-5.3-Flash's KDA o_proj at 2 (the two-vector kernel),
  // the indexer's key projection (few outputs: every warp of a block on one row set).
  for (auto [rows, in, out] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {4, 4096, 4096}, {3, 16384, 6144}, {2, 8192, 4096}, {1, 6144, 130}}) {
    cases->push_back({absl::StrCat("linear_bf16 gemv rows=", rows, " in=", in, " out=", out, " (rows alone too)"),
                      [=](std::mt19937& rng) { return LinearCase(rng, rows, in, out, true); }});
  }
  // Several products in one launch: GLM-5.3-Flash's KDA projections of one input (q, k, v, the two
  // low-rank halves) at batch 1 and 3; GLM-5.2's products of the attention input plus a ragged
  // one; 6 rows (above kGemvMaxRows: one cuBLAS call each).
  const std::vector<std::pair<int64_t, int64_t>> kda = {{4096, 4096}, {4096, 4096}, {4096, 4096}, {4096, 128},
                                                        {4096, 128}};
  const std::vector<std::pair<int64_t, int64_t>> dsa = {{6144, 2048}, {6144, 512}, {6144, 64}, {6144, 128}, {24, 7}};
  using Shapes = std::vector<std::pair<int64_t, int64_t>>;
  for (auto [rows, shapes, name] : std::vector<std::tuple<int64_t, Shapes, const char*>>{
           {1, kda, "kda"}, {3, kda, "kda"}, {1, dsa, "dsa+ragged"}, {6, dsa, "dsa+ragged"}}) {
    cases->push_back({absl::StrCat("linear_bf16_many rows=", rows, " ", name, " (each alone too)"),
                      [=](std::mt19937& rng) { return LinearManyCase(rng, rows, shapes); }});
  }
  // Grouped Linear (MoE experts side by side): more groups than streams, empty groups, one group.
  cases->push_back({"grouped_linear_bf16 groups=13 (3 empty) in=2048 out=1024", [](std::mt19937& rng) {
                      return GroupedLinearCase(rng, {3, 0, 17, 1, 1, 64, 0, 5, 2, 9, 0, 1, 30}, 2048, 1024);
                    }});
  cases->push_back({"grouped_linear_bf16 groups=3 (2 empty) in=512 out=4096", [](std::mt19937& rng) {
                      return GroupedLinearCase(rng, {0, 7, 0}, 512, 4096);
                    }});
  // RoPE: GLM-5.2 q_pe (64 heads of 192 nope + 64 rope, theta 8e6), its shared k_pe at the end of
  // a 576-wide cache row, the indexer's first 64 of 128 dims (32 heads), and a padded toy.
  for (const RopeShape& s : std::vector<RopeShape>{{5, 64, 64 * 256, 256, 192, 64, 8e6, 200000},
                                                   {9, 1, 576, 576, 512, 64, 8e6, 131071},
                                                   {3, 32, 32 * 128, 128, 0, 64, 8e6, 5000},
                                                   {2, 3, 40, 10, 2, 6, 10000.0, 77}}) {
    cases->push_back({absl::StrCat("rope_interleaved_bf16 rows=", s.rows, " heads=", s.heads, " stride=",
                                   s.head_stride, " offset=", s.offset, " dim=", s.dim),
                      [=](std::mt19937& rng) { return RopeCase(rng, s); }});
  }
  // SwiGLU: a routed expert (moe_inter 2048, fused gate_up), a dense FFN (12288) with
  // glm5_next's limit 10, ragged ones with limit 7 computed in place (333 columns: the one-value
  // path; multiples of 8 take the 16-byte one).
  cases->push_back({"swiglu_bf16 rows=1 cols=2048 fused", [](std::mt19937& rng) {
                      return SwiGluCase(rng, 1, 2048, true, 0.0f, false);
                    }});
  cases->push_back({"swiglu_bf16 rows=4 cols=12288 limit=10", [](std::mt19937& rng) {
                      return SwiGluCase(rng, 4, 12288, false, 10.0f, false);
                    }});
  cases->push_back({"swiglu_bf16 rows=33 cols=1000 fused limit=10", [](std::mt19937& rng) {
                      return SwiGluCase(rng, 33, 1000, true, 10.0f, false);
                    }});
  cases->push_back({"swiglu_bf16 rows=7 cols=333 limit=7 in-place", [](std::mt19937& rng) {
                      return SwiGluCase(rng, 7, 333, false, 7.0f, true);
                    }});
  cases->push_back({"swiglu_bf16 rows=5 cols=1024 limit=7 in-place", [](std::mt19937& rng) {
                      return SwiGluCase(rng, 5, 1024, false, 7.0f, true);
                    }});
  // KDA: GLM-5.3-Flash (64 heads x 128), a batch over scattered slots with one bad slot,
  // and a d that is not a power of two.
  cases->push_back({"kda_recurrent_step rows=1 heads=64 d=128 steps=3", [](std::mt19937& rng) {
                      return KdaCase(rng, 1, 64, 128, 1, 3, false);
                    }});
  cases->push_back({"kda_recurrent_step rows=5 heads=8 d=128 slots=9 bad-slot", [](std::mt19937& rng) {
                      return KdaCase(rng, 5, 8, 128, 9, 4, true);
                    }});
  cases->push_back({"kda_recurrent_step rows=3 heads=3 d=100 slots=3", [](std::mt19937& rng) {
                      return KdaCase(rng, 3, 3, 100, 3, 2, false);
                    }});
  // mHC: 4 streams and 20 iterations as in GLM-5.3-Flash, one iteration, 2 streams.
  for (auto [rows, S, iters] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 4, 20}, {300, 4, 20}, {17, 4, 1}, {9, 2, 20}}) {
    cases->push_back({absl::StrCat("mhc_sinkhorn rows=", rows, " streams=", S, " iters=", iters),
                      [=](std::mt19937& rng) { return MhcCase(rng, rows, S, iters); }});
  }
}

}  // namespace ferry::harness
