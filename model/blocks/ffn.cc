#include "model/blocks/ffn.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/nvfp4.h"
#include "common/status.h"
#include "kernels/cpu/nvfp4_w4a4.h"
#include "model/golden/decision_log.h"

namespace ferry::model {

namespace cpu = ferry::kernels::cpu;

namespace {

// Rows [r0, r1) and columns [c0, c1) of a stored NVFP4 weight, kept as codes and group scales.
// REQUIRES: c0 and c1 multiples of kNvfp4Group (LoadMlp checks).
Nvfp4Projection SliceNvfp4(const Checkpoint::Nvfp4Tensor& t, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  Nvfp4Projection p;
  p.out = r1 - r0;
  p.in = c1 - c0;
  p.global_scale = t.global_scale;
  p.input_scale = t.input_scale;
  p.codes.resize(static_cast<size_t>(p.out * p.in / 2));
  p.scales.resize(static_cast<size_t>(p.out * p.in / kNvfp4Group));
  for (int64_t r = 0; r < p.out; ++r) {
    std::copy_n(t.packed + (r0 + r) * (t.cols / 2) + c0 / 2, p.in / 2, p.codes.data() + r * (p.in / 2));
    std::copy_n(t.scales + (r0 + r) * (t.cols / kNvfp4Group) + c0 / kNvfp4Group, p.in / kNvfp4Group,
                p.scales.data() + r * (p.in / kNvfp4Group));
  }
  return p;
}

}  // namespace

absl::StatusOr<W4a4Scales> W4a4ScalesOf(const std::string& prefix, const Checkpoint::Nvfp4Tensor& gate,
                                        const Checkpoint::Nvfp4Tensor& up, const Checkpoint::Nvfp4Tensor& down) {
  for (const auto& [name, t] : {std::pair{"gate_proj", &gate}, {"up_proj", &up}, {"down_proj", &down}}) {
    if (t->input_scale == 0.0f) {
      return absl::FailedPreconditionError(absl::StrCat(
          prefix, name, " is NVFP4 without an input_scale (a weight-only checkpoint): W4A4 numerics quantize "
          "activations under it; run this checkpoint with w4a16"));
    }
  }
  return W4a4Scales{std::max(gate.input_scale, up.input_scale), down.input_scale};
}

namespace {

// The MLP's projections kept in NVFP4 for W4A4 numerics: *kept = false (nothing loaded) unless
// all three are stored NVFP4.
absl::Status LoadMlpW4A4(const WeightLoader& w, int64_t hidden, int64_t inter, const TensorParallel& tp,
                         MlpWeights* m, bool* kept) {
  *kept = false;
  FERRY_ASSIGN_OR_RETURN(const Checkpoint::Nvfp4Tensor gate, w.Nvfp4Matrix("gate_proj.weight", inter, hidden));
  FERRY_ASSIGN_OR_RETURN(const Checkpoint::Nvfp4Tensor up, w.Nvfp4Matrix("up_proj.weight", inter, hidden));
  FERRY_ASSIGN_OR_RETURN(const Checkpoint::Nvfp4Tensor down, w.Nvfp4Matrix("down_proj.weight", hidden, inter));
  if (gate.packed == nullptr || up.packed == nullptr || down.packed == nullptr) return absl::OkStatus();
  FERRY_ASSIGN_OR_RETURN(const W4a4Scales scales, W4a4ScalesOf(w.prefix(), gate, up, down));
  const int64_t b = tp.Begin(inter), e = tp.End(inter);
  if (b % kNvfp4Group != 0 || e % kNvfp4Group != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        w.prefix(), "down_proj: this rank's columns [", b, ", ", e, ") of ", inter, " at tensor-parallel width ",
        tp.world, " do not fall on NVFP4 groups of ", kNvfp4Group, " (W4A4 numerics slice them as stored)"));
  }
  m->gate4 = SliceNvfp4(gate, b, e, 0, hidden);
  m->up4 = SliceNvfp4(up, b, e, 0, hidden);
  m->down4 = SliceNvfp4(down, 0, hidden, b, e);
  // gate and up read one input, quantized once.
  m->gate4.input_scale = m->up4.input_scale = scales.gate_up;
  m->down4.input_scale = scales.down;
  m->w4a4 = *kept = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MlpWeights> LoadMlp(const WeightLoader& w, int64_t hidden, int64_t inter,
                                   const TensorParallel& tp, Nvfp4Numerics numerics) {
  FERRY_RETURN_IF_ERROR(CheckDivisible(w.prefix() + " intermediate size", inter, tp.world));
  MlpWeights m;
  if (numerics == Nvfp4Numerics::kW4A4) {
    bool kept = false;
    FERRY_RETURN_IF_ERROR(LoadMlpW4A4(w, hidden, inter, tp, &m, &kept));
    if (kept) return m;
  }
  const Slice rows{tp.Begin(inter), tp.End(inter), 0, -1};
  const Slice cols{0, -1, tp.Begin(inter), tp.End(inter)};
  FERRY_ASSIGN_OR_RETURN(m.gate, w.Matrix("gate_proj.weight", inter, hidden, rows));
  FERRY_ASSIGN_OR_RETURN(m.up, w.Matrix("up_proj.weight", inter, hidden, rows));
  FERRY_ASSIGN_OR_RETURN(m.down, w.Matrix("down_proj.weight", hidden, inter, cols));
  return m;
}

namespace {

// Shows the rounded rows (codes [rows, cols / 2], scales [rows, cols / 16]) to fp4's tap as values.
void ShowFp4(const Fp4Site& fp4, int64_t mlp, int64_t input, const uint8_t* codes, const uint8_t* scales, int64_t rows,
             int64_t cols) {
  if (fp4.tap == nullptr || !*fp4.tap) return;
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) DequantNvfp4Row(codes, scales, 1.0f, cols, r, 0, cols, v.data() + r * cols);
  (*fp4.tap)(mlp, input, fp4.tokens, v.data(), rows, cols);
}

// h[rows, inter] = SwiGlu(gate x, up x; limit).
void MlpHidden(const MlpWeights& m, const float* x, int64_t rows, int64_t hidden, float limit, float* h,
               const Fp4Site& fp4 = {}) {
  const int64_t inter = m.inter();
  std::vector<float> u(static_cast<size_t>(rows * inter));
  if (m.w4a4) {
    // One quantization of x serves gate and up (they share their input scale).
    std::vector<uint8_t> codes(static_cast<size_t>(rows * hidden / 2)), scales(static_cast<size_t>(rows * hidden / 16));
    cpu::QuantizeActivationsNvfp4(x, rows, hidden, m.gate4.input_scale, codes.data(), scales.data(), hidden);
    ShowFp4(fp4, fp4.gate_up_mlp, 0, codes.data(), scales.data(), rows, hidden);
    for (const auto& [p, out] : {std::pair{&m.gate4, h}, {&m.up4, u.data()}}) {
      cpu::LinearW4A4Quantized(codes.data(), scales.data(), hidden, rows, hidden, p->input_scale, p->codes.data(),
                               p->scales.data(), p->global_scale, inter, out);
    }
  } else {
    cpu::Linear(x, rows, hidden, m.gate.ptr(), inter, h);
    cpu::Linear(x, rows, hidden, m.up.ptr(), inter, u.data());
  }
  cpu::SwiGlu(h, u.data(), rows * inter, limit, h);
}

}  // namespace

