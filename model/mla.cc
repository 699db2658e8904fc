#include "model/mla.h"

#include <algorithm>
#include <cmath>

#include "common/status.h"
#include "kernels/cpu/ops.h"

namespace ferry::model {

namespace cpu = ferry::kernels::cpu;

absl::StatusOr<MlaWeights> LoadMla(const WeightLoader& w, const ModelConfig& c, float norm_eps,
                                   const TensorParallel& tp) {
  FERRY_RETURN_IF_ERROR(CheckDivisible("num_attention_heads", c.num_heads, tp.world));
  const int64_t H = tp.Local(c.num_heads), h0 = tp.Begin(c.num_heads), L = c.kv_lora_rank, N = c.qk_nope_head_dim, P = c.qk_rope_head_dim,
                V = c.v_head_dim;
  MlaWeights m;
  m.heads = H;
  m.norm_eps = norm_eps;
  FERRY_ASSIGN_OR_RETURN(m.q_a, w.Matrix("q_a_proj.weight", c.q_lora_rank, c.hidden_size));
  FERRY_ASSIGN_OR_RETURN(m.q_a_norm, w.Vector("q_a_layernorm.weight", c.q_lora_rank));
  const int64_t HG = c.num_heads;  // the checkpoint's (global) head count
  FERRY_ASSIGN_OR_RETURN(m.q_b, w.Matrix("q_b_proj.weight", HG * (N + P), c.q_lora_rank,
                                         Slice{h0 * (N + P), (h0 + H) * (N + P), 0, -1}));
  FERRY_ASSIGN_OR_RETURN(m.kv_a, w.Matrix("kv_a_proj_with_mqa.weight", L + P, c.hidden_size));
  FERRY_ASSIGN_OR_RETURN(m.kv_a_norm, w.Vector("kv_a_layernorm.weight", L));
  FERRY_ASSIGN_OR_RETURN(Weight kv_b, w.Matrix("kv_b_proj.weight", HG * (N + V), L,
                                                Slice{h0 * (N + V), (h0 + H) * (N + V), 0, -1}));
  FERRY_ASSIGN_OR_RETURN(m.o_proj, w.Matrix("o_proj.weight", c.hidden_size, HG * V,
                                            Slice{0, -1, h0 * V, (h0 + H) * V}));
  // Split kv_b per head into W_UK (transposed, so q_abs is a Linear over q_nope) and W_UV.
  m.w_uk_t = Weight{std::vector<float>(static_cast<size_t>(H * L * N)), H * L, N};
  m.w_uv = Weight{std::vector<float>(static_cast<size_t>(H * V * L)), H * V, L};
  for (int64_t h = 0; h < H; ++h) {
    const float* head = kv_b.ptr() + h * (N + V) * L;
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t l = 0; l < L; ++l) m.w_uk_t.data[(h * L + l) * N + i] = head[i * L + l];
    }
    std::copy_n(head + N * L, V * L, m.w_uv.data.data() + h * V * L);
  }
  return m;
}

