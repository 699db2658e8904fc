// The end of a step written once over a backend (model/families/dsa_step.h, model/families/next_step.h): lm_head
// (float32 logits) on the head's rows of the final-normed activations, the sampled rows' tokens
// picked where the logits are, and one wait for the logits, the picks and the MoE dispatch's
// error word.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "common/status.h"
#include "model/families/causal_lm.h"
#include "model/checkpoint/config.h"
#include "model/families/step_rows.h"

namespace ferry::model {

// normed [R, hidden] (the backend's activations), d_rows and d_samplers: head.rows and
// head.picked.samplers as the backend reads them, moe_error: the step's int32 error word on the
// device (null: none).
template <class Ops>
absl::StatusOr<ForwardOutput> RunHead(Ops& ops, const ModelConfig& c, const HeadRows& head,
                                      const typename Ops::Act* normed, const int32_t* d_rows,
                                      const kernels::RowSampler* d_samplers, const typename Ops::WeightT& lm_head,
                                      const void* moe_error) {
  using T = typename Ops::Act;
  const int64_t D = c.hidden_size, V = c.vocab_size, n_out = head.n_logits;
  const int64_t n_head = static_cast<int64_t>(head.rows.size()), n_pick = n_head - n_out;
  FERRY_ASSIGN_OR_RETURN(T* h, ops.template Take<T>(n_head * D));
  FERRY_ASSIGN_OR_RETURN(float* logits, ops.template Take<float>(n_head * V));
  FERRY_ASSIGN_OR_RETURN(kernels::SampledToken* picks, ops.template Take<kernels::SampledToken>(n_pick));
  FERRY_RETURN_IF_ERROR(ops.CopyRows(normed, D, d_rows, h, D, nullptr, n_head, D));
  FERRY_RETURN_IF_ERROR(ops.LinearToF32(h, n_head, D, lm_head.template as<T>(), V, 1.0f, logits));
  if (n_pick > 0) FERRY_RETURN_IF_ERROR(ops.Sample(logits + n_out * V, n_pick, V, d_samplers, picks));
  ForwardOutput out;
  out.vocab = V;
  out.first_row = head.picked.first_row;
  out.logits.resize(static_cast<size_t>(n_out * V));
  std::vector<kernels::SampledToken> picked(static_cast<size_t>(n_pick));
  int32_t error = 0;
  FERRY_RETURN_IF_ERROR(ops.Receive({{out.logits.data(), logits, out.logits.size() * sizeof(float)},
                                     {picked.data(), picks, picked.size() * sizeof(kernels::SampledToken)},
                                     {&error, moe_error, moe_error != nullptr ? sizeof(int32_t) : 0}}));
  FERRY_RETURN_IF_ERROR(ops.FfnError(error, c.n_routed_experts));
  out.picks = head.picked.PicksOf(picked);
  return out;
}

}  // namespace ferry::model
