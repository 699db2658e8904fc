// The pooled indexer of glm5_next (every MLA layer has one; there is no RoPE).
//
// Per token it caches ki [Di] = LayerNorm(a · wk^T; eps 1e-6) and gk [Di] = a · compress_gate^T.
// Pools are `kpool` consecutive tokens from position 0; a pool's key, once all its tokens exist,
//   K_p[c] = sum_j softmax_j(gk[j, c] + ape[j, c]) * ki[j, c]        (j over the pool's tokens)
// A query at position t scores the complete pools whose last token is <= t:
//   score(t, p) = sum_h w_h * ReLU(Di^-0.5 * qi_h · K_p),  qi = cq · wq_b^T,
//   w = (a · weights_proj^T) * Hi^-0.5,
// keeps the best index_topk / kpool pools (ties to the lower pool), expands each to its tokens
// and adds the unscored tail, the (t + 1) % kpool newest tokens after the last complete pool.
// With no more than index_topk / kpool complete pools that is every token (dense causal).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/weights.h"

namespace ferry::model {

struct PooledIndexerWeights {
  Weight wq_b;          // [Hi * Di, q_lora]
  Weight wk;            // [Di, D]
  Weight k_norm_w;      // [Di]
  Weight k_norm_b;      // [Di]
  Weight weights_proj;  // [Hi, D]
  Weight gate;          // [Di, D]  index_kpool_compress_gate
  Weight ape;           // [kpool, Di]  index_kpool_compress_ape
};

absl::StatusOr<PooledIndexerWeights> LoadPooledIndexer(const WeightLoader& w, const ModelConfig& c);

// Computes pools [first, end) of one conversation, each complete (its kpool tokens cached:
// key_of(t) and gate_of(t) are token t's ki and gk [dim]), into pool_of(p) [dim]; ape [kpool, dim]
// (PooledIndexerWeights::ape).
void PooledIndexerPools(const float* ape, int64_t dim, int64_t kpool, int64_t first, int64_t end,
                        const std::function<const float*(int64_t)>& key_of,
                        const std::function<const float*(int64_t)>& gate_of,
                        const std::function<float*(int64_t)>& pool_of);

}  // namespace ferry::model