void MlaProject(const MlaWeights& w, const ModelConfig& c, const float* a, int64_t rows,
                const int64_t* pos, const float* inv_freq, MlaProjections* out) {
  const int64_t H = w.heads, L = c.kv_lora_rank, N = c.qk_nope_head_dim, P = c.qk_rope_head_dim,
                QL = c.q_lora_rank, D = c.hidden_size;
  out->cq.resize(static_cast<size_t>(rows * QL));
  cpu::Linear(a, rows, D, w.q_a.ptr(), QL, out->cq.data());
  cpu::RmsNorm(out->cq.data(), rows, QL, w.q_a_norm.ptr(), w.norm_eps, out->cq.data());

  std::vector<float> q(static_cast<size_t>(rows * H * (N + P)));
  cpu::Linear(out->cq.data(), rows, QL, w.q_b.ptr(), H * (N + P), q.data());

  out->cache_rows.resize(static_cast<size_t>(rows * (L + P)));
  cpu::Linear(a, rows, D, w.kv_a.ptr(), L + P, out->cache_rows.data());
  for (int64_t r = 0; r < rows; ++r) {
    float* row = out->cache_rows.data() + r * (L + P);
    cpu::RmsNorm(row, 1, L, w.kv_a_norm.ptr(), w.norm_eps, row);
    if (P > 0) cpu::RopeInterleaved(row + L, P, pos[r], inv_freq);
  }

  out->q_abs.resize(static_cast<size_t>(rows * H * L));
  out->q_pe.resize(static_cast<size_t>(rows * H * P));
  std::vector<float> q_nope(static_cast<size_t>(rows * N)), q_abs_h(static_cast<size_t>(rows * L));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* qh = q.data() + (r * H + h) * (N + P);
      std::copy_n(qh, N, q_nope.data() + r * N);
      float* pe = out->q_pe.data() + (r * H + h) * P;
      std::copy_n(qh + N, P, pe);
      if (P > 0) cpu::RopeInterleaved(pe, P, pos[r], inv_freq);
    }
    cpu::Linear(q_nope.data(), rows, N, w.w_uk_t.ptr() + h * L * N, L, q_abs_h.data());
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(q_abs_h.data() + r * L, L, out->q_abs.data() + (r * H + h) * L);
    }
  }
}

void MlaAttendLatent(const ModelConfig& c, int64_t heads, const float* q_abs, const float* q_pe,
                     std::span<const int64_t> rows_idx, const RowOf& latent_of,
                     const std::vector<std::vector<int32_t>>& sel, float* o_lat) {
  const int64_t H = heads, L = c.kv_lora_rank, N = c.qk_nope_head_dim, P = c.qk_rope_head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(N + P));
  std::vector<float> scratch, gathered;
  std::vector<int32_t> order;
  for (size_t i = 0; i < rows_idx.size(); ++i) {
    const int64_t r = rows_idx[i];
    // Gather the selected rows (from whatever pages hold them) in selection order; the op then
    // sees exactly the values and order of a contiguous cache.
    const int64_t n = static_cast<int64_t>(sel[r].size());
    gathered.resize(static_cast<size_t>(n * (L + P)));
    order.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      std::copy_n(latent_of(r, sel[r][j]), L + P, gathered.data() + j * (L + P));
      order[j] = static_cast<int32_t>(j);
    }
    scratch.resize(static_cast<size_t>(n));
    const int64_t k = static_cast<int64_t>(i);
    cpu::MlaAttendRow(q_abs + k * H * L, q_pe + k * H * P, H, L, P, gathered.data(), L + P, order.data(), n, scale,
                      o_lat + k * H * L, scratch.data());
  }
}

void MlaOutput(const MlaWeights& w, const ModelConfig& c, const float* o_lat, int64_t rows, float* out) {
  const int64_t H = w.heads, L = c.kv_lora_rank, V = c.v_head_dim;
  std::vector<float> o_v(static_cast<size_t>(rows * H * V));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < H; ++h) {
      cpu::Linear(o_lat + (r * H + h) * L, 1, L, w.w_uv.ptr() + h * V * L, V, o_v.data() + (r * H + h) * V);
    }
  }
  cpu::Linear(o_v.data(), rows, H * V, w.o_proj.ptr(), c.hidden_size, out);
}

void MlaAttend(const MlaWeights& w, const ModelConfig& c, const MlaProjections& p, int64_t rows,
               const RowOf& latent_of, const std::vector<std::vector<int32_t>>& sel, float* out) {
  std::vector<int64_t> all(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) all[r] = r;
  std::vector<float> o_lat(static_cast<size_t>(rows * w.heads * c.kv_lora_rank));
  MlaAttendLatent(c, w.heads, p.q_abs.data(), p.q_pe.data(), all, latent_of, sel, o_lat.data());
  MlaOutput(w, c, o_lat.data(), rows, out);
}

}  // namespace ferry::model
