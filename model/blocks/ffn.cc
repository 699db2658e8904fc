#include "model/blocks/ffn.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/golden/decision_log.h"

namespace ferry::model {

namespace cpu = ferry::kernels::cpu;

absl::StatusOr<MlpWeights> LoadMlp(const WeightLoader& w, int64_t hidden, int64_t inter,
                                   const TensorParallel& tp) {
  FERRY_RETURN_IF_ERROR(CheckDivisible(w.prefix() + " intermediate size", inter, tp.world));
  const Slice rows{tp.Begin(inter), tp.End(inter), 0, -1};
  const Slice cols{0, -1, tp.Begin(inter), tp.End(inter)};
  MlpWeights m;
  FERRY_ASSIGN_OR_RETURN(m.gate, w.Matrix("gate_proj.weight", inter, hidden, rows));
  FERRY_ASSIGN_OR_RETURN(m.up, w.Matrix("up_proj.weight", inter, hidden, rows));
  FERRY_ASSIGN_OR_RETURN(m.down, w.Matrix("down_proj.weight", hidden, inter, cols));
  return m;
}

void MlpForward(const MlpWeights& m, const float* x, int64_t rows, int64_t hidden, float limit, float* y) {
  const int64_t inter = m.inter();
  std::vector<float> g(static_cast<size_t>(rows * inter)), u(g.size());
  cpu::Linear(x, rows, hidden, m.gate.ptr(), inter, g.data());
  cpu::Linear(x, rows, hidden, m.up.ptr(), inter, u.data());
  cpu::SwiGlu(g.data(), u.data(), rows * inter, limit, g.data());
  cpu::Linear(g.data(), rows, inter, m.down.ptr(), hidden, y);
}

absl::StatusOr<MoeWeights> LoadMoe(const WeightLoader& w, const ModelConfig& c, const TensorParallel& tp) {
  MoeWeights m;
  const int64_t E = c.n_routed_experts;
  FERRY_ASSIGN_OR_RETURN(m.router, w.Matrix("gate.weight", E, c.hidden_size));
  FERRY_ASSIGN_OR_RETURN(m.bias, w.Vector("gate.e_score_correction_bias", E));
  m.experts.reserve(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    FERRY_ASSIGN_OR_RETURN(MlpWeights ex,
                           LoadMlp(w.Sub(absl::StrCat("experts.", e, ".")), c.hidden_size,
                                   c.moe_intermediate_size, tp));
    m.experts.push_back(std::move(ex));
  }
  if (c.n_shared_experts > 0) {
    FERRY_ASSIGN_OR_RETURN(m.shared, LoadMlp(w.Sub("shared_experts."), c.hidden_size,
                                             c.moe_intermediate_size * c.n_shared_experts, tp));
    m.has_shared = true;
  }
  m.routing.n_experts = E;
  m.routing.top_k = c.num_experts_per_tok;
  m.routing.n_group = c.n_group;
  m.routing.topk_group = c.topk_group;
  m.routing.norm_topk_prob = c.norm_topk_prob;
  m.routing.routed_scaling_factor = c.routed_scaling_factor;
  return m;
}

absl::Status MoeForward(const MoeWeights& m, const float* x, int64_t rows, int64_t hidden, float limit, float* y,
                        const RouteDecision& decide) {
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
  // Each expert runs once over the rows routed to it; outputs land in per-(row, slot) buffers
  // and are summed per row in slot order (ascending expert id), whatever the batch holds.
  std::vector<float> slots(static_cast<size_t>(rows * K * hidden));
  std::vector<std::vector<int64_t>> routed(static_cast<size_t>(E));  // (row * K + slot)
  for (int64_t i = 0; i < rows * K; ++i) routed[experts[i]].push_back(i);
  std::vector<float> xin, yout;
  for (int64_t e = 0; e < E; ++e) {
    const auto& list = routed[e];
    if (list.empty()) continue;
    const int64_t n = static_cast<int64_t>(list.size());
    xin.resize(static_cast<size_t>(n * hidden));
    yout.resize(xin.size());
    for (int64_t j = 0; j < n; ++j) {
      std::copy_n(x + (list[j] / K) * hidden, hidden, xin.data() + j * hidden);
    }
    MlpForward(m.experts[e], xin.data(), n, hidden, limit, yout.data());
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
    MlpForward(m.shared, x, rows, hidden, limit, sh.data());
    for (int64_t i = 0; i < rows * hidden; ++i) y[i] += sh[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<FfnWeights> LoadFfn(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                                   const TensorParallel& tp) {
  FfnWeights f;
  f.dense = c.mlp_types[static_cast<size_t>(layer)] == MlpType::kDense;
  if (f.dense) {
    FERRY_ASSIGN_OR_RETURN(f.mlp, LoadMlp(w, c.hidden_size, c.intermediate_size, tp));
  } else {
    FERRY_ASSIGN_OR_RETURN(f.moe, LoadMoe(w, c, tp));
  }
  return f;
}

absl::Status FfnForward(const FfnWeights& f, const float* x, int64_t rows, int64_t hidden, float limit, float* y,
                        const RouteDecision& decide) {
  if (!f.dense) return MoeForward(f.moe, x, rows, hidden, limit, y, decide);
  MlpForward(f.mlp, x, rows, hidden, limit, y);
  return absl::OkStatus();
}

}  // namespace ferry::model
