// The query side both indexers share (the lightning indexer of glm_moe_dsa and the pooled one of
// glm5_next): for the rows that need scores, qi = cq · wq_b^T [Hi, Di] and the head weights
// w = (a · weights_proj^T) * Hi^-0.5 [Hi].
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace ferry::model {

struct IndexerQueries {
  std::vector<float> qi;  // [n, Hi * Di], row j for rows[j]
  std::vector<float> w;   // [n, Hi]
};

// a [R, hidden] and cq [R, q_lora] for all rows of the step; `rows` the ones to score.
IndexerQueries ComputeIndexerQueries(const Weight& wq_b, const Weight& weights_proj, const ModelConfig& c,
                                     const float* a, const float* cq, const std::vector<int64_t>& rows);

}  // namespace ferry::model
