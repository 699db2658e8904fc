#include "model/pooled_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/status.h"
#include "kernels/cpu/ops.h"
#include "model/indexer_queries.h"

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

void PooledIndexerRows(const PooledIndexerWeights& w, const ModelConfig& c, const float* a, int64_t rows,
                       float* keys, float* gates) {
  const int64_t Di = c.index_head_dim, D = c.hidden_size;
  cpu::Linear(a, rows, D, w.wk.ptr(), Di, keys);
  cpu::LayerNorm(keys, rows, Di, w.k_norm_w.ptr(), w.k_norm_b.ptr(), 1e-6f, keys);
  cpu::Linear(a, rows, D, w.gate.ptr(), Di, gates);
}

void PooledIndexerPools(const PooledIndexerWeights& w, const ModelConfig& c, int64_t first, int64_t end,
                        const std::function<const float*(int64_t)>& key_of,
                        const std::function<const float*(int64_t)>& gate_of,
                        const std::function<float*(int64_t)>& pool_of) {
  const int64_t Di = c.index_head_dim, kp = c.index_kpool;
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
        logit[j] = grow[j][ch] + w.ape.data[j * Di + ch];
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

void PooledIndexerSelect(const PooledIndexerWeights& w, const ModelConfig& c, const float* a, const float* cq,
                         int64_t rows, const int64_t* pos, const std::function<const float*(int64_t, int64_t)>& pool_of,
                         std::vector<std::vector<int32_t>>* sel) {
  const int64_t Hi = c.index_n_heads, Di = c.index_head_dim, kp = c.index_kpool;
  const int64_t keep = c.index_topk / kp;
  sel->assign(static_cast<size_t>(rows), {});
  std::vector<int64_t> sparse;
  for (int64_t r = 0; r < rows; ++r) {
    if ((pos[r] + 1) / kp <= keep) {
      (*sel)[r].resize(static_cast<size_t>(pos[r] + 1));
      std::iota((*sel)[r].begin(), (*sel)[r].end(), 0);
    } else {
      sparse.push_back(r);
    }
  }
  if (sparse.empty()) return;
  const int64_t n = static_cast<int64_t>(sparse.size());
  const IndexerQueries iq = ComputeIndexerQueries(w.wq_b, w.weights_proj, c, a, cq, sparse);
  const std::vector<float>& qi = iq.qi;
  const std::vector<float>& hw = iq.w;
  const float dot_scale = 1.0f / std::sqrt(static_cast<float>(Di));
  std::vector<float> scores, keys;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t r = sparse[j];
    const int64_t pools = (pos[r] + 1) / kp;
    scores.resize(static_cast<size_t>(pools));
    keys.resize(static_cast<size_t>(pools * Di));
    for (int64_t p = 0; p < pools; ++p) std::copy_n(pool_of(r, p), Di, keys.data() + p * Di);
    cpu::IndexerScoresRow(qi.data() + j * Hi * Di, hw.data() + j * Hi, Hi, Di, keys.data(), Di, pools, dot_scale,
                          scores.data());
    std::vector<int32_t>& out = (*sel)[r];
    for (int32_t p : cpu::TopKIndices(scores.data(), pools, keep)) {
      for (int64_t i = 0; i < kp; ++i) out.push_back(static_cast<int32_t>(p * kp + i));
    }
    for (int64_t t = pools * kp; t <= pos[r]; ++t) out.push_back(static_cast<int32_t>(t));
  }
}

}  // namespace ferry::model
