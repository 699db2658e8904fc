// CUDA kernels, callable from plain C++ (this header needs no CUDA headers). Each op states its
// contract and names its CPU twin in kernels/cpu/ops.h, the reference the harness
// (tests/kernels/cuda_harness.cc, binary ferry-kernel-check) checks it against.
//
// Conventions: pointers are device pointers; bf16 values are stored as uint16_t bit patterns
// (__nv_bfloat16 on the device); accumulation is float32; `stream` is a cudaStream_t (nullptr =
// the default stream). Launch errors come back as absl::Status; kernels run asynchronously.
// A violated REQUIRES on a host-side value returns INVALID_ARGUMENT with the numbers and launches
// nothing; values that live on the device (ids, lengths, offsets, page tables) are checked by the
// kernel, which never reads out of bounds and writes what each op states (NaN or -1). Outputs
// alias no input unless an op says so; `rows == 0` does nothing (returns OK).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cpu/ops.h"  // cpu::RoutingParams (plain C++)
#include "kernels/sampler.h"

namespace ferry::kernels::cuda {

// Number of usable CUDA devices; 0 when there is no driver or device (never an error).
int DeviceCount();
// Makes device `index` this process's current device (cudaSetDevice): call it before any other
// CUDA work. INVALID_ARGUMENT naming the count when there is no such device.
absl::Status UseDevice(int index);
// The current device's index.
absl::StatusOr<int> CurrentDevice();
// "NVIDIA H200, sm_90, 139.8 GiB" for device `index`.
absl::StatusOr<std::string> DeviceName(int index);
// Free and total bytes of the current device's memory (cudaMemGetInfo), e.g. a worker's room for
// KV pages after its weights are loaded.
struct DeviceMemory {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
  // The GPU shares the host's memory (GB10, Jetson): free_bytes is then the host's free memory
  // without what the kernel would reclaim (the page cache of the checkpoint just read, for one).
  bool integrated = false;
};
absl::StatusOr<DeviceMemory> MemoryInfo();

// y[rows, dim] = x * rsqrt(mean(x^2) + eps) * w, per row, bf16 in and out, float32 inside.
// CPU twin: cpu::RmsNorm. y may alias x. REQUIRES: dim >= 1.
absl::Status RmsNormBf16(const uint16_t* x, int64_t rows, int64_t dim, const uint16_t* w, float eps,
                         uint16_t* y, void* stream = nullptr);

// y[rows, out] = x[rows, in] · w[out, in]^T (bf16 operands, float32 compute, bf16 result, no
// bias): GemvBf16 (gemv.h) where GemvApplies (a decode-sized batch), else cuBLAS (cublasGemmEx).
// w is a PyTorch Linear weight, one row per output feature; x, w and y are dense row-major. CPU
// twin: cpu::Linear.
// REQUIRES: in >= 1, out >= 1, rows, in and out <= INT32_MAX; y aliases neither x nor w.
// rows == 0 does nothing.
// Thread safety: each host thread keeps one cuBLAS handle per device, created on its first call
// on that device and destroyed when the thread exits; the call binds it to `stream`. Calls from
// different threads are independent. The summation order is GemvBf16's up to kGemvMaxRows rows
// and cuBLAS's above (not cpu::Dot's): a row's bits may differ between a batch of 4 and of 5.
absl::Status LinearBf16(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                        uint16_t* y, void* stream = nullptr);

// Interleaved RoPE in place on a strided slice of bf16 vectors, in float32 inside.
//   Element i (< dim) of the slice of (row r, head h) is
//     x[r * row_stride + h * head_stride + offset + i],
//   and each pair (2j, 2j + 1) is rotated by angle float(positions[r]) * inv_freq[j], the angle,
//   cosf/sinf and products rounded as in cpu::RopeInterleaved (then the result to bf16).
//   Elements outside the slices are not touched. Examples: MLA q [R, H, nope + rope]:
//   row_stride H * (nope + rope), head_stride nope + rope, offset nope, dim rope; the shared
//   k_pe in a [R, kv_lora + rope] row: heads 1, offset kv_lora; the indexer's [R, Hi, Di]:
//   offset 0 (RoPE on the first dims).
//   positions [rows] int64 (device), inv_freq [dim / 2] float32 (device, cpu::RopeInvFreq).
// REQUIRES: dim even and >= 2, offset >= 0, offset + dim <= head_stride when heads > 1, slices of
// different (row, head) disjoint. rows == 0 or heads == 0 does nothing.
absl::Status RopeInterleavedBf16(uint16_t* x, int64_t rows, int64_t heads, int64_t row_stride,
                                 int64_t head_stride, int64_t offset, int64_t dim, const int64_t* positions,
                                 const float* inv_freq, void* stream = nullptr);

// out[r, i] = silu(min(g, L)) * clamp(u, -L, L) with g = gate[r * in_stride + i],
// u = up[r * in_stride + i]; silu(g) * u when limit <= 0 (limit > 0 is glm5_next's swiglu_limit).
// out [rows, cols] dense bf16; float32 inside. CPU twin: cpu::SwiGlu (same fmin/fmax NaN rules).
// A fused gate_up projection [rows, 2 * cols] is gate = gu, up = gu + cols, in_stride = 2 * cols.
// out may alias gate or up only when in_stride == cols. REQUIRES: cols >= 1, in_stride >= cols.
absl::Status SwiGluBf16(const uint16_t* gate, const uint16_t* up, int64_t rows, int64_t cols,
                        int64_t in_stride, float limit, uint16_t* out, void* stream = nullptr);

// One layer's view of a paged cache of bf16 rows in one device arena (the layout of the KV
// pages, model/cache/paged_cache.h): n_pages pages, page_stride bf16 values apart; in each, this
// layer's page_rows rows of `width` values are contiguous from `arena`:
//     row (page p, slot i) is at arena + p * page_stride + i * width.
//   A layer-only arena has page_stride == page_rows * width; a page holding every layer's rows
//   passes arena = the layer's first row in page 0 and page_stride = the page's size.
//   page_table [query rows, table_stride] int32 (device): token t of query row r lives in page
//     page_table[r * table_stride + t / page_rows], slot t % page_rows. Query rows of one
//     conversation carry copies of its table (rows may repeat the same table).
// Invariants checked on the host: page_rows a power of two, width >= 1, page_stride >=
// page_rows * width, table_stride >= 1, n_pages >= 0. On the device, a token t < 0,
// t / page_rows >= table_stride, or a page id outside [0, n_pages) is never read; what the op
// then writes is stated per op.
struct PagedCacheBf16 {
  const uint16_t* arena = nullptr;
  int64_t n_pages = 0;
  int64_t page_rows = 0;
  int64_t page_stride = 0;
  int64_t width = 0;
  const int32_t* page_table = nullptr;
  int64_t table_stride = 0;
};

// Absorbed MLA decode attention of `rows` query rows over a paged latent cache.
//   q_abs [rows, heads, latent] bf16 (W_UK^T q_nope per head), q_pe [rows, heads, rope] bf16
//   (may be null when rope == 0). cache.width == latent + rope: a cached row is
//   [c (latent) | k_pe (rope)].
//   Selected tokens in CSR form (device): sel_offsets [rows + 1] int32; row r attends
//   sel[sel_offsets[r] .. sel_offsets[r + 1]) (int32 token ids of its conversation), summed in
//   that order (callers pass them ascending). Lengths may differ per row.
//   score(h, s) = (q_abs_h · c_s + q_pe_h · k_pe_s) * scale; softmax over the row's selection in
//   float32 (single-pass, running max); out [rows, heads, latent] bf16 = sum_s p(h, s) c_s. bf16
//   because its consumer, the per-head W_UV product, takes bf16, and the owner ships it back
//   at half the bytes of float32.
// CPU twin: cpu::MlaAttendRow per row over the rows gathered from the pages (rounding only: the
// tensor-core path rounds the probabilities to bf16 before the sum over the selection, and each
// CTA's partial sum to bf16 before the cluster merge).
// Batch invariance: a row's output bits depend only on its own inputs (q, selection, pages), never
// on `rows` or the other rows of the launch. Two paths (their rounding differs):
//   tensor cores, chosen when all of (MlaTcApplies, mla_decode_tc.h): latent 512 with rope 0 or
//   64 (the model shapes); q_abs, q_pe (rope > 0), out and cache.arena 16-byte aligned; rows
//   and heads within its grid's limits; a device of compute capability >= 9.0 with the shared
//   memory a block (up to 227 KiB, as on sm_90) and co-resident clusters of 8 CTAs.
//   Each selected row is read once for all heads, the selection is cut into 32-token tiles
//   (64-token tiles on wgmma for more than 32 heads where the build has sm_90a code and the
//   device is 9.0: MlaWgAvailable) spread over a cluster of CTAs by the row's own length, partial results
//   merged in a fixed order (mla_decode_tc.h). Which of the two runs is fixed per device and
//   build, so every row of every launch in a process takes the same one.
//   Otherwise one block per (row, head), which needs no alignment beyond the REQUIRES below
//   (q and out may be misaligned slices, e.g. at an odd element).
// Slices at whole rows of 16-byte aligned buffers keep the path (and the bits) of the whole.
// Workspace (optional; nothing is allocated): device memory the sm_90a tensor-core form (more
// than 32 heads) uses to run persistent (one wave over the rows, partials merged through the
// workspace; on an H200 at 64 heads 32% faster at batch 64, 37% at 32, 42% at 16, 10% at 8,
// 13% at 1; the same bits: mla_decode_tc.h). MlaDecodeWorkspaceBytes(rows, heads) bytes, 16-byte
// aligned, hold up to `rows` rows a launch; less (down to one row's) runs more launches; less
// than one row's, null / 0, a misaligned one, or any other path: unused.
// Stream-ordered: it must not be in use by other work on another stream during the call.
// Empty selection: that row's output is 0. A selection with sel_offsets[r + 1] <
// sel_offsets[r], or naming a token or page the cache cannot address (see PagedCacheBf16):
// that row's output is NaN for every head. NaN inputs propagate (as in the CPU twin).
// REQUIRES: heads >= 1; 1 <= latent <= 1024; rope >= 0; latent + rope a multiple of 8 and
// <= 1152; cache.arena 16-byte aligned and cache.page_stride a multiple of 8 (16-byte row loads);
// rows * heads <= INT32_MAX; q, sel, out do not alias.
absl::Status MlaDecodeAttention(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads,
                                int64_t latent, int64_t rope, const PagedCacheBf16& cache, const int32_t* sel,
                                const int32_t* sel_offsets, float scale, uint16_t* out,
                                void* stream = nullptr, void* workspace = nullptr, int64_t workspace_bytes = 0);
// The workspace with which MlaDecodeAttention takes up to `rows` rows of `heads` heads in one
// launch pair (532480 bytes a row and 64-head group; 0 for heads <= 32, where no form uses one).
// REQUIRES: rows >= 0, heads >= 1.
int64_t MlaDecodeWorkspaceBytes(int64_t rows, int64_t heads);
// Which path MlaDecodeAttention takes on the current device for `heads` heads of latent + rope
// wide rows with 16-byte aligned buffers, in words: "wgmma, 64-head groups", "tensor cores,
// 32-head tiles" (or 64), "tensor cores, small form" or "CUDA cores, a block a head" (each cached
// row then read once a head: much slower). For a loader's log; not a launch decision.
std::string MlaDecodePathName(int64_t heads, int64_t latent, int64_t rope);

// Lightning-indexer scores, float32 out: for query row r and each visible key s < n_keys[r],
//   scores[r * score_stride + s] = sum_h w[r, h] * ReLU(scale * qi_h · k_s)
// (ReLU between the per-head dot and the head weight; a NaN dot counts as 0, as in the CPU twin).
//   qi [rows, heads, dim] bf16; w [rows, heads] float32 (weights_proj output * heads^-0.5);
//   keys: paged, cache.width == dim (the indexer's k cache, or pooled keys indexed by pool);
//   n_keys [rows] int32 (device). Entries [n_keys[r], score_stride) are not written.
// CPU twin: cpu::IndexerScoresRow (heads summed in another order: rounding only).
// Batch invariance: a row's scores depend only on its own inputs, never on `rows` or the other
// rows. dim 128 with heads 16/32/48/64 (qi 4-byte aligned, arena 16-byte aligned, page_stride a
// multiple of 8) runs on the tensor cores from sm_90 on (indexer_tc.h: 256 keys a CTA, all in flight
// at once, by TMA where pages hold a multiple of 64 rows); other shapes and devices: one
// CUDA-core dot per (key, head).
// A key whose page cannot be addressed scores NaN (TopK ranks it last). n_keys[r] outside
// [0, score_stride]: every entry [0, score_stride) of that row is NaN.
// REQUIRES: 1 <= heads <= 64, dim >= 1, heads * (dim + 2) + 8 * dim <= 11000 (shared memory),
// 1 <= rows <= 65535, score_stride >= 1.
absl::Status IndexerScores(const uint16_t* qi, const float* w, int64_t rows, int64_t heads, int64_t dim,
                           const PagedCacheBf16& keys, const int32_t* n_keys, float scale, float* scores,
                           int64_t score_stride, void* stream = nullptr);

// Per row, the k largest of scores[r * cols .. r * cols + n_r) (n_r = lengths[r], or cols when
// lengths is null), ties toward the lower index, NaN ranking below everything (-0 and +0 tie).
//   ids [rows, k] int32: the min(k, n_r) chosen indices ascending, then -1 in the rest.
//   counts [rows] int32 (may be null): min(k, n_r).
// CPU twin: cpu::TopKIndices, exactly (same set, same order). A row with n_r outside [0, cols]
// selects nothing (ids all -1, count 0). REQUIRES: rows <= INT32_MAX, 1 <= cols <= INT32_MAX,
// 0 <= k <= INT32_MAX (ids may be null when k == 0). One block per row, or a cluster of 2-8
// blocks per row when few rows of >= 32768 scores are asked; for k <= 2048 usually two reads of
// a row (a sample, then the candidates at or above the sample's threshold), else or when the
// sample misses five (topk.cu).
absl::Status TopK(const float* scores, int64_t rows, int64_t cols, const int32_t* lengths, int64_t k,
                  int32_t* ids, int32_t* counts, void* stream = nullptr);

// Sigmoid routing with bias, groups, top-k and normalisation, per row, exactly as cpu::RouteRow
// (same p fields): logits [rows, n_experts] float32, bias [n_experts] float32 (may be null;
// selection only); writes experts [rows, top_k] int32 ascending and weights [rows, top_k]
// float32. Selection uses the CPU's strict order (value, then lower id, NaN last), so ids match
// the CPU twin exactly whenever both compute the same sigmoids; expf may differ from the host's
// by an ulp, which can only flip choices closer than that. NaN logits rank last and give NaN
// weights, as on the CPU.
// REQUIRES: 1 <= n_experts <= 1024, 0 <= top_k <= n_experts, n_group >= 1, and when grouping
// applies (n_group > 1 and topk_group < n_group): n_group <= 64, n_experts % n_group == 0,
// n_experts / n_group >= 2, topk_group >= 1.
absl::Status MoeRoute(const float* logits, const float* bias, int64_t rows, const cpu::RoutingParams& p,
                      int32_t* experts, float* weights, void* stream = nullptr);

// One decode token of the KDA gated delta rule for `rows` conversations, H heads of d, float32:
//   per (row r, head h), with S = state slot slots[r] (or r when slots is null), head h [d, d]
//   (key channel i x value channel j, S[i * d + j]):
//     S <- diag(exp(g)) S;  u = beta (v - S^T k);  S <- S + k u^T;  o = S^T q
//   q, k, v, g [rows, H, d] (q, k already conv'd, L2-normalised, q scaled by d^-0.5; g the log
//   decay), beta [rows, H]; state [n_slots, H, d, d] updated in place; o [rows, H, d].
// CPU twin: the token-by-token recurrence of model/blocks/kda.cc (sums over i ascending, as there).
// A slot outside [0, n_slots): that row's o is NaN and no state is touched. Two rows naming the
// same slot race (REQUIRES distinct slots). REQUIRES: 1 <= d <= 128, H >= 1, rows <= 65535;
// o aliases none of the inputs.
absl::Status KdaRecurrentStep(float* state, const int32_t* slots, int64_t n_slots, int64_t rows, int64_t heads,
                              int64_t d, const float* q, const float* k, const float* v, const float* g,
                              const float* beta, float* o, void* stream = nullptr);

// The mixing weights of one mHC site from its logits, float32, per row (S streams, M = (2+S)S):
//   m [rows, M] (r · fn^T), scale [3], base [M] (device):
//   pre  [rows, S]    = sigmoid(m[0:S] * scale[0] + base[0:S]) + eps
//   post [rows, S]    = 2 * sigmoid(m[S:2S] * scale[1] + base[S:2S])
//   comb [rows, S, S] = softmax_rows(m[2S:] * scale[2] + base[2S:]) + eps, then /= colsum + eps,
//                       then (iters - 1) times /= rowsum + eps, /= colsum + eps
//                       (iters <= 1: the one column normalisation only, as on the CPU)
// CPU twin: model::MhcPre (model/blocks/mhc.cc) with the same order of operations; only expf may differ.
// REQUIRES: 1 <= streams (S) <= 8, rows <= INT32_MAX.
absl::Status MhcSinkhorn(const float* m, int64_t rows, int64_t streams, const float* scale, const float* base,
                         float eps, int64_t iters, float* pre, float* post, float* comb, void* stream = nullptr);

// Sampling: out[r] = the token samplers[r] picks from logits[r * vocab ..) (greedy: the largest,
// ties toward the lower index; else temperature, top-k, top-p and the row's draw), with the
// log-probabilities it asks for; token -1 for a row holding a NaN or +infinity or no finite value.
// samplers and out are device memory. CPU twin: cpu::SampleRow (greedy and the top ids exactly;
// sampled picks except where the draw falls within float64 rounding of a boundary; log-
// probabilities to float rounding).
// REQUIRES: 1 <= vocab <= INT32_MAX, rows <= INT32_MAX.
absl::Status SampleRows(const float* logits, int64_t rows, int64_t vocab, const RowSampler* samplers,
                        SampledToken* out, void* stream = nullptr);

// ---- Model glue: the ops a whole forward needs around the kernels above (model/cuda). ----

// out[r, :] (float32) = table[ids[r], :] (bf16), the embedding gather that starts the residual
// stream. table [vocab, dim] bf16, ids [rows] int32 (device), out [rows, dim] float32.
// An id outside [0, vocab) makes that row NaN (the host validates ids first; this is the guard).
// CPU twin: a row copy of the upcast table (exact). REQUIRES: vocab >= 1, dim >= 1.
absl::Status EmbeddingGatherF32(const uint16_t* table, int64_t vocab, int64_t dim, const int32_t* ids,
                                int64_t rows, float* out, void* stream = nullptr);

// y[rows, dim] (bf16) = x * rsqrt(mean(x^2) + eps) * w with x float32 (the residual stream) and
// w bf16, float32 inside, then rounded once to bf16. CPU twin: cpu::RmsNorm (sums in another
// order: rounding only). REQUIRES: dim >= 1.
absl::Status RmsNormF32ToBf16(const float* x, int64_t rows, int64_t dim, const uint16_t* w, float eps,
                              uint16_t* y, void* stream = nullptr);

// y[rows, dim] = (x - mean) * rsqrt(var + eps) * w + b per row (biased variance), bf16 in and
// out, float32 inside (two passes: mean, then the variance of x - mean). y may alias x.
// CPU twin: cpu::LayerNorm. REQUIRES: dim >= 1.
absl::Status LayerNormBf16(const uint16_t* x, int64_t rows, int64_t dim, const uint16_t* w, const uint16_t* b,
                           float eps, uint16_t* y, void* stream = nullptr);

// x[i] += float(y[i]) for i < n: a bf16 block output added into the float32 residual stream.
// CPU twin: the float loop `x[i] += y[i]` (exact: one rounding, the same one).
absl::Status AddBf16ToF32(float* x, const uint16_t* y, int64_t n, void* stream = nullptr);
// x[0, n) <- 0 for n 4-byte words (float32 zeros, int32 zeros), as a kernel in the stream: unlike
// a memset it lets the kernels around it overlap their launches (pdl.cuh). REQUIRES: n >= 0.
absl::Status ZeroWords(void* x, int64_t n, void* stream = nullptr);

// Element casts: out[i] = float(in[i]) (exact), and out[i] = bf16(in[i]) round-to-nearest-even
// (NaN stays NaN), as common/dtype.h's Bf16ToF32 / F32ToBf16 (exact twins).
absl::Status CastBf16ToF32(const uint16_t* in, int64_t n, float* out, void* stream = nullptr);
absl::Status CastF32ToBf16(const float* in, int64_t n, uint16_t* out, void* stream = nullptr);

// y[rows, out] float32 = alpha * x[rows, in] · w[out, in]^T (bf16 operands, float32 compute and
// result; GemvBf16F32 where GemvApplies and out <= kGemvMaxOutF32, else cuBLAS): the outputs MODELS.md keeps in float32
// (router logits, the indexer's head weights with alpha = heads^-0.5, the lm_head logits). Same REQUIRES and thread
// safety as LinearBf16. CPU twin: cpu::Linear, then * alpha.
absl::Status LinearBf16F32(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                           float alpha, float* y, void* stream = nullptr);

// y[rows, out] (row stride y_row, bf16) = *alpha * x[rows, in] · w[out, in]^T: bf16 operands,
// float32 compute, the scaled float32 sum rounded to bf16 once; always cuBLAS, with alpha read on
// the device when the product runs (a scale the host does not hold, such as an NVFP4 matrix's
// global scale: gemv_nvfp4.h's LinearNvfp4). Same REQUIRES and thread safety as LinearBf16, and
// y_row >= out. CPU twin: cpu::Linear, then * alpha.
absl::Status LinearBf16Scaled(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                              const float* alpha, uint16_t* y, int64_t y_row, void* stream = nullptr);

// `batch` independent bf16 Linears over strided slices (cublasGemmStridedBatchedEx, float32
// compute, bf16 result), the per-head products of absorbed MLA:
//   for b < batch, r < rows, o < out:
//     y[b * y_batch + r * y_row + o] = sum_i x[b * x_batch + r * x_row + i] * w[b * w_batch + o * in + i]
//   i.e. slice b of x is [rows, in] with row stride x_row, of w a dense [out, in] Linear weight,
//   of y [rows, out] with row stride y_row. Examples: q_abs = W_UK^T q_nope per head (x = q,
//   x_batch = N + P, x_row = H (N + P), w_batch = L N, y_batch = L, y_row = H L); W_UV o_lat
//   per head (x_batch = L, x_row = H L, w_batch = V L, y_batch = V, y_row = H V).
// CPU twin: cpu::Linear per slice. REQUIRES: batch >= 1, in >= 1, out >= 1, x_row >= in,
// y_row >= out, all counts and strides <= INT32_MAX (cuBLAS ints); y's slices disjoint from each
// other and from x and w. rows == 0 does nothing.
absl::Status BatchedLinearBf16(const uint16_t* x, int64_t x_batch, int64_t x_row, int64_t rows, int64_t in,
                               const uint16_t* w, int64_t w_batch, int64_t out, uint16_t* y, int64_t y_batch,
                               int64_t y_row, int64_t batch, void* stream = nullptr);

// One problem of GroupedLinearBf16: y [rows, out] = x [rows, in] · w [out, in]^T, dense row-major.
struct LinearGroupBf16 {
  const uint16_t* x = nullptr;
  int64_t rows = 0;
  const uint16_t* w = nullptr;
  uint16_t* y = nullptr;
};
// LinearBf16 for each of `n` problems sharing `in` and `out` (a MoE layer's experts, each over
// the rows routed to it), spread round-robin over kGroupedLinearStreams streams of the calling
// thread's own, each with its own cuBLAS handle, so problems too small to fill the GPU alone (an
// expert's few rows) run side by side. Each problem is LinearBf16's call (GemvBf16 or cuBLAS, on
// a handle set up the same way): its result does not depend on the other problems. The streams start after the
// work queued on `stream` so far, and `stream` waits for all of them before its next work; a
// single non-empty problem runs on `stream` itself. groups: a host array; rows == 0 is skipped.
// REQUIRES: LinearBf16's for each problem; the y's disjoint from each other and from every x, w.
// Thread safety: as LinearBf16 (the streams, handles and events are per thread and device).
inline constexpr int kGroupedLinearStreams = 8;
absl::Status GroupedLinearBf16(const LinearGroupBf16* groups, int64_t n, int64_t in, int64_t out,
                               void* stream = nullptr);

// Row copy with optional gather and scatter indices, bf16:
//   for j < rows: dst[(dst_idx ? dst_idx[j] : j) * dst_stride + c] = src[(src_idx ? src_idx[j] : j) * src_stride + c]
//   for c < cols. Pointers may point into a row (a column slice: src = q + nope with
//   src_stride nope + rope copies the rope part). Indices are int32 (device); a negative index
//   skips that j (nothing written). REQUIRES: cols >= 1, src_stride >= cols, dst_stride >= cols;
//   the written rows distinct and disjoint from src. Indices past the buffers are the caller's
//   bug (not checked: the op does not know the buffers' sizes). CPU twin: the loop above (exact).
absl::Status CopyRowsBf16(const uint16_t* src, int64_t src_stride, const int32_t* src_idx, uint16_t* dst,
                          int64_t dst_stride, const int32_t* dst_idx, int64_t rows, int64_t cols,
                          void* stream = nullptr);

// Writes new cache rows into a paged cache: for r < rows and c < cols,
//   row(token positions[r] of query row r)[col_offset + c] = src[r * src_stride + c],
// where row(...) is the PagedCacheBf16 addressing (cache.page_table row r). The op writes
// through cache.arena: the caller passes its own writable arena (the view type is shared with
// the readers, hence const in the struct). A row whose token or page cannot be addressed is not
// written (the host builds the tables and checks them first).
// REQUIRES: cols >= 1, col_offset >= 0, col_offset + cols <= cache.width, src_stride >= cols,
// the (row, token) pairs distinct. CPU twin: PagedRows::Row writes (exact).
absl::Status WritePagedRowsBf16(const uint16_t* src, int64_t rows, int64_t src_stride, int64_t cols,
                                int64_t col_offset, const int64_t* positions, const PagedCacheBf16& cache,
                                void* stream = nullptr);

// Turns TopK's fixed-width output into the CSR selection MlaDecodeAttention reads:
//   ids [rows, k] int32, counts [rows] int32 (TopK's) ->
//   offsets [rows + 1] int32 = exclusive prefix sum of the counts, and
//   sel[offsets[r] + j] = ids[r * k + j] for j < counts[r].
// A count outside [0, k] counts as 0. Up to 1024 blocks, each a contiguous range of rows whose
// start it sums from the counts before them (exact).
// REQUIRES: 0 <= k, rows * k <= INT32_MAX; sel has room for rows * k entries.
absl::Status CompactSelection(const int32_t* ids, const int32_t* counts, int64_t rows, int64_t k, int32_t* sel,
                              int32_t* offsets, void* stream = nullptr);

// The MoE combine, into the float32 residual stream, per row r and channel i:
//   y = sum_{j < top_k} weights[r, j] * float(slots[(r * top_k + j), i])   (j ascending)
//   y += float(shared[r, i])   (when shared is non-null)
//   x[r, i] += y   (x[r, i] = y with assign: x need not be initialised)
// slots [rows * top_k, dim] bf16 (expert outputs of each row's chosen experts, in the order
// MoeRoute lists them), weights [rows, top_k] float32, shared [rows, dim] bf16 or null.
// CPU twin: model::MoeForward's combine (same order of operations), then the residual add.
// REQUIRES: top_k >= 0, dim >= 1.
absl::Status MoeCombineF32(const uint16_t* slots, const float* weights, const uint16_t* shared, int64_t rows,
                           int64_t top_k, int64_t dim, float* x, void* stream = nullptr, bool assign = false);

// ---- Float32 activations: the verification precision of the CUDA model (model/cuda, --precision
// f32). The same math as the bf16 ops above with float32 activations and float32 weights (bf16
// checkpoints upcast exactly), so a whole forward can be held to the float32 reference (the
// goldens) tightly; bf16 rounding of activations flips near-tied top-k and routing decisions,
// which a logit comparison cannot tell from a bug. Not meant for serving (twice the bytes).

// A layer's view of a paged cache of float32 rows: PagedCacheBf16's layout and rules with every
// size in float32 values (row (page p, slot i) at arena + p * page_stride + i * width).
struct PagedCacheF32 {
  const float* arena = nullptr;
  int64_t n_pages = 0;
  int64_t page_rows = 0;
  int64_t page_stride = 0;
  int64_t width = 0;
  const int32_t* page_table = nullptr;
  int64_t table_stride = 0;
};

// RMSNorm, float32 in, weight and out. y may alias x. CPU twin: cpu::RmsNorm. REQUIRES: dim >= 1.
absl::Status RmsNormF32(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y,
                        void* stream = nullptr);
// LayerNorm (biased variance), float32. y may alias x. CPU twin: cpu::LayerNorm. REQUIRES: dim >= 1.
absl::Status LayerNormF32(const float* x, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
                          float* y, void* stream = nullptr);
// RopeInterleavedBf16's contract on float32 vectors (no rounding after the rotation).
absl::Status RopeInterleavedF32(float* x, int64_t rows, int64_t heads, int64_t row_stride, int64_t head_stride,
                                int64_t offset, int64_t dim, const int64_t* positions, const float* inv_freq,
                                void* stream = nullptr);
// SwiGluBf16's contract on float32 (out may alias gate or up only when in_stride == cols).
absl::Status SwiGluF32(const float* gate, const float* up, int64_t rows, int64_t cols, int64_t in_stride,
                       float limit, float* out, void* stream = nullptr);
// y[rows, out] = alpha * x · w^T, float32 operands and compute through cuBLAS (CUBLAS_COMPUTE_32F:
// no TF32 unless NVIDIA_TF32_OVERRIDE asks for it). Same REQUIRES as LinearBf16. CPU twin: cpu::Linear.
absl::Status LinearF32(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float alpha,
                       float* y, void* stream = nullptr);
// BatchedLinearBf16's contract with float32 operands and result.
absl::Status BatchedLinearF32(const float* x, int64_t x_batch, int64_t x_row, int64_t rows, int64_t in,
                              const float* w, int64_t w_batch, int64_t out, float* y, int64_t y_batch, int64_t y_row,
                              int64_t batch, void* stream = nullptr);
// CopyRowsBf16's contract on float32 rows.
absl::Status CopyRowsF32(const float* src, int64_t src_stride, const int32_t* src_idx, float* dst, int64_t dst_stride,
                         const int32_t* dst_idx, int64_t rows, int64_t cols, void* stream = nullptr);
// WritePagedRowsBf16's contract on a float32 cache (writes through cache.arena).
absl::Status WritePagedRowsF32(const float* src, int64_t rows, int64_t src_stride, int64_t cols, int64_t col_offset,
                               const int64_t* positions, const PagedCacheF32& cache, void* stream = nullptr);
// x[i] += y[i], float32. CPU twin: the loop (exact).
absl::Status AddF32(float* x, const float* y, int64_t n, void* stream = nullptr);
// out[i] = ((parts[0 * stride + i] + parts[1 * stride + i]) + ...) + parts[(ranks - 1) * stride + i] for
// i < n: one slice of the tensor-parallel reduction, summed in rank order as the host's fixed-order
// all-reduce sums it (dataplane/collectives.h), so a reduction on the device gives its bits. CPU
// twin: that loop (exact). Launched without programmatic dependence (it follows NCCL's transfers).
// REQUIRES: 1 <= ranks <= 1024, stride >= n >= 0; out does not overlap parts.
absl::Status SumInRankOrderF32(const float* parts, int64_t ranks, int64_t n, int64_t stride, float* out,
                               void* stream = nullptr);
// MoeCombineF32's contract with float32 expert outputs (slots, shared).
absl::Status MoeCombineF32Slots(const float* slots, const float* weights, const float* shared, int64_t rows,
                                int64_t top_k, int64_t dim, float* x, void* stream = nullptr, bool assign = false);
// MlaDecodeAttention's contract (selection, softmax, empty and bad selections) with float32 queries,
// cache and output. REQUIRES: heads >= 1, 1 <= latent <= 1024, rope >= 0, rows * heads <= INT32_MAX.
absl::Status MlaDecodeAttentionF32(const float* q_abs, const float* q_pe, int64_t rows, int64_t heads,
                                   int64_t latent, int64_t rope, const PagedCacheF32& cache, const int32_t* sel,
                                   const int32_t* sel_offsets, float scale, float* out, void* stream = nullptr);
// IndexerScores's contract with float32 queries and keys (same limits on heads, dim, rows).
absl::Status IndexerScoresF32(const float* qi, const float* w, int64_t rows, int64_t heads, int64_t dim,
                              const PagedCacheF32& keys, const int32_t* n_keys, float scale, float* scores,
                              int64_t score_stride, void* stream = nullptr);

// ---- glm5_next (model/cuda): hyper-connections, KDA and the pooled indexer. Float32 inside; the
// activation-typed ends come as Bf16 / F32 pairs. Rows are [rows, ...] dense unless stated.

// u[r, d] = sum_{j < streams} pre[r, j] * h[r, j, d] (j ascending): an mHC site's input, or the
// head's stream mean with pre = 1 / streams. h [rows, streams, dim], pre [rows, streams], u
// [rows, dim], float32. CPU twin: the u loop of model::MhcPre. REQUIRES: streams, dim >= 1.
absl::Status MhcMixIn(const float* h, const float* pre, int64_t rows, int64_t streams, int64_t dim, float* u,
                      void* stream = nullptr);
// MhcMixIn, then RMSNorm of u into y (weight w; bf16 or float32 y): bit for bit MhcMixIn followed
// by RmsNormF32ToBf16 (resp. RmsNormF32), in one launch a row when dim % 4 == 0 and h and u are
// 16-byte aligned (else those two launches). u is written too. CPU twin: model::MhcPre's mix, then
// cpu::RmsNorm. REQUIRES: 1 <= streams <= 8, dim >= 1; u and y disjoint from h.
absl::Status MhcMixInNormToBf16(const float* h, const float* pre, int64_t rows, int64_t streams, int64_t dim,
                                const uint16_t* w, float eps, float* u, uint16_t* y, void* stream = nullptr);
absl::Status MhcMixInNormF32(const float* h, const float* pre, int64_t rows, int64_t streams, int64_t dim,
                             const float* w, float eps, float* u, float* y, void* stream = nullptr);
// MhcSinkhorn (m, scale, base, hc_eps, iters -> pre, post, comb), then MhcMixInNorm* with that pre:
// bit for bit those two calls, in one launch a row when streams == 4 and MhcMixInNorm* fuses (the
// Sinkhorn on one warp of the row's block first). REQUIRES: both calls' requirements.
absl::Status MhcSinkhornMixInNormToBf16(const float* m, const float* scale, const float* base, float hc_eps,
                                        int64_t iters, float* pre, float* post, float* comb, const float* h,
                                        int64_t rows, int64_t streams, int64_t dim, const uint16_t* w, float eps,
                                        float* u, uint16_t* y, void* stream = nullptr);
absl::Status MhcSinkhornMixInNormF32(const float* m, const float* scale, const float* base, float hc_eps,
                                     int64_t iters, float* pre, float* post, float* comb, const float* h,
                                     int64_t rows, int64_t streams, int64_t dim, const float* w, float eps, float* u,
                                     float* y, void* stream = nullptr);
// h[r, j, d] = u[r, d] for every stream j < streams (each stream starts as the embedding). h
// [rows, streams, dim], u [rows, dim], float32. CPU twin: model/families/glm5_next.cc's stream start.
// REQUIRES: streams, dim >= 1; h and u disjoint.
absl::Status MhcStreamsF32(const float* u, int64_t rows, int64_t streams, int64_t dim, float* h,
                           void* stream = nullptr);
// In place, per row r, stream k and channel d (the old h on the right):
//   h[r, k, d] <- post[r, k] * y[r, d] + sum_{j ascending} comb[r, j, k] * h[r, j, d]
// post [rows, streams], comb [rows, streams, streams] float32; y [rows, dim] bf16 or float32.
// CPU twin: model::MhcPost. REQUIRES: 1 <= streams <= 8, dim >= 1.
absl::Status MhcMixOutBf16(float* h, const float* post, const float* comb, const uint16_t* y, int64_t rows,
                           int64_t streams, int64_t dim, void* stream = nullptr);
absl::Status MhcMixOutF32(float* h, const float* post, const float* comb, const float* y, int64_t rows,
                          int64_t streams, int64_t dim, void* stream = nullptr);

// y[r, o] = x[r, :] · w[o, :], float32, each output one block-wide dot in a fixed order (thread t
// of 1024 sums its 4-element pieces t, t + 1024, ...; then a fixed tree): a row's result does not depend on how many
// rows the call has, unlike cuBLAS, whose kernel choice (and summation order) changes with the
// row count. For small outputs feeding discrete decisions (mHC's mixing logits), where a
// last-bit change could flip a later bf16 rounding. CPU twin: cpu::Linear (rounding only).
// REQUIRES: in, out >= 1, rows * out <= INT32_MAX.
absl::Status LinearF32RowInvariant(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y,
                                   void* stream = nullptr);
// The same with x's rows first RMS-normed without a weight (x * rsqrt(mean(x^2) + eps)): bit for
// bit RmsNormF32 (weight of ones) then LinearF32RowInvariant, in one launch (mHC's mixing logits).
// CPU twin: cpu::RmsNorm then cpu::Linear (rounding only). REQUIRES: as LinearF32RowInvariant.
absl::Status RmsNormLinearF32RowInvariant(const float* x, int64_t rows, int64_t in, float eps, const float* w,
                                          int64_t out, float* y, void* stream = nullptr);

// Causal depthwise conv then SiLU over n consecutive tokens of one conversation, continuing from
// its tail: with window = [tail (kernel - 1 rows) | x (n rows)] per channel c,
//   y[t, c] = silu(sum_{j < kernel} weight[c, j] * window[t + j, c])   (j ascending)
// and tail <- the window's last kernel - 1 rows. x [n, channels] (bf16 or float32, row stride
// channels), weight [channels, kernel], tail [kernel - 1, channels] and y [n, channels] float32.
// CPU twin: ConvSilu of model/blocks/kda.cc. REQUIRES: channels >= 1, 2 <= kernel <= 8; y aliases nothing.
absl::Status KdaConvSiluBf16(const uint16_t* x, int64_t n, int64_t channels, int64_t kernel, const float* weight,
                             float* tail, float* y, void* stream = nullptr);
absl::Status KdaConvSiluF32(const float* x, int64_t n, int64_t channels, int64_t kernel, const float* weight,
                            float* tail, float* y, void* stream = nullptr);
// The three convolutions of KDA's q, k and v in one launch: KdaConvSilu* of (x[i], weight[i], the
// tail at tail + i * (kernel - 1) * channels, y[i]) for i = 0, 1, 2, each exactly as alone.
absl::Status KdaConvSiluQkvBf16(const uint16_t* const x[3], int64_t n, int64_t channels, int64_t kernel,
                                const float* const weight[3], float* tail, float* const y[3],
                                void* stream = nullptr);
absl::Status KdaConvSiluQkvF32(const float* const x[3], int64_t n, int64_t channels, int64_t kernel,
                               const float* const weight[3], float* tail, float* const y[3], void* stream = nullptr);
// In place per (row, head): x <- x / sqrt(sum x^2 + 1e-6) * scale over the head's d values.
// x [rows, heads, d] float32. CPU twin: L2Norm (and the q scale) of model/blocks/kda.cc. REQUIRES: d >= 1.
absl::Status KdaL2Norm(float* x, int64_t rows, int64_t heads, int64_t d, float scale, void* stream = nullptr);
// KdaL2Norm of q (times q_scale) and of k (times 1) in one launch, each exactly as alone.
absl::Status KdaL2NormQk(float* q, float q_scale, float* k, int64_t rows, int64_t heads, int64_t d,
                         void* stream = nullptr);
// The log decay: g[r, c] = lower_bound * sigmoid(exp(a_log[c / d]) * (f[r, c] + dt_bias[c])),
// f [rows, heads * d] bf16 or float32 (a f_a^T f_b^T), a_log [heads], dt_bias [heads * d], g float32.
// CPU twin: KdaProject's g loop. REQUIRES: heads, d >= 1.
absl::Status KdaDecayBf16(const uint16_t* f, int64_t rows, int64_t heads, int64_t d, const float* a_log,
                          const float* dt_bias, float lower_bound, float* g, void* stream = nullptr);
absl::Status KdaDecayF32(const float* f, int64_t rows, int64_t heads, int64_t d, const float* a_log,
                         const float* dt_bias, float lower_bound, float* g, void* stream = nullptr);
// x[i] <- sigmoid(x[i]) = 1 / (1 + exp(-x[i])), float32 in place (KDA's beta).
absl::Status SigmoidF32(float* x, int64_t n, void* stream = nullptr);
// The KDA output before o_proj, per (row, head):
//   out[r, h, :] = RMSNorm(o[r, h, :]; o_norm, eps) * sigmoid(gate[r, h, :])
// o [rows, heads, d] float32, o_norm [d] float32, gate [rows, heads * d] (logits) and out of the
// activation type. CPU twin: KdaOutput's norm and gate. REQUIRES: heads, d >= 1.
absl::Status KdaOutputBf16(const float* o, const uint16_t* gate, int64_t rows, int64_t heads, int64_t d,
                           const float* o_norm, float eps, uint16_t* out, void* stream = nullptr);
absl::Status KdaOutputF32(const float* o, const float* gate, int64_t rows, int64_t heads, int64_t d,
                          const float* o_norm, float eps, float* out, void* stream = nullptr);

// Pool keys of the pooled indexer for pools [p0, p1) of the conversation whose page table is
// query row `row` of the views': per pool p and channel c, over its tokens t_j = p * kpool + j,
//   K_p[c] = sum_j softmax_j(gate(t_j)[c] + ape[j, c]) * key(t_j)[c]    (j ascending)
// read from the `keys` and `gates` caches (width dim each) and written at "token" p of `pools`
// (width dim; pool p < its first token, so the conversation's pages hold it). ape [kpool, dim]
// float32. Tokens or pages that cannot be addressed give NaN keys. Writes through pools.arena.
// CPU twin: model::PooledIndexerPools. REQUIRES: kpool >= 1, 0 <= p0 <= p1, all three
// views of one width.
absl::Status PooledKeysBf16(const PagedCacheBf16& keys, const PagedCacheBf16& gates, const PagedCacheBf16& pools,
                            int64_t row, int64_t p0, int64_t p1, int64_t kpool, const float* ape,
                            void* stream = nullptr);
absl::Status PooledKeysF32(const PagedCacheF32& keys, const PagedCacheF32& gates, const PagedCacheF32& pools,
                           int64_t row, int64_t p0, int64_t p1, int64_t kpool, const float* ape,
                           void* stream = nullptr);
// The pooled indexer's CSR selection: per row r with n = (pos[r] + 1) / kpool complete pools,
// every token 0..pos[r] when n <= k (dense), else the kpool tokens of each of its k chosen
// pools (pool_ids [rows, k], ascending, TopK's) then the tail n * kpool..pos[r]. sel is written
// from offsets[r] (int32 [rows + 1], the host's prefix sums of those counts).
// CPU twin: model::CpuOps::ExpandPoolSelection. REQUIRES: kpool >= 1, k >= 0.
absl::Status ExpandPoolSelection(const int32_t* pool_ids, int64_t k, const int64_t* pos, int64_t rows, int64_t kpool,
                                 const int32_t* offsets, int32_t* sel, void* stream = nullptr);

// Device memory helpers for the harness and tests.
absl::StatusOr<void*> DeviceAlloc(size_t bytes);
absl::Status DeviceFree(void* p);
absl::Status CopyToDevice(void* dst, const void* src, size_t bytes);
absl::Status CopyToHost(void* dst, const void* src, size_t bytes);
absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes);
absl::Status DeviceFill(void* dst, uint8_t byte, size_t bytes);
absl::Status Synchronize();
// Page-locked host memory (cudaMallocHost), and copies from and to it that return at once: the
// host must not touch the pinned side until the copy is done (an event recorded after it, or a
// Synchronize, says when).
absl::StatusOr<void*> PinnedAlloc(size_t bytes);
absl::Status PinnedFree(void* p);
absl::Status CopyToDeviceAsync(void* dst, const void* src, size_t bytes, void* stream = nullptr);
absl::Status CopyToHostAsync(void* dst, const void* src, size_t bytes, void* stream = nullptr);
// Events without timing, as opaque handles: record on a stream, then wait on the host.
absl::StatusOr<void*> EventCreate();
absl::Status EventDestroy(void* event);
absl::Status EventRecord(void* event, void* stream = nullptr);
absl::Status EventWait(void* event);

}  // namespace ferry::kernels::cuda