void MlpForward(const MlpWeights& m, const float* x, int64_t rows, int64_t hidden, float limit, float* y,
                const MlpInputTap& tap, int64_t expert, const Fp4Site& fp4) {
  const int64_t inter = m.inter();
  std::vector<float> h(static_cast<size_t>(rows * inter));
  if (tap) tap(expert, MlpInput::kGateUp, x, rows, hidden);
  MlpHidden(m, x, rows, hidden, limit, h.data(), fp4);
  if (tap) tap(expert, MlpInput::kDown, h.data(), rows, inter);
  if (m.w4a4) {  // cpu::LinearW4A4, its rounding shown
    const Nvfp4Projection& d = m.down4;
    std::vector<uint8_t> codes(static_cast<size_t>(rows * inter / 2)), scales(static_cast<size_t>(rows * inter / 16));
    cpu::QuantizeActivationsNvfp4(h.data(), rows, inter, d.input_scale, codes.data(), scales.data(), inter);
    ShowFp4(fp4, fp4.down_mlp, 1, codes.data(), scales.data(), rows, inter);
    cpu::LinearW4A4Quantized(codes.data(), scales.data(), inter, rows, inter, d.input_scale, d.codes.data(),
                             d.scales.data(), d.global_scale, hidden, y);
  } else {
    cpu::Linear(h.data(), rows, inter, m.down.ptr(), hidden, y);
  }
}

