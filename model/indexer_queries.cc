#include "model/indexer_queries.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"

namespace ferry::model {

IndexerQueries ComputeIndexerQueries(const Weight& wq_b, const Weight& weights_proj, const ModelConfig& c,
                                     const float* a, const float* cq, const std::vector<int64_t>& rows) {
  const int64_t n = static_cast<int64_t>(rows.size()), Hi = c.index_n_heads, Di = c.index_head_dim,
                D = c.hidden_size, QL = c.q_lora_rank;
  std::vector<float> a_s(static_cast<size_t>(n * D)), cq_s(static_cast<size_t>(n * QL));
  for (int64_t j = 0; j < n; ++j) {
    std::copy_n(a + rows[j] * D, D, a_s.data() + j * D);
    std::copy_n(cq + rows[j] * QL, QL, cq_s.data() + j * QL);
  }
  IndexerQueries q;
  q.qi.resize(static_cast<size_t>(n * Hi * Di));
  q.w.resize(static_cast<size_t>(n * Hi));
  kernels::cpu::Linear(cq_s.data(), n, QL, wq_b.ptr(), Hi * Di, q.qi.data());
  kernels::cpu::Linear(a_s.data(), n, D, weights_proj.ptr(), Hi, q.w.data());
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(Hi));
  for (float& v : q.w) v *= head_scale;
  return q;
}

}  // namespace ferry::model
