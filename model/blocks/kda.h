// Kimi Delta Attention (KDA), the linear_attention layers of glm5_next, in float32.
//
// Shapes (H heads of d channels, C = H * d, K the conv kernel, r the low-rank width):
//   q, k, v = a · {q,k,v}_proj^T                 [T, C]
//   causal depthwise conv (weights [C, 1, K], no bias) over each, then SiLU;
//   the conv state is the last K - 1 inputs of each of q, k, v   [3, K - 1, C]
//   q, k  <- x / sqrt(sum_head(x^2) + 1e-6) per head;  q *= d^-0.5
//   g     = lower_bound * sigmoid(exp(A_log[h]) * (a · f_a^T · f_b^T + dt_bias))   [T, C] (log decay)
//   beta  = sigmoid(a · b_proj^T)                [T, H]
//   per head, S [d, d] (key channel x value channel):
//     S <- diag(exp(g_t)) S;  S <- S + k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T q_t
//   o     = RMSNorm_head(o; o_norm, rms_norm_eps) * sigmoid(a · g_a^T · g_b^T), then o_proj.
// f, g, beta and the output gate read the layer input a, not the conv output.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint/config.h"
#include "model/parallel/tensor_parallel.h"
#include "model/checkpoint/weights.h"

namespace ferry::model {

// Under tensor parallelism a rank holds `heads` = H / W heads: its channels of q/k/v, the convs,
// the decay (f_b, dt_bias, A_log), beta, the output gate (g_b), and its columns of o_proj;
// f_a, g_a and o_norm are replicated. Each rank keeps only its heads' recurrent state.
struct KdaWeights {
  int64_t heads = 0;                    // heads held by this rank (C below is heads * d)
  Weight q_proj, k_proj, v_proj;        // [C, D]
  Weight q_conv, k_conv, v_conv;        // [C, K]
  Weight f_a, f_b;                      // [r, D], [C, r]
  Weight g_a, g_b;                      // [r, D], [C, r]
  Weight b_proj;                        // [H, D]
  Weight a_log;                         // [H]
  Weight dt_bias;                       // [C]
  Weight o_norm;                        // [d]
  Weight o_proj;                        // [D, C]
};

absl::StatusOr<KdaWeights> LoadKda(const WeightLoader& w, const ModelConfig& c, const TensorParallel& tp = {});

// One layer's recurrent state as the recurrence reads and writes it: conv [3 (q, k, v), K - 1, C]
// (oldest input first) and s [H, d, d], wherever the conversation keeps them.
struct KdaStateView {
  float* conv = nullptr;
  float* s = nullptr;
};

// The per-conversation layout of every KDA layer's state in one float32 block (a conversation's
// fixed state, model/cache/conversation.h): a layer's conv tails at conv[l] and its S at s[l] (-1 on
// layers without KDA), for `heads` heads (this rank's share).
struct KdaStateLayout {
  std::vector<int64_t> conv;
  std::vector<int64_t> s;
  int64_t floats = 0;
  static KdaStateLayout Of(const ModelConfig& c, int64_t heads);
  KdaStateView View(float* block, int64_t layer) const {
    return {block + conv[static_cast<size_t>(layer)], block + s[static_cast<size_t>(layer)]};
  }
};

// One conversation's recurrent state of one KDA layer, in vectors of its own (tests).
struct KdaState {
  std::vector<float> conv;  // [3 (q, k, v), K - 1, C], oldest input first
  std::vector<float> s;     // [H, d, d]
  // The zero state for `heads` heads (this rank's share).
  static KdaState Zero(const ModelConfig& c, int64_t heads);
  int64_t bytes() const { return static_cast<int64_t>((conv.size() + s.size()) * sizeof(float)); }
  KdaStateView view() { return {conv.data(), s.data()}; }
};

// A step's conversations as a KDA layer runs them: rows [begin[s], begin[s] + n[s]) are
// conversation s's new tokens (positions from pos0[s]), its KDA state block state[s] laid out as
// *layout says; multi-token pieces use the chunked form with `chunk` tokens (0: token by token)
// where the backend has one.
struct KdaSegments {
  std::vector<int64_t> begin, n, pos0;
  std::vector<float*> state;
  const KdaStateLayout* layout = nullptr;
  int64_t chunk = 0;
};

// Per-row inputs of the recurrence, computed for all rows of a step at once.
struct KdaInputs {
  std::vector<float> q, k, v;  // [R, C] raw projections (before the conv)
  std::vector<float> g;        // [R, C] log decay
  std::vector<float> beta;     // [R, H]
  std::vector<float> gate;     // [R, C] output gate, after the sigmoid
};

void KdaProject(const KdaWeights& w, const ModelConfig& c, const float* a, int64_t rows, KdaInputs* in);

// Runs rows [begin, begin + n) of `in`, consecutive tokens of one conversation, through the conv
// and the recurrence, advancing `state`; writes the per-head outputs o [n, C] (before the norm).
// `chunk` > 0 uses the chunked form with chunks of that many tokens aligned to absolute
// positions (`pos0` is the first row's position); 0 the token-by-token recurrence. Both compute
// the same function; they differ by float32 rounding only.
void KdaRun(const KdaWeights& w, const ModelConfig& c, const KdaInputs& in, int64_t begin, int64_t n,
            int64_t pos0, int64_t chunk, KdaStateView state, float* o);
inline void KdaRun(const KdaWeights& w, const ModelConfig& c, const KdaInputs& in, int64_t begin, int64_t n,
                   int64_t pos0, int64_t chunk, KdaState* state, float* o) {
  KdaRun(w, c, in, begin, n, pos0, chunk, state->view(), o);
}

// out [R, D] = o_proj(RMSNorm_head(o) * gate) (this rank's partial sum under tensor parallelism).
void KdaOutput(const KdaWeights& w, const ModelConfig& c, const KdaInputs& in, const float* o, int64_t rows,
               float* out);

}  // namespace ferry::model
