#include "model/blocks/pooled_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/status.h"
#include "kernels/cpu/ops.h"

namespace ferry::model {

namespace cpu = ferry::kernels::cpu;

absl::StatusOr<PooledIndexerWeights> LoadPooledIndexer(const WeightLoader& w, const ModelConfig& c) {
  const int64_t Hi = c.index_n_heads, Di = c.index_head_dim, D = c.hidden_size;
  PooledIndexerWeights x;
  FERRY_ASSIGN_OR_RETURN(x.wq_b, w.Matrix("wq_b.weight", Hi * Di, c.q_lora_rank));
  FERRY_ASSIGN_OR_RETURN(x.wk, w.Matrix("wk.weight", Di, D));
  FERRY_ASSIGN_OR_RETURN(x.k_norm_w, w.Vector("k_norm.weight", Di));
  FERRY_ASSIGN_OR_RETURN(x.k_norm_b, w.Vector("k_norm.bias", Di));
  FERRY_ASSIGN_OR_RETURN(x.weights_proj, w.Matrix("weights_proj.weight", Hi, D));
  FERRY_ASSIGN_OR_RETURN(x.gate, w.Matrix("index_kpool_compress_gate", Di, D));
  FERRY_ASSIGN_OR_RETURN(x.ape, w.Matrix("index_kpool_compress_ape", c.index_kpool, Di));
  return x;
}

void PooledIndexerPools(const float* ape, int64_t dim, int64_t kpool, int64_t first, int64_t end,
                        const std::function<const float*(int64_t)>& key_of,
                        const std::function<const float*(int64_t)>& gate_of,
                        const std::function<float*(int64_t)>& pool_of) {
  const int64_t Di = dim, kp = kpool;
  std::vector<float> logit(static_cast<size_t>(kp));
  std::vector<const float*> prow(static_cast<size_t>(kp)), grow(static_cast<size_t>(kp));
  for (int64_t p = first; p < end; ++p) {
    float* key = pool_of(p);
    for (int64_t j = 0; j < kp; ++j) {
      prow[j] = key_of(p * kp + j);
      grow[j] = gate_of(p * kp + j);
    }
    for (int64_t ch = 0; ch < Di; ++ch) {
      float mx = -INFINITY;
      for (int64_t j = 0; j < kp; ++j) {
        logit[j] = grow[j][ch] + ape[j * Di + ch];
        mx = std::fmax(mx, logit[j]);
      }
      float den = 0.0f;
      for (int64_t j = 0; j < kp; ++j) den += (logit[j] = std::exp(logit[j] - mx));
      float acc = 0.0f;
      for (int64_t j = 0; j < kp; ++j) acc += logit[j] / den * prow[j][ch];
      key[ch] = acc;
    }
  }
}

}  // namespace ferry::model
