// The kernels of kernels/cuda/ops.h under one name per op, overloaded on the activation type:
// uint16_t (bf16 bits, the serving precision) or float (the verification precision). The CUDA
// model's forward is written once, as a template over that type, against these.
// Internal to model/cuda.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <type_traits>

#include "absl/status/status.h"
#include "common/status.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/ops.h"
#include "model/cuda/device_pages.h"

namespace ferry::model::cuda::act {

namespace cu = ferry::kernels::cuda;
using bf16 = uint16_t;

template <typename T>
struct CacheOf;
template <>
struct CacheOf<bf16> {
  using type = cu::PagedCacheBf16;
};
template <>
struct CacheOf<float> {
  using type = cu::PagedCacheF32;
};
template <typename T>
using Cache = typename CacheOf<T>::type;

// Region `region` of a device arena as a paged cache of T rows through `table`.
template <typename T>
Cache<T> CacheView(const PageArena& arena, int64_t region, const int32_t* table, int64_t table_stride) {
  if constexpr (sizeof(T) == 4) {
    return ViewF32(arena, region, table, table_stride);
  } else {
    return View(arena, region, table, table_stride);
  }
}

inline absl::Status Linear(const bf16* x, int64_t rows, int64_t in, const bf16* w, int64_t out, bf16* y) {
  return cu::LinearBf16(x, rows, in, w, out, y);
}
inline absl::Status Linear(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y) {
  return cu::LinearF32(x, rows, in, w, out, 1.0f, y);
}
// Products of one row count, y_i = x_i · w_i^T: one launch for a decode-sized bf16 batch
// (cu::LinearBf16Many, each result what Linear gives it alone), else one Linear each.
template <typename T>
struct LinearProblem {
  const T* x;
  int64_t in;
  const T* w;
  int64_t out;
  T* y;
};
inline absl::Status LinearMany(std::span<const LinearProblem<bf16>> p, int64_t rows) {
  if (p.size() > static_cast<size_t>(cu::kLinearManyMax)) return absl::InvalidArgumentError("LinearMany: too many");
  cu::LinearProblemBf16 all[cu::kLinearManyMax];
  for (size_t i = 0; i < p.size(); ++i) all[i] = {p[i].x, p[i].in, p[i].w, p[i].out, p[i].y};
  return cu::LinearBf16Many(all, static_cast<int64_t>(p.size()), rows);
}
inline absl::Status LinearMany(std::span<const LinearProblem<float>> p, int64_t rows) {
  for (const LinearProblem<float>& q : p) FERRY_RETURN_IF_ERROR(Linear(q.x, rows, q.in, q.w, q.out, q.y));
  return absl::OkStatus();
}
inline absl::Status LinearMany(std::initializer_list<LinearProblem<bf16>> p, int64_t rows) {
  return LinearMany(std::span<const LinearProblem<bf16>>(p.begin(), p.size()), rows);
}
inline absl::Status LinearMany(std::initializer_list<LinearProblem<float>> p, int64_t rows) {
  return LinearMany(std::span<const LinearProblem<float>>(p.begin(), p.size()), rows);
}
// Float32 output whatever the activations (router logits, indexer head weights, lm_head).
inline absl::Status LinearToF32(const bf16* x, int64_t rows, int64_t in, const bf16* w, int64_t out, float alpha,
                                float* y) {
  return cu::LinearBf16F32(x, rows, in, w, out, alpha, y);
}
inline absl::Status LinearToF32(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float alpha,
                                float* y) {
  return cu::LinearF32(x, rows, in, w, out, alpha, y);
}
inline absl::Status BatchedLinear(const bf16* x, int64_t x_batch, int64_t x_row, int64_t rows, int64_t in,
                                  const bf16* w, int64_t w_batch, int64_t out, bf16* y, int64_t y_batch, int64_t y_row,
                                  int64_t batch) {
  return cu::BatchedLinearBf16(x, x_batch, x_row, rows, in, w, w_batch, out, y, y_batch, y_row, batch);
}
inline absl::Status BatchedLinear(const float* x, int64_t x_batch, int64_t x_row, int64_t rows, int64_t in,
                                  const float* w, int64_t w_batch, int64_t out, float* y, int64_t y_batch,
                                  int64_t y_row, int64_t batch) {
  return cu::BatchedLinearF32(x, x_batch, x_row, rows, in, w, w_batch, out, y, y_batch, y_row, batch);
}
inline absl::Status RmsNorm(const bf16* x, int64_t rows, int64_t dim, const bf16* w, float eps, bf16* y) {
  return cu::RmsNormBf16(x, rows, dim, w, eps, y);
}
inline absl::Status RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y) {
  return cu::RmsNormF32(x, rows, dim, w, eps, y);
}
// mHC's stream mix u, then normed into the activation type (cu::MhcMixInNorm*: one launch).
inline absl::Status MixInNorm(const float* h, const float* pre, int64_t rows, int64_t streams, int64_t dim,
                              const bf16* w, float eps, float* u, bf16* y) {
  return cu::MhcMixInNormToBf16(h, pre, rows, streams, dim, w, eps, u, y);
}
inline absl::Status MixInNorm(const float* h, const float* pre, int64_t rows, int64_t streams, int64_t dim,
                              const float* w, float eps, float* u, float* y) {
  return cu::MhcMixInNormF32(h, pre, rows, streams, dim, w, eps, u, y);
}
// An mHC site's Sinkhorn, then MixInNorm with its pre (cu::MhcSinkhornMixInNorm*: one launch).
inline absl::Status SinkhornMixInNorm(const float* m, const float* scale, const float* base, float hc_eps,
                                      int64_t iters, float* pre, float* post, float* comb, const float* h,
                                      int64_t rows, int64_t streams, int64_t dim, const bf16* w, float eps, float* u,
                                      bf16* y) {
  return cu::MhcSinkhornMixInNormToBf16(m, scale, base, hc_eps, iters, pre, post, comb, h, rows, streams, dim, w, eps,
                                        u, y);
}
inline absl::Status SinkhornMixInNorm(const float* m, const float* scale, const float* base, float hc_eps,
                                      int64_t iters, float* pre, float* post, float* comb, const float* h,
                                      int64_t rows, int64_t streams, int64_t dim, const float* w, float eps, float* u,
                                      float* y) {
  return cu::MhcSinkhornMixInNormF32(m, scale, base, hc_eps, iters, pre, post, comb, h, rows, streams, dim, w, eps, u,
                                     y);
}
// The float32 residual stream normed into the activation type.
inline absl::Status NormResidual(const float* x, int64_t rows, int64_t dim, const bf16* w, float eps, bf16* y) {
  return cu::RmsNormF32ToBf16(x, rows, dim, w, eps, y);
}
inline absl::Status NormResidual(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y) {
  return cu::RmsNormF32(x, rows, dim, w, eps, y);
}
inline absl::Status LayerNorm(const bf16* x, int64_t rows, int64_t dim, const bf16* w, const bf16* b, float eps,
                              bf16* y) {
  return cu::LayerNormBf16(x, rows, dim, w, b, eps, y);
}
inline absl::Status LayerNorm(const float* x, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
                              float* y) {
  return cu::LayerNormF32(x, rows, dim, w, b, eps, y);
}
inline absl::Status Rope(bf16* x, int64_t rows, int64_t heads, int64_t row_stride, int64_t head_stride, int64_t offset,
                         int64_t dim, const int64_t* pos, const float* inv_freq) {
  return cu::RopeInterleavedBf16(x, rows, heads, row_stride, head_stride, offset, dim, pos, inv_freq);
}
inline absl::Status Rope(float* x, int64_t rows, int64_t heads, int64_t row_stride, int64_t head_stride,
                         int64_t offset, int64_t dim, const int64_t* pos, const float* inv_freq) {
  return cu::RopeInterleavedF32(x, rows, heads, row_stride, head_stride, offset, dim, pos, inv_freq);
}
inline absl::Status SwiGlu(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int64_t in_stride,
                           float limit, bf16* out) {
  return cu::SwiGluBf16(gate, up, rows, cols, in_stride, limit, out);
}
inline absl::Status SwiGlu(const float* gate, const float* up, int64_t rows, int64_t cols, int64_t in_stride,
                           float limit, float* out) {
  return cu::SwiGluF32(gate, up, rows, cols, in_stride, limit, out);
}
inline absl::Status CopyRows(const bf16* src, int64_t src_stride, const int32_t* src_idx, bf16* dst,
                             int64_t dst_stride, const int32_t* dst_idx, int64_t rows, int64_t cols) {
  return cu::CopyRowsBf16(src, src_stride, src_idx, dst, dst_stride, dst_idx, rows, cols);
}
inline absl::Status CopyRows(const float* src, int64_t src_stride, const int32_t* src_idx, float* dst,
                             int64_t dst_stride, const int32_t* dst_idx, int64_t rows, int64_t cols) {
  return cu::CopyRowsF32(src, src_stride, src_idx, dst, dst_stride, dst_idx, rows, cols);
}
inline absl::Status WritePaged(const bf16* src, int64_t rows, int64_t src_stride, int64_t cols, int64_t col_offset,
                               const int64_t* pos, const cu::PagedCacheBf16& cache) {
  return cu::WritePagedRowsBf16(src, rows, src_stride, cols, col_offset, pos, cache);
}
inline absl::Status WritePaged(const float* src, int64_t rows, int64_t src_stride, int64_t cols, int64_t col_offset,
                               const int64_t* pos, const cu::PagedCacheF32& cache) {
  return cu::WritePagedRowsF32(src, rows, src_stride, cols, col_offset, pos, cache);
}
inline absl::Status AddResidual(float* x, const bf16* y, int64_t n) { return cu::AddBf16ToF32(x, y, n); }
inline absl::Status AddResidual(float* x, const float* y, int64_t n) { return cu::AddF32(x, y, n); }
inline absl::Status MoeCombine(const bf16* slots, const float* weights, const bf16* shared, int64_t rows,
                               int64_t top_k, int64_t dim, float* x, bool assign = false) {
  return cu::MoeCombineF32(slots, weights, shared, rows, top_k, dim, x, nullptr, assign);
}
inline absl::Status MoeCombine(const float* slots, const float* weights, const float* shared, int64_t rows,
                               int64_t top_k, int64_t dim, float* x, bool assign = false) {
  return cu::MoeCombineF32Slots(slots, weights, shared, rows, top_k, dim, x, nullptr, assign);
}
// The decode attention's workspace for a step of `rows` query rows: decode-sized steps only (up to
// 64 rows: 34 MB at 64 heads; none at 32 heads or fewer), bf16 only (the float32 op has no
// persistent form). Prefill-sized steps keep the cluster form: its CTAs are scheduled by the
// hardware, while the persistent form splits the items statically, which rows of unequal
// selection lengths (a prompt's first 2048 positions) would unbalance (not measured).
inline constexpr int64_t kMlaWorkspaceMaxRows = 64;
template <typename T>
int64_t MlaWorkspaceBytes(int64_t rows, int64_t heads) {
  if constexpr (std::is_same_v<T, bf16>) {
    return rows <= kMlaWorkspaceMaxRows ? cu::MlaDecodeWorkspaceBytes(rows, heads) : 0;
  }
  return 0;
}
inline absl::Status MlaDecode(const bf16* q_abs, const bf16* q_pe, int64_t rows, int64_t heads, int64_t latent,
                              int64_t rope, const cu::PagedCacheBf16& cache, const int32_t* sel,
                              const int32_t* offsets, float scale, bf16* out, void* workspace,
                              int64_t workspace_bytes) {
  return cu::MlaDecodeAttention(q_abs, q_pe, rows, heads, latent, rope, cache, sel, offsets, scale, out, nullptr,
                                workspace, workspace_bytes);
}
// (No workspace in float32: the arguments are taken and not used.)
inline absl::Status MlaDecode(const float* q_abs, const float* q_pe, int64_t rows, int64_t heads, int64_t latent,
                              int64_t rope, const cu::PagedCacheF32& cache, const int32_t* sel,
                              const int32_t* offsets, float scale, float* out, void* /*workspace*/,
                              int64_t /*workspace_bytes*/) {
  return cu::MlaDecodeAttentionF32(q_abs, q_pe, rows, heads, latent, rope, cache, sel, offsets, scale, out);
}
inline absl::Status IndexerScores(const bf16* qi, const float* w, int64_t rows, int64_t heads, int64_t dim,
                                  const cu::PagedCacheBf16& keys, const int32_t* n_keys, float scale, float* scores,
                                  int64_t stride) {
  return cu::IndexerScores(qi, w, rows, heads, dim, keys, n_keys, scale, scores, stride);
}
inline absl::Status IndexerScores(const float* qi, const float* w, int64_t rows, int64_t heads, int64_t dim,
                                  const cu::PagedCacheF32& keys, const int32_t* n_keys, float scale, float* scores,
                                  int64_t stride) {
  return cu::IndexerScoresF32(qi, w, rows, heads, dim, keys, n_keys, scale, scores, stride);
}
// glm5_next.
inline absl::Status MhcMixOut(float* h, const float* post, const float* comb, const bf16* y, int64_t rows,
                              int64_t streams, int64_t dim) {
  return cu::MhcMixOutBf16(h, post, comb, y, rows, streams, dim);
}
inline absl::Status MhcMixOut(float* h, const float* post, const float* comb, const float* y, int64_t rows,
                              int64_t streams, int64_t dim) {
  return cu::MhcMixOutF32(h, post, comb, y, rows, streams, dim);
}
// q, k and v's convolutions in one launch (tails one after another from `tail`).
inline absl::Status KdaConvSiluQkv(const bf16* const x[3], int64_t n, int64_t channels, int64_t kernel,
                                   const float* const weight[3], float* tail, float* const y[3]) {
  return cu::KdaConvSiluQkvBf16(x, n, channels, kernel, weight, tail, y);
}
inline absl::Status KdaConvSiluQkv(const float* const x[3], int64_t n, int64_t channels, int64_t kernel,
                                   const float* const weight[3], float* tail, float* const y[3]) {
  return cu::KdaConvSiluQkvF32(x, n, channels, kernel, weight, tail, y);
}
inline absl::Status KdaDecay(const bf16* f, int64_t rows, int64_t heads, int64_t d, const float* a_log,
                             const float* dt_bias, float lower_bound, float* g) {
  return cu::KdaDecayBf16(f, rows, heads, d, a_log, dt_bias, lower_bound, g);
}
inline absl::Status KdaDecay(const float* f, int64_t rows, int64_t heads, int64_t d, const float* a_log,
                             const float* dt_bias, float lower_bound, float* g) {
  return cu::KdaDecayF32(f, rows, heads, d, a_log, dt_bias, lower_bound, g);
}
inline absl::Status KdaOutput(const float* o, const bf16* gate, int64_t rows, int64_t heads, int64_t d,
                              const float* o_norm, float eps, bf16* out) {
  return cu::KdaOutputBf16(o, gate, rows, heads, d, o_norm, eps, out);
}
inline absl::Status KdaOutput(const float* o, const float* gate, int64_t rows, int64_t heads, int64_t d,
                              const float* o_norm, float eps, float* out) {
  return cu::KdaOutputF32(o, gate, rows, heads, d, o_norm, eps, out);
}
inline absl::Status PooledKeys(const cu::PagedCacheBf16& keys, const cu::PagedCacheBf16& gates,
                               const cu::PagedCacheBf16& pools, int64_t row, int64_t p0, int64_t p1, int64_t kpool,
                               const float* ape) {
  return cu::PooledKeysBf16(keys, gates, pools, row, p0, p1, kpool, ape);
}
inline absl::Status PooledKeys(const cu::PagedCacheF32& keys, const cu::PagedCacheF32& gates,
                               const cu::PagedCacheF32& pools, int64_t row, int64_t p0, int64_t p1, int64_t kpool,
                               const float* ape) {
  return cu::PooledKeysF32(keys, gates, pools, row, p0, p1, kpool, ape);
}

// x [rows, dim] float32 = table[ids[r]] (ids checked on the host before).
inline absl::Status Embed(const bf16* table, int64_t vocab, int64_t dim, const int32_t* ids, int64_t rows, float* x) {
  return cu::EmbeddingGatherF32(table, vocab, dim, ids, rows, x);
}
inline absl::Status Embed(const float* table, int64_t vocab, int64_t dim, const int32_t* ids, int64_t rows, float* x) {
  return cu::CopyRowsF32(table, dim, ids, x, dim, nullptr, rows, dim);
}
inline absl::Status ToF32(const bf16* x, int64_t n, float* y) { return cu::CastBf16ToF32(x, n, y); }
inline absl::Status ToF32(const float* x, int64_t n, float* y) {
  return cu::CopyDeviceToDevice(y, x, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace ferry::model::cuda::act
