// The lightning indexer of DeepSeek sparse attention as GLM-5 (glm_moe_dsa) runs it.
//
// Per token, a full indexer layer caches ki [Di] = RoPE(LayerNorm(a · wk^T)) (RoPE, interleaved, on
// the first qk_rope_head_dim dims). A query row t scores every visible key s <= t:
//   I(t, s) = sum_h w_h * ReLU(Di^-0.5 * qi_h · ki_s),  qi = RoPE(cq · wq_b^T) [Hi, Di],
//   w = (a · weights_proj^T) * Hi^-0.5,
// and attends to the top index_topk (ties to the lower index); with index_topk or fewer visible
// keys it attends to all of them (dense causal). The computation is model/families/dsa_step.h's, over a
// backend's ops; this file loads the weights.
#pragma once

#include <cstdint>
#include "absl/status/statusor.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/weights.h"

namespace ferry::model {

struct DsaIndexerWeights {
  Weight wq_b;          // [Hi * Di, q_lora]
  Weight wk;            // [Di, hidden]
  Weight k_norm_w;      // [Di]
  Weight k_norm_b;      // [Di]
  Weight weights_proj;  // [Hi, hidden]
};

// Loads `wq_b`, `wk`, `k_norm`, `weights_proj` under the loader's prefix ("...self_attn.indexer.").
absl::StatusOr<DsaIndexerWeights> LoadDsaIndexer(const WeightLoader& w, const ModelConfig& c);

}  // namespace ferry::model