absl::StatusOr<MoeWeights> LoadMoe(const WeightLoader& w, const ModelConfig& c, const TensorParallel& tp,
                                   Nvfp4Numerics numerics) {
  MoeWeights m;
  const int64_t E = c.n_routed_experts;
  FERRY_ASSIGN_OR_RETURN(m.router, w.Matrix("gate.weight", E, c.hidden_size));
  FERRY_ASSIGN_OR_RETURN(m.bias, w.Vector("gate.e_score_correction_bias", E));
  m.experts.reserve(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    FERRY_ASSIGN_OR_RETURN(MlpWeights ex,
                           LoadMlp(w.Sub(absl::StrCat("experts.", e, ".")), c.hidden_size,
                                   c.moe_intermediate_size, tp, numerics));
    m.experts.push_back(std::move(ex));
  }
  if (c.n_shared_experts > 0) {
    FERRY_ASSIGN_OR_RETURN(m.shared, LoadMlp(w.Sub("shared_experts."), c.hidden_size,
                                             c.moe_intermediate_size * c.n_shared_experts, tp, numerics));
    m.has_shared = true;
  }
  // W4A4: one activation scale a projection for the whole layer (the largest of its MLPs'), so a
  // token's input is quantized once for every expert it goes to, as grouped FP4 MoE kernels do.
  float gate_up = 0.0f, down = 0.0f;
  auto each_w4a4 = [&](const auto& fn) {
    for (MlpWeights& ex : m.experts) {
      if (ex.w4a4) fn(ex);
    }
    if (m.has_shared && m.shared.w4a4) fn(m.shared);
  };
  each_w4a4([&](MlpWeights& x) {
    gate_up = std::max(gate_up, x.gate4.input_scale);
    down = std::max(down, x.down4.input_scale);
  });
  each_w4a4([&](MlpWeights& x) {
    x.gate4.input_scale = x.up4.input_scale = gate_up;
    x.down4.input_scale = down;
  });
  m.routing.n_experts = E;
  m.routing.top_k = c.num_experts_per_tok;
  m.routing.n_group = c.n_group;
  m.routing.topk_group = c.topk_group;
  m.routing.norm_topk_prob = c.norm_topk_prob;
  m.routing.routed_scaling_factor = c.routed_scaling_factor;
  return m;
}

