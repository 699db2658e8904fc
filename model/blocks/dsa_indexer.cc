#include "model/blocks/dsa_indexer.h"

#include "common/status.h"

namespace ferry::model {

absl::StatusOr<DsaIndexerWeights> LoadDsaIndexer(const WeightLoader& w, const ModelConfig& c) {
  DsaIndexerWeights x;
  const int64_t Hi = c.index_n_heads, Di = c.index_head_dim;
  FERRY_ASSIGN_OR_RETURN(x.wq_b, w.Matrix("wq_b.weight", Hi * Di, c.q_lora_rank));
  FERRY_ASSIGN_OR_RETURN(x.wk, w.Matrix("wk.weight", Di, c.hidden_size));
  FERRY_ASSIGN_OR_RETURN(x.k_norm_w, w.Vector("k_norm.weight", Di));
  FERRY_ASSIGN_OR_RETURN(x.k_norm_b, w.Vector("k_norm.bias", Di));
  FERRY_ASSIGN_OR_RETURN(x.weights_proj, w.Matrix("weights_proj.weight", Hi, c.hidden_size));
  return x;
}

}  // namespace ferry::model
