// ferry-kernel-check cases for the selection ops: TopK (against cpu::TopKIndices, exactly),
// MoeRoute (cpu::RouteRow: ids exactly, weights by norm), SampleRows (cpu::SampleRow: ids exactly,
// log-probabilities by relative error).
// Rows are drawn in styles meant to break selections: exact ties (zeros after a ReLU, coarse
// quantisation, all equal), NaN, +-inf, and -0 beside +0.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/sampling.h"
#include "tests/kernels/harness.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

constexpr int kStyles = 8;

// One row of scores in style `style`:
//   0 continuous N(0, 1); 1 ReLU(x - 2.5): mostly exact zeros, so the k-th falls among ties;
//   2 coarse quantisation (multiples of 0.5); 3 all equal; 4 NaN, +-inf, -0 and +0 mixed in;
//   5 all NaN; 6 quantised with some -0.0 and 0.0 at the top; 7 N(5, 1) but -1 at the places TopK
//   samples a row longer than 4096 (s * n / 4096): its sampled threshold takes the whole row, so
//   the row leaves the sampled path for the general one.
std::vector<float> StyledRow(std::mt19937& rng, int64_t n, int style) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 19);
  std::vector<float> v(n);
  for (float& x : v) {
    const float z = nd(rng);
    switch (style) {
      case 0: x = z; break;
      case 1: x = std::max(0.0f, z - 2.5f); break;
      case 2: x = std::round(z * 2.0f) / 2.0f; break;
      case 3: x = 1.0f; break;
      case 4: {
        const int c = pick(rng);
        x = c == 0 ? NAN : c == 1 ? INFINITY : c == 2 ? -INFINITY : c == 3 ? -0.0f : c == 4 ? 0.0f : z;
        break;
      }
      case 5: x = NAN; break;
      case 6: {
        const float q = std::round(z * 2.0f) / 2.0f;
        x = q > 0.0f ? -q : (pick(rng) < 10 ? -0.0f : 0.0f);  // max is a tie of -0 and +0
        break;
      }
      default: x = z + 5.0f; break;
    }
  }
  if (style == 7 && n > 4096) {
    for (int64_t s = 0; s < 4096; ++s) v[s * n / 4096] = -1.0f;
  }
  return v;
}

Result TopKCase(std::mt19937& rng, int64_t rows, int64_t cols, int64_t k, const std::vector<int32_t>& lengths) {
  Result r;
  if (!lengths.empty() && static_cast<int64_t>(lengths.size()) != rows) {
    r.error = absl::StrCat("the case lists ", lengths.size(), " lengths for ", rows, " rows");
    return r;
  }
  std::vector<float> scores;
  std::vector<int32_t> want_ids, want_counts;
  for (int64_t t = 0; t < rows; ++t) {
    const std::vector<float> row = StyledRow(rng, cols, static_cast<int>(t % kStyles));
    scores.insert(scores.end(), row.begin(), row.end());
    int64_t n = lengths.empty() ? cols : lengths[t];
    if (n < 0 || n > cols) n = 0;  // the contract: an invalid length selects nothing
    std::vector<int32_t> ids = cpu::TopKIndices(row.data(), n, k);
    want_counts.push_back(static_cast<int32_t>(ids.size()));
    ids.resize(k, -1);
    want_ids.insert(want_ids.end(), ids.begin(), ids.end());
  }
  Device dev(&r.error);
  float* s = dev.Upload(scores);
  int32_t* len = lengths.empty() ? nullptr : dev.Upload(lengths);
  int32_t* ids = dev.Poisoned<int32_t>(rows * k);
  int32_t* counts = dev.Poisoned<int32_t>(rows);
  if (!r.error.empty()) return r;
  // The poison of an id is -1, the padding value too: pre-fill with another pattern so that an
  // unwritten padding slot shows.
  HARNESS_CHECK_OK(cu::DeviceFill(ids, 0x7f, rows * k * sizeof(int32_t)));
  HARNESS_CHECK_OK(cu::TopK(s, rows, cols, len, k, ids, counts));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<int32_t> got_ids = dev.Download(ids, rows * k), got_counts = dev.Download(counts, rows);
  if (!r.error.empty()) return r;
  for (size_t i = 0; i < got_ids.size(); ++i) r.mismatched += got_ids[i] != want_ids[i];
  for (size_t i = 0; i < got_counts.size(); ++i) r.mismatched += got_counts[i] != want_counts[i];
  return r;
}