absl::Status MoeForward(const MoeWeights& m, const float* x, int64_t rows, int64_t hidden, float limit, float* y,
                        const RouteDecision& decide, const MlpInputTap& tap, const Fp4RowsTap& fp4) {
  const int64_t E = m.routing.n_experts, K = m.routing.top_k;
  std::vector<float> logits(static_cast<size_t>(rows * E));
  cpu::Linear(x, rows, hidden, m.router.ptr(), E, logits.data());
  std::vector<int32_t> experts(static_cast<size_t>(rows * K));
  std::vector<float> weights(experts.size());
  for (int64_t r = 0; r < rows; ++r) {
    cpu::RouteRow(logits.data() + r * E, m.bias.ptr(), m.routing, experts.data() + r * K,
                  weights.data() + r * K);
  }
  if (decide) {
    FERRY_ASSIGN_OR_RETURN(const bool pinned, decide(rows, K, std::span<int32_t>(experts)));
    for (int64_t r = 0; pinned && r < rows; ++r) {
      int32_t* row = experts.data() + r * K;
      std::sort(row, row + K);
      for (int64_t k = 0; k < K; ++k) {
        if (row[k] < 0 || row[k] >= E || (k > 0 && row[k] == row[k - 1])) {
          return absl::InvalidArgumentError(absl::StrCat("pinned routing of row ", r, ": expert ", row[k],
                                                         " is outside [0, ", E, ") or repeated"));
        }
      }
      PinnedRouteWeights(logits.data() + r * E, std::span<const int32_t>(row, static_cast<size_t>(K)), m.routing,
                         weights.data() + r * K);
    }
  }
  if (tap) {
    // Calibration: every routed expert sees every row (its output unused).
    std::vector<float> h;
    for (int64_t e = 0; e < E; ++e) {
      const MlpWeights& ex = m.experts[static_cast<size_t>(e)];
      h.resize(static_cast<size_t>(rows * ex.inter()));
      tap(e, MlpInput::kGateUp, x, rows, hidden);
      MlpHidden(ex, x, rows, hidden, limit, h.data());
      tap(e, MlpInput::kDown, h.data(), rows, ex.inter());
    }
  }
  // Each expert runs once over the rows routed to it; outputs land in per-(row, slot) buffers
  // and are summed per row in slot order (ascending expert id), whatever the batch holds.
  std::vector<float> slots(static_cast<size_t>(rows * K * hidden));
  std::vector<std::vector<int64_t>> routed(static_cast<size_t>(E));  // (row * K + slot)
  for (int64_t i = 0; i < rows * K; ++i) routed[experts[i]].push_back(i);
  std::vector<float> xin, yout;
  std::vector<int64_t> tokens;
  for (int64_t e = 0; e < E; ++e) {
    const auto& list = routed[e];
    if (list.empty()) continue;
    const int64_t n = static_cast<int64_t>(list.size());
    xin.resize(static_cast<size_t>(n * hidden));
    yout.resize(xin.size());
    tokens.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      tokens[static_cast<size_t>(j)] = list[j] / K;
      std::copy_n(x + (list[j] / K) * hidden, hidden, xin.data() + j * hidden);
    }
    // A token's input is rounded once for all its experts (the layer's one scale): one key.
    MlpForward(m.experts[e], xin.data(), n, hidden, limit, yout.data(), {}, e,
               Fp4Site{&fp4, DecisionLog::kFp4RoutedInput, e, tokens});
    for (int64_t j = 0; j < n; ++j) {
      std::copy_n(yout.data() + j * hidden, hidden, slots.data() + list[j] * hidden);
    }
  }
  std::fill_n(y, rows * hidden, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * hidden;
    for (int64_t k = 0; k < K; ++k) {
      const float w = weights[r * K + k];
      const float* s = slots.data() + (r * K + k) * hidden;
      for (int64_t i = 0; i < hidden; ++i) yr[i] += s[i] * w;
    }
  }
  if (m.has_shared) {
    std::vector<float> sh(static_cast<size_t>(rows * hidden));
    MlpForward(m.shared, x, rows, hidden, limit, sh.data(), tap, FfnObserver::kSharedExpert,
               Fp4Site{&fp4, DecisionLog::kFp4SharedExpert, DecisionLog::kFp4SharedExpert, {}});
    for (int64_t i = 0; i < rows * hidden; ++i) y[i] += sh[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<FfnWeights> LoadFfn(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                                   const TensorParallel& tp, Nvfp4Numerics numerics) {
  FfnWeights f;
  f.dense = c.mlp_types[static_cast<size_t>(layer)] == MlpType::kDense;
  if (f.dense) {
    FERRY_ASSIGN_OR_RETURN(f.mlp, LoadMlp(w, c.hidden_size, c.intermediate_size, tp, numerics));
  } else {
    FERRY_ASSIGN_OR_RETURN(f.moe, LoadMoe(w, c, tp, numerics));
  }
  return f;
}

absl::Status FfnForward(const FfnWeights& f, const float* x, int64_t rows, int64_t hidden, float limit, float* y,
                        const RouteDecision& decide, const MlpInputTap& tap, const Fp4RowsTap& fp4) {
  if (!f.dense) return MoeForward(f.moe, x, rows, hidden, limit, y, decide, tap, fp4);
  MlpForward(f.mlp, x, rows, hidden, limit, y, tap, FfnObserver::kDenseMlp,
             Fp4Site{&fp4, DecisionLog::kFp4DenseMlp, DecisionLog::kFp4DenseMlp, {}});
  return absl::OkStatus();
}

}  // namespace ferry::model
