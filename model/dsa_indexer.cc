#include "model/dsa_indexer.h"

#include <cmath>
#include <numeric>

#include "common/status.h"
#include "kernels/cpu/ops.h"
#include "model/indexer_queries.h"

namespace ferry::model {

namespace cpu = ferry::kernels::cpu;

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

void DsaIndexerKeys(const DsaIndexerWeights& w, const ModelConfig& c, const float* a, int64_t rows,
                    const int64_t* pos, const float* inv_freq, float* keys) {
  const int64_t Di = c.index_head_dim, P = c.qk_rope_head_dim;
  cpu::Linear(a, rows, c.hidden_size, w.wk.ptr(), Di, keys);
  cpu::LayerNorm(keys, rows, Di, w.k_norm_w.ptr(), w.k_norm_b.ptr(), 1e-6f, keys);
  if (P > 0) {
    for (int64_t r = 0; r < rows; ++r) cpu::RopeInterleaved(keys + r * Di, P, pos[r], inv_freq);
  }
}

void DsaIndexerSelect(const DsaIndexerWeights& w, const ModelConfig& c, const float* a, const float* cq,
                      int64_t rows, const int64_t* pos, const float* inv_freq,
                      const RowOf& key_of, std::vector<std::vector<int32_t>>* sel) {
  const int64_t Hi = c.index_n_heads, Di = c.index_head_dim, P = c.qk_rope_head_dim;
  sel->assign(static_cast<size_t>(rows), {});
  // Rows that see index_topk or fewer keys attend densely; only the others need scores.
  std::vector<int64_t> sparse;
  for (int64_t r = 0; r < rows; ++r) {
    if (pos[r] + 1 <= c.index_topk) {
      (*sel)[r].resize(static_cast<size_t>(pos[r] + 1));
      std::iota((*sel)[r].begin(), (*sel)[r].end(), 0);
    } else {
      sparse.push_back(r);
    }
  }
  if (sparse.empty()) return;
  const int64_t n = static_cast<int64_t>(sparse.size());
  IndexerQueries iq = ComputeIndexerQueries(w.wq_b, w.weights_proj, c, a, cq, sparse);
  std::vector<float>& qi = iq.qi;
  const std::vector<float>& hw = iq.w;
  const float dot_scale = 1.0f / std::sqrt(static_cast<float>(Di));
  std::vector<float> scores, keys;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t r = sparse[j];
    float* q = qi.data() + j * Hi * Di;
    if (P > 0) {
      for (int64_t h = 0; h < Hi; ++h) cpu::RopeInterleaved(q + h * Di, P, pos[r], inv_freq);
    }
    scores.resize(static_cast<size_t>(pos[r] + 1));
    keys.resize(static_cast<size_t>((pos[r] + 1) * Di));
    for (int64_t t = 0; t <= pos[r]; ++t) std::copy_n(key_of(r, t), Di, keys.data() + t * Di);
    cpu::IndexerScoresRow(q, hw.data() + j * Hi, Hi, Di, keys.data(), Di, pos[r] + 1, dot_scale,
                          scores.data());
    (*sel)[r] = cpu::TopKIndices(scores.data(), pos[r] + 1, c.index_topk);
  }
}

}  // namespace ferry::model