// The gap, relative to the values, between the n-th and (n+1)-th largest of v (NaN last); 1 when
// there is no (n+1)-th or they are exactly equal (an exact tie is the same on both sides).
float BoundaryGap(std::vector<float> v, int64_t n) {
  if (n <= 0 || n >= static_cast<int64_t>(v.size())) return 1.0f;
  std::sort(v.begin(), v.end(), [](float a, float b) { return std::isnan(b) ? !std::isnan(a) : a > b; });
  const float a = v[n - 1], b = v[n];
  if (std::isnan(a) || std::isnan(b) || a == b || std::isinf(a) || std::isinf(b)) return 1.0f;
  return std::fabs(a - b) / std::max(std::fabs(a), std::fabs(b));
}

// Sigmoids from the device's expf and the host's exp may differ by an ulp or two (about 2.4e-7
// relative); a boundary gap under this many relative units could flip, so such rows are skipped.
constexpr float kNearTie = 2e-6f;

struct RouteShape {
  int64_t rows;
  cpu::RoutingParams p;
  bool bias, quantized, nans;
};

Result MoeRouteCase(std::mt19937& rng, const RouteShape& s) {
  Result r;
  r.tolerance = 1e-5;  // weights: expf against the host's exp, a few ulp
  const int64_t E = s.p.n_experts, K = s.p.top_k, R = s.rows;
  std::vector<float> logits = RandomF32(R * E, 2.0f, 0.0f, rng);
  std::vector<float> bias = RandomF32(E, 0.05f, 0.0f, rng);
  if (s.quantized) {  // many exactly equal logits and biases: exact ties, identical on both sides
    for (float& x : logits) x = std::round(x * 8.0f) / 8.0f;
    for (float& x : bias) x = std::round(x * 64.0f) / 64.0f;
  }
  if (s.nans) {
    std::uniform_int_distribution<int64_t> at(0, R * E - 1);
    for (int i = 0; i < R * 3; ++i) logits[at(rng)] = NAN;
  }
  std::vector<int32_t> want_e(R * K);
  std::vector<float> want_w(R * K);
  std::vector<char> near_tie(R, 0);
  for (int64_t t = 0; t < R; ++t) {
    const float* x = logits.data() + t * E;
    cpu::RouteRow(x, s.bias ? bias.data() : nullptr, s.p, want_e.data() + t * K, want_w.data() + t * K);
    // Near ties at a selection boundary may flip on an ulp of expf: skip such rows.
    std::vector<float> choice(E);
    for (int64_t e = 0; e < E; ++e) choice[e] = 1.0f / (1.0f + std::exp(-x[e])) + (s.bias ? bias[e] : 0.0f);
    if (s.p.n_group > 1 && s.p.topk_group < s.p.n_group) {
      const int64_t per = E / s.p.n_group;
      std::vector<float> gs(s.p.n_group);
      for (int64_t g = 0; g < s.p.n_group; ++g) {
        std::vector<float> grp(choice.begin() + g * per, choice.begin() + (g + 1) * per);
        std::sort(grp.begin(), grp.end(), std::greater<float>());
        gs[g] = grp[0] + grp[1];
      }
      near_tie[t] |= BoundaryGap(gs, s.p.topk_group) < kNearTie;
      std::vector<int32_t> kept = cpu::TopKIndices(gs.data(), s.p.n_group, s.p.topk_group);
      std::vector<char> keep(s.p.n_group, 0);
      for (int32_t g : kept) keep[g] = 1;
      for (int64_t e = 0; e < E; ++e) {
        if (!keep[e / per]) choice[e] = -INFINITY;
      }
    }
    near_tie[t] |= BoundaryGap(choice, K) < kNearTie;
  }
  Device dev(&r.error);
  float* dl = dev.Upload(logits);
  float* db = s.bias ? dev.Upload(bias) : nullptr;
  int32_t* ex = dev.Poisoned<int32_t>(R * K);
  float* wt = dev.Poisoned<float>(R * K);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::MoeRoute(dl, db, R, s.p, ex, wt));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<int32_t> got_e = dev.Download(ex, R * K);
  const std::vector<float> got_w = dev.Download(wt, R * K);
  if (!r.error.empty()) return r;
  std::vector<float> g2, w2;
  long skipped = 0;
  for (int64_t t = 0; t < R; ++t) {
    if (near_tie[t]) {
      ++skipped;
      continue;
    }
    for (int64_t i = t * K; i < (t + 1) * K; ++i) {
      r.mismatched += got_e[i] != want_e[i];
      g2.push_back(got_w[i]);
      w2.push_back(want_w[i]);
    }
  }
  r.rel_err = RelErr(g2, w2, &r.unwritten);
  if (skipped > 0) r.note = absl::StrCat(skipped, " near-tie rows skipped");
  return r;
}

