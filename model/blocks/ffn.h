// The feed-forward blocks shared by both families: the SwiGLU MLP (dense layers, each expert,
// the shared expert) and the sigmoid-routed MoE.
#pragma once

#include <functional>
#include <span>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/ops.h"
#include "model/checkpoint/config.h"
#include "model/parallel/tensor_parallel.h"
#include "model/checkpoint/weights.h"

namespace ferry::model {

// gate/up [inter, hidden], down [hidden, inter] (PyTorch Linear layout).
struct MlpWeights {
  Weight gate, up, down;
  int64_t inter() const { return gate.rows; }
};

// Loads `gate_proj`, `up_proj`, `down_proj` under the loader's prefix; under tensor parallelism
// this rank's slice of the intermediate dimension (gate/up rows, down columns).
absl::StatusOr<MlpWeights> LoadMlp(const WeightLoader& w, int64_t hidden, int64_t inter,
                                   const TensorParallel& tp = {});

// y[rows, hidden] = down(SwiGlu(gate x, up x; limit)), limit 0 = no clamp. y must not alias x.
void MlpForward(const MlpWeights& m, const float* x, int64_t rows, int64_t hidden, float limit, float* y);

// Router `gate.weight` [E, hidden], `gate.e_score_correction_bias` [E], experts E.{gate,up,down},
// and `shared_experts` (inter = moe_intermediate_size * n_shared_experts; absent when 0).
struct MoeWeights {
  Weight router;
  Weight bias;
  std::vector<MlpWeights> experts;
  MlpWeights shared;
  bool has_shared = false;
  kernels::cpu::RoutingParams routing;
};

// Experts are not divided between ranks: every rank holds its intermediate slice of every
// expert, so routing (replicated) stays global.
absl::StatusOr<MoeWeights> LoadMoe(const WeightLoader& w, const ModelConfig& c, const TensorParallel& tp = {});

// What a decision log does with a step's routing (model/golden/decision_log.h): it sees the experts
// [rows, k] (ascending in each row) and may overwrite them (a replay); true when it did.
using RouteDecision = std::function<absl::StatusOr<bool>(int64_t rows, int64_t k, std::span<int32_t> experts)>;

// y[rows, hidden] (this rank's partial sum under tensor parallelism) = sum over each row's routed experts, ascending by expert id, of
// weight * expert(x), then + shared(x). Each row's result is independent of the other rows.
// y must not alias x. `decide` (optional) may pin the routing: pinned experts are weighted as the
// router would weight them (PinnedRouteWeights). Errors: `decide`'s, and INVALID_ARGUMENT
// for a pinned expert id outside [0, n_experts) or repeated in a row.
absl::Status MoeForward(const MoeWeights& m, const float* x, int64_t rows, int64_t hidden, float limit, float* y,
                        const RouteDecision& decide = {});

// A layer's FFN: the dense MLP or the MoE, as config.mlp_types says.
struct FfnWeights {
  bool dense = false;
  MlpWeights mlp;
  MoeWeights moe;
};

// Loads layer `layer`'s FFN under the loader's prefix ("...mlp.").
absl::StatusOr<FfnWeights> LoadFfn(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                                   const TensorParallel& tp = {});

// y[rows, hidden] = the layer's FFN of x (this rank's partial sum under tensor parallelism); an MoE
// layer's routing goes through `decide` as MoeForward says.
absl::Status FfnForward(const FfnWeights& f, const float* x, int64_t rows, int64_t hidden, float limit, float* y,
                        const RouteDecision& decide = {});

}  // namespace ferry::model
