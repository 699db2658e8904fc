// The CUDA models' hook into model::DecisionLog (model/golden/decision_log.h): right after a decision
// kernel (cu::TopK, cu::MoeRoute) the tap copies its ids to the host, lets the log record,
// compare or pin them, and when pinned uploads the recorded ids (and, for routing, the weights
// those experts get from this run's own router logits) so the same downstream code runs on them.
// Off (no log attached, the default and every serving path) it is one null check. On, it adds
// a device-to-host copy and a sync per site and layer: for check-golden, never for serving.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/ops.h"
#include "model/golden/decision_log.h"

namespace ferry::model::cuda {

using model::DecisionTap;

// After cu::MoeRoute: logits [rows, n_experts] float32, experts [rows, top_k] int32 and weights
// [rows, top_k] float32, all on the device (ffn_cuda.h's FfnScratch). When the log pins, experts
// become the recorded ids and weights PinnedRouteWeights of this run's logits (RouteRow's formula).
// Errors: the log's; INTERNAL when a recorded expert id is outside [0, n_experts); copy errors.
absl::Status TapMoeRoute(const DecisionTap& tap, const float* logits, int64_t rows,
                         const kernels::cpu::RoutingParams& p, int32_t* experts, float* weights);

// After cu::TopK: ids [rows, k] int32 (ascending, -1 padded) and counts [rows] int32 (may be
// null) on the device. When the log pins, ids become the recorded ones and counts their number
// of non-negative entries (what TopK would have written for them).
absl::Status TapTopK(const DecisionTap& tap, int64_t rows, int64_t k, int32_t* ids, int32_t* counts);

// After a RoundActivationsW4A4 of W4A4 numerics: rows [ids.size(), cols] bf16 on the device,
// row i being step row ids[i].token of MLP ids[i].mlp (DecisionLog::Fp4Row's keys), input
// `input` (0 gate/up, 1 down). The log compares each with its record; when it pins, the rows
// become the recorded values (exact in bf16), so the products after it multiply the reference's
// FP4 activations. Errors: the log's; copy errors.
struct Fp4RowId {
  int64_t mlp = 0, token = 0;
};
absl::Status TapFp4Rows(const DecisionTap& tap, int64_t input, std::span<const Fp4RowId> ids, uint16_t* rows,
                        int64_t cols);
// The ids of rows [row0, row0 + n) of one MLP's input; none when the tap is off.
std::vector<Fp4RowId> Fp4RowsOf(const DecisionTap& tap, int64_t mlp, int64_t row0, int64_t n);

}  // namespace ferry::model::cuda