// SampleRows against cpu::SampleRow: greedy rows, or each row sampled with its own temperature,
// top-k, top-p, draw and log-probability count (rows of every style, ties and non-finite values
// included). Ids compared exactly; log-probabilities by relative error.
Result SampleRowsCase(std::mt19937& rng, int64_t rows, int64_t vocab, bool sampled) {
  Result r;
  r.tolerance = 1e-5;
  std::vector<float> logits;
  std::vector<kernels::RowSampler> samplers;
  std::vector<kernels::SampledToken> want;
  std::uniform_int_distribution<int64_t> at(0, vocab - 1);
  std::uniform_real_distribution<double> draw(0.0, 1.0);
  const std::vector<float> temperatures = {0.3f, 0.7f, 1.0f, 1.5f};
  const std::vector<int32_t> top_ks = {0, 1, 40, static_cast<int32_t>(std::max<int64_t>(1, vocab / 2))};
  const std::vector<float> top_ps = {1.0f, 0.95f, 0.5f, 0.01f};
  const std::vector<int32_t> n_tops = {-1, 0, 5, kernels::kMaxTopLogprobs};
  for (int64_t t = 0; t < rows; ++t) {
    const int style = static_cast<int>(t % kStyles);
    std::vector<float> row = StyledRow(rng, vocab, style);
    if (style == 0) {  // several copies of the maximum: the lowest index must win
      const float mx = *std::max_element(row.begin(), row.end());
      for (int i = 0; i < 3; ++i) row[at(rng)] = mx;
    }
    if (style == 4 && t % 16 < 8) row[0] = NAN;  // a NaN makes the row unfit; else only -inf and ties
    if (style == 4 && t % 16 >= 8) {
      std::replace_if(row.begin(), row.end(), [](float v) { return !(v < INFINITY); }, -INFINITY);
    }
    kernels::RowSampler s;
    if (sampled) {
      s.temperature = temperatures[static_cast<size_t>(t) % temperatures.size()];
      s.top_k = top_ks[static_cast<size_t>(t / 2) % top_ks.size()];
      s.top_p = top_ps[static_cast<size_t>(t / 3) % top_ps.size()];
      s.top_logprobs = n_tops[static_cast<size_t>(t / 5) % n_tops.size()];
      s.uniform = draw(rng);
    }
    logits.insert(logits.end(), row.begin(), row.end());
    samplers.push_back(s);
    want.push_back(cpu::SampleRow(row.data(), vocab, s));
  }
  Device dev(&r.error);
  float* l = dev.Upload(logits);
  const kernels::RowSampler* d_samplers = dev.Upload(samplers);
  kernels::SampledToken* out = dev.Poisoned<kernels::SampledToken>(static_cast<size_t>(rows));
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::SampleRows(l, rows, vocab, d_samplers, out));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<kernels::SampledToken> got = dev.Download(out, static_cast<size_t>(rows));
  if (!r.error.empty()) return r;
  std::vector<float> got_lp, want_lp;
  for (int64_t t = 0; t < rows; ++t) {
    const kernels::SampledToken& g = got[static_cast<size_t>(t)];
    const kernels::SampledToken& w = want[static_cast<size_t>(t)];
    r.mismatched += g.token != w.token;
    if (w.token < 0 || samplers[static_cast<size_t>(t)].top_logprobs < 0) continue;
    r.mismatched += g.n_top != w.n_top;
    // A token whose logit is -inf has log-probability -inf on both sides: compared exactly.
    auto add = [&](float got, float want) {
      if (std::isfinite(want)) {
        got_lp.push_back(got);
        want_lp.push_back(want);
      } else {
        r.mismatched += got != want;
      }
    };
    add(g.logprob, w.logprob);
    for (int32_t j = 0; j < std::min(g.n_top, w.n_top); ++j) {
      r.mismatched += g.top_ids[j] != w.top_ids[j];
      add(g.top_logprobs[j], w.top_logprobs[j]);
    }
  }
  r.rel_err = got_lp.empty() ? 0.0 : RelErr(got_lp, want_lp, &r.unwritten);
  return r;
}

}  // namespace

