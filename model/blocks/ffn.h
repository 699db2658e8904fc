// The feed-forward blocks shared by both families: the SwiGLU MLP (dense layers, each expert,
// the shared expert) and the sigmoid-routed MoE.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/ops.h"
#include "model/checkpoint/config.h"
#include "model/parallel/tensor_parallel.h"
#include "model/checkpoint/weights.h"

namespace ferry::model {

// An NVFP4 projection kept as stored for W4A4 numerics (kernels/cpu/nvfp4_w4a4.h): this rank's
// codes [out, in / 2] and E4M3 group scales [out, in / 16], the weight's global scale, and the
// activation scale its input is quantized under.
struct Nvfp4Projection {
  std::vector<uint8_t> codes, scales;
  float global_scale = 1.0f;
  float input_scale = 0.0f;
  int64_t out = 0, in = 0;
};

// gate/up [inter, hidden], down [hidden, inter] (PyTorch Linear layout): float32, or, when w4a4,
// the three projections kept in NVFP4 (gate4, up4, down4) and run with W4A4 numerics.
struct MlpWeights {
  Weight gate, up, down;
  bool w4a4 = false;
  Nvfp4Projection gate4, up4, down4;
  int64_t inter() const { return w4a4 ? gate4.out : gate.rows; }
};

// The activation scales W4A4 numerics give an MLP stored in NVFP4 (its three projections as
// read): gate and up the larger of their input scales, down its own. An MoE layer then takes the
// largest over its MLPs (LoadMoe). FAILED_PRECONDITION naming `prefix` and the projection when
// one has no input_scale (a weight-only checkpoint).
struct W4a4Scales {
  float gate_up = 0.0f, down = 0.0f;
};
absl::StatusOr<W4a4Scales> W4a4ScalesOf(const std::string& prefix, const Checkpoint::Nvfp4Tensor& gate,
                                        const Checkpoint::Nvfp4Tensor& up, const Checkpoint::Nvfp4Tensor& down);

// Loads `gate_proj`, `up_proj`, `down_proj` under the loader's prefix; under tensor parallelism
// this rank's slice of the intermediate dimension (gate/up rows, down columns). With kW4A4, an
// MLP whose three projections are stored NVFP4 is kept in NVFP4 (w4a4); one with a bf16 or FP8
// projection loads as float32 (W4A4 applies only where the checkpoint quantized all three).
// Errors: the loader's; with kW4A4, FAILED_PRECONDITION for an NVFP4 projection without an
// input_scale (a weight-only checkpoint: run it with kW4A16) and INVALID_ARGUMENT for a
// tensor-parallel slice of down_proj's columns that is not a multiple of 16.
absl::StatusOr<MlpWeights> LoadMlp(const WeightLoader& w, int64_t hidden, int64_t inter,
                                   const TensorParallel& tp = {}, Nvfp4Numerics numerics = Nvfp4Numerics::kW4A16);

// Which input of an MLP's projections a forward shows an FfnObserver.
enum class MlpInput { kGateUp, kDown };

// Sees the inputs of a layer's MLP projections as a forward computes them: what activation
// calibration (ferry quantize's input scales) measures. `expert` is the routed expert's id,
// kDenseMlp for a dense layer's MLP, kSharedExpert for the shared expert. While an observer is
// attached, an MoE layer also shows every routed expert every row of the step (as calibration
// tools route all tokens to all experts, so that no expert goes unmeasured); the layer's output
// is unchanged. x is [rows, cols] float32, valid for the call only.
class FfnObserver {
 public:
  static constexpr int64_t kDenseMlp = -1, kSharedExpert = -2;
  virtual ~FfnObserver() = default;
  virtual void See(int64_t layer, int64_t expert, MlpInput input, const float* x, int64_t rows, int64_t cols) = 0;
};
// An observer bound to one layer (FfnForward's argument): null function when none is attached.
using MlpInputTap = std::function<void(int64_t expert, MlpInput input, const float* x, int64_t rows, int64_t cols)>;

// W4A4's rounded MLP inputs, shown to a DecisionLog that records them (DecisionLog::Fp4Row): each
// rounding of an MLP kept in NVFP4 for W4A4, as values (e2m1 x its group's E4M3 scale) [rows,
// cols]; `tokens` the step rows they are (empty: 0..rows-1); `mlp` and `input` as Fp4Row's.
using Fp4RowsTap = std::function<void(int64_t mlp, int64_t input, std::span<const int64_t> tokens, const float* values,
                                      int64_t rows, int64_t cols)>;
// Where one MLP's roundings go: the keys of its gate/up input and of its down input.
struct Fp4Site {
  const Fp4RowsTap* tap = nullptr;  // null or empty: not shown
  int64_t gate_up_mlp = 0, down_mlp = 0;
  std::span<const int64_t> tokens;
};

// y[rows, hidden] = down(SwiGlu(gate x, up x; limit)), limit 0 = no clamp. y must not alias x.
// `tap` (optional) sees x and the SwiGlu output as input `expert`'s; `fp4` the W4A4 roundings.
void MlpForward(const MlpWeights& m, const float* x, int64_t rows, int64_t hidden, float limit, float* y,
                const MlpInputTap& tap = {}, int64_t expert = FfnObserver::kDenseMlp, const Fp4Site& fp4 = {});

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
// expert, so routing (replicated) stays global. With kW4A4 every MLP of the layer kept in NVFP4
// quantizes its gate/up input under the largest gate/up input scale among them, and its down
// input under the largest down input scale (one quantization of a token for all its experts).
absl::StatusOr<MoeWeights> LoadMoe(const WeightLoader& w, const ModelConfig& c, const TensorParallel& tp = {},
                                   Nvfp4Numerics numerics = Nvfp4Numerics::kW4A16);

// What a decision log does with a step's routing (model/golden/decision_log.h): it sees the experts
// [rows, k] (ascending in each row) and may overwrite them (a replay); true when it did.
using RouteDecision = std::function<absl::StatusOr<bool>(int64_t rows, int64_t k, std::span<int32_t> experts)>;

// y[rows, hidden] (this rank's partial sum under tensor parallelism) = sum over each row's routed experts, ascending by expert id, of
// weight * expert(x), then + shared(x). Each row's result is independent of the other rows.
// y must not alias x. `decide` (optional) may pin the routing: pinned experts are weighted as the
// router would weight them (PinnedRouteWeights). `tap` (optional) sees the projections' inputs
// as FfnObserver says. Errors: `decide`'s, and INVALID_ARGUMENT for a pinned expert id outside
// [0, n_experts) or repeated in a row.
absl::Status MoeForward(const MoeWeights& m, const float* x, int64_t rows, int64_t hidden, float limit, float* y,
                        const RouteDecision& decide = {}, const MlpInputTap& tap = {}, const Fp4RowsTap& fp4 = {});

// A layer's FFN: the dense MLP or the MoE, as config.mlp_types says.
struct FfnWeights {
  bool dense = false;
  MlpWeights mlp;
  MoeWeights moe;
};

// Loads layer `layer`'s FFN under the loader's prefix ("...mlp.").
absl::StatusOr<FfnWeights> LoadFfn(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                                   const TensorParallel& tp = {}, Nvfp4Numerics numerics = Nvfp4Numerics::kW4A16);

// y[rows, hidden] = the layer's FFN of x (this rank's partial sum under tensor parallelism); an MoE
// layer's routing goes through `decide` as MoeForward says; `tap` as MoeForward and MlpForward say.
absl::Status FfnForward(const FfnWeights& f, const float* x, int64_t rows, int64_t hidden, float limit, float* y,
                        const RouteDecision& decide = {}, const MlpInputTap& tap = {}, const Fp4RowsTap& fp4 = {});

}  // namespace ferry::model
