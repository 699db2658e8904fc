// The lightning indexer of DeepSeek sparse attention as GLM-5 (glm_moe_dsa) runs it.
//
// Per token, a full indexer layer caches ki [Di] = RoPE(LayerNorm(a · wk^T)) (RoPE, interleaved, on
// the first qk_rope_head_dim dims). A query row t scores every visible key s <= t:
//   I(t, s) = sum_h w_h * ReLU(Di^-0.5 * qi_h · ki_s),  qi = RoPE(cq · wq_b^T) [Hi, Di],
//   w = (a · weights_proj^T) * Hi^-0.5,
// and attends to the top index_topk (ties to the lower index); with index_topk or fewer visible
// keys it attends to all of them (dense causal).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "model/paged_cache.h"
#include "model/weights.h"

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

// keys [R, Di]: the cache entries of R new rows. a [R, hidden]; pos [R]; inv_freq [P / 2].
void DsaIndexerKeys(const DsaIndexerWeights& w, const ModelConfig& c, const float* a, int64_t rows,
                    const int64_t* pos, const float* inv_freq, float* keys);

// For each row r, sel[r] = the ascending token ids it attends to, scored against its cached keys
// key_of(r, t) for positions t = 0..pos[r].
// REQUIRES: the keys of positions 0..pos[r] are written (including this batch's rows).
void DsaIndexerSelect(const DsaIndexerWeights& w, const ModelConfig& c, const float* a, const float* cq,
                      int64_t rows, const int64_t* pos, const float* inv_freq,
                      const RowOf& key_of, std::vector<std::vector<int32_t>>* sel);

}  // namespace ferry::model