void AddSelectCases(std::vector<Case>* cases) {
  // Top-k: the indexer's k = 2048 over a 128K-token row in every style (few rows of many scores
  // take clusters of 8 blocks a row; style 7 leaves the sampled path); rows past 128K; batches that
  // take clusters of 4 and of 2, with rows split between the blocks and rows block 0 does alone;
  // ragged lengths around k (0, 1, k - 1, k, k + 1, all, invalid); the decode shapes of short
  // contexts; k = 1; k above the row; routing-sized rows.
  struct TopKShape {
    int64_t rows, cols, k;
    std::vector<int32_t> lengths;
  };
  for (const TopKShape& s : std::vector<TopKShape>{
           {kStyles, 131072, 2048, {}},
           {3, 300000, 2048, {300000, 131073, 262100}},
           {5, 40000, 2048, {40000, 32768, 32767, 20000, 0}},
           // Clusters of 4 blocks a row (too short a row for 8), and rows block 0 does alone.
           {kStyles, 100000, 2048, {100000, 99999, 65536, 65535, 30000, 4096, 0, 100000}},
           {kStyles + 1, 5000, 2048, {0, 1, 2047, 2048, 2049, 5000, 5001, 5000, 3000}},
           // The decode shapes of a short context: GLM-5.2 at 4K (the whole row in the buffer),
           // GLM-5.3-Flash's pooled keys at 4K and 32K (sampled).
           {kStyles, 4096, 2048, {4096, 4095, 4000, 2500, 2049, 2048, 100, 4096}},
           {kStyles, 1024, 512, {}},
           {kStyles, 8192, 512, {}},
           {kStyles, 100, 1, {}},
           {2, 64, 100, {}},
           {100, 288, 8, {}}}) {
    cases->push_back({absl::StrCat("topk rows=", s.rows, " cols=", s.cols, " k=", s.k,
                                   s.lengths.empty() ? "" : " lengths=" + absl::StrJoin(s.lengths, ",")),
                      [=](std::mt19937& rng) { return TopKCase(rng, s.rows, s.cols, s.k, s.lengths); }});
  }
  auto params = [](int64_t e, int64_t k, int64_t groups, int64_t keep, bool norm, float scaling) {
    cpu::RoutingParams p;
    p.n_experts = e;
    p.top_k = k;
    p.n_group = groups;
    p.topk_group = keep;
    p.norm_topk_prob = norm;
    p.routed_scaling_factor = scaling;
    return p;
  };
  const std::vector<std::pair<std::string, RouteShape>> routes = {
      {"glm-5.2 experts=256 top=8", {64, params(256, 8, 1, 1, true, 2.5f), true, false, false}},
      {"glm-5.3-flash experts=288 top=8", {300, params(288, 8, 1, 1, true, 2.5f), true, false, false}},
      {"experts=256 top=8 groups=8 keep=4", {100, params(256, 8, 8, 4, true, 2.5f), true, false, false}},
      {"experts=288 top=8 groups=4 keep=2 quantized", {200, params(288, 8, 4, 2, true, 1.0f), true, true, false}},
      {"experts=16 top=6 groups=4 keep=1 no-norm", {50, params(16, 6, 4, 1, false, 1.0f), false, true, false}},
      {"experts=64 top=4 nan-logits", {40, params(64, 4, 1, 1, true, 2.5f), true, false, true}},
  };
  for (const auto& [name, s] : routes) {
    cases->push_back({"moe_route " + name + " rows=" + std::to_string(s.rows),
                      [s = s](std::mt19937& rng) { return MoeRouteCase(rng, s); }});
  }
  for (auto [rows, vocab] : std::vector<std::pair<int64_t, int64_t>>{{2 * kStyles, 154880}, {3, 1}, {kStyles, 1000}}) {
    cases->push_back({absl::StrCat("sample_rows greedy rows=", rows, " vocab=", vocab),
                      [=](std::mt19937& rng) { return SampleRowsCase(rng, rows, vocab, false); }});
  }
  for (auto [rows, vocab] : std::vector<std::pair<int64_t, int64_t>>{{64, 154880}, {3, 1}, {256, 1000}, {16, 7}}) {
    cases->push_back({absl::StrCat("sample_rows sampled rows=", rows, " vocab=", vocab),
                      [=](std::mt19937& rng) { return SampleRowsCase(rng, rows, vocab, true); }});
  }
}

}  // namespace ferry::harness
