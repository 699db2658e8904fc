// CPU reference ops, float32, row-major. These are the oracle every CUDA kernel is checked
// against (kernels/cuda), so they favour clarity over speed.
//
// Determinism contract: every op computes each output row from its own inputs with a fixed
// summation order, independent of how many other rows are in the call and of the thread count.
// That is what makes a batched step give bit-identical rows to the same rows run alone.
//
// Unless stated otherwise: pointers are non-null when the count they go with is > 0; inputs and
// outputs do not alias; an op over zero rows does nothing.
#pragma once

#include <cstdint>
#include <vector>

namespace ferry::kernels::cpu {

// sum_i a[i] * b[i] over n elements: eight interleaved partial sums (lane j takes i % 8 == j),
// combined as ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)). Every dot product in this file uses it.
float Dot(const float* a, const float* b, int64_t n);

// y[T, N] = x[T, K] · w[N, K]^T (w is a PyTorch Linear weight: one row per output feature).
// REQUIRES: y does not alias x or w.
void Linear(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y);

// The dynamic activation quantization of the FP8 releases (W8A8, as transformers' fine-grained
// FP8 act_quant): for each row and group g of 128 columns (the last one shorter when in % 128),
// s = max |x| / 448 and q = E4M3(x / s) (nearest even, saturating); a group of zeros gets s = 0
// and q = 0 (transformers would make the row NaN there and then zero). q [rows, in] row-major;
// s[g * scale_stride + row] (groups major, so a step of 128 columns reads its rows' scales in a
// row). REQUIRES: scale_stride >= rows.
void QuantizeActFp8(const float* x, int64_t rows, int64_t in, uint8_t* q, float* s, int64_t scale_stride);

// y[T, N] = sum over 128-column groups g of (sum_{k in g} qx[t, k] qw[n, k]) * sx[g][t] * sw[n / 128][g]:
// the W8A8 block-FP8 product of the FP8 releases (transformers' w8a8_block_fp8_matmul), qx and
// sx from QuantizeActFp8 (scale stride `rows`), qw [N, K] E4M3 row-major with its 128 x 128 block
// scales sw [ceil(N / 128), ceil(K / 128)]. The inner sums in float32 in column order.
void LinearW8A8(const uint8_t* qx, const float* sx, int64_t rows, int64_t in, const uint8_t* qw, const float* sw,
                int64_t out, float* y);

// y[T, D] = x * rsqrt(mean(x^2) + eps) * w, per row. y may alias x.
void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y);

// y[T, D] = (x - mean) * rsqrt(var + eps) * w + b, per row, biased variance. y may alias x.
void LayerNorm(const float* x, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
               float* y);

// inv_freq[i] = 1 / theta^(2i / dim) for i < dim / 2, in float32 as transformers computes it.
// REQUIRES: dim even.
std::vector<float> RopeInvFreq(int64_t dim, double theta);

// Interleaved RoPE in place on one vector x[dim] at position `pos`: each pair (x[2i], x[2i+1])
// is rotated by angle pos * inv_freq[i] (angle, cos and sin in float32).
// REQUIRES: inv_freq has dim / 2 entries.
void RopeInterleaved(float* x, int64_t dim, int64_t pos, const float* inv_freq);

// out[i] = silu(min(gate[i], L)) * clamp(up[i], -L, L), or silu(gate) * up when limit == 0.
void SwiGlu(const float* gate, const float* up, int64_t n, float limit, float* out);

// Absorbed MLA attention of one query row over a selected set of cached latent rows.
//   q_abs [heads, latent]: W_UK^T q_nope per head; q_pe [heads, rope] (rope may be 0).
//   cache: row s starts at cache + s * stride and holds [c (latent) | k_pe (rope)].
//   sel [n_sel]: the token ids to attend, in the order they are summed (callers pass them
//   ascending). REQUIRES n_sel >= 1 and every id addresses a written row.
//   score(h, s) = (q_abs_h · c_s + q_pe_h · k_pe_s) * scale; softmax over sel in float32.
//   out [heads, latent] = sum_s p(h, s) c_s (the latent output; W_UV is applied by the caller).
//   scratch: at least n_sel floats.
void MlaAttendRow(const float* q_abs, const float* q_pe, int64_t heads, int64_t latent, int64_t rope,
                  const float* cache, int64_t stride, const int32_t* sel, int64_t n_sel, float scale,
                  float* out, float* scratch);

// Lightning-indexer scores of one query row against keys 0..n_keys-1:
//   scores[s] = sum_h w[h] * ReLU(scale * qi_h · k_s), heads summed in ascending order.
//   qi [heads, dim], w [heads], keys: row s at keys + s * stride, dim wide.
void IndexerScoresRow(const float* qi, const float* w, int64_t heads, int64_t dim, const float* keys,
                      int64_t stride, int64_t n_keys, float scale, float* scores);

// The k largest of scores[0..n), ties toward the lower index (so exact-zero scores prefer older
// tokens), returned as indices sorted ascending. k is clamped to n. NaN ranks below everything.
std::vector<int32_t> TopKIndices(const float* scores, int64_t n, int64_t k);

// Sigmoid routing of one token (DeepSeek-V3 / GLM-5 style).
struct RoutingParams {
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t n_group = 1;     // experts split into n_group equal groups
  int64_t topk_group = 1;  // groups kept, ranked by the sum of their top-2 biased scores
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};
// logits [n_experts] (float32 router output), bias [n_experts] (selection only, may be null).
// Writes experts [top_k] ascending and their weights [top_k]:
//   s = sigmoid(logits); pick top_k of s + bias within the kept groups (ties to the lower id);
//   w = s[e] / (sum s[picked] + 1e-20) when norm_topk_prob, then * routed_scaling_factor.
void RouteRow(const float* logits, const float* bias, const RoutingParams& p, int32_t* experts,
              float* weights);

// Index of the largest logit, ties toward the lower index; NaN never wins. REQUIRES n >= 1.
int32_t ArgMax(const float* logits, int64_t n);

}  // namespace ferry::kernels::cpu
