// The CUDA backend of the layer sequences written once over a backend (model/families/dsa_step.h): the
// ops of act_ops.h for activation type T (uint16_t bf16 bits to serve, float to verify) with the
// step's device scratch (Workspace), its one upload of host inputs (StepUpload) and its one wait
// for the results (StepDownload). model/blocks/cpu_ops.h is the CPU twin, name for name.
// Internal to model/cuda.
//
// Thread safety: none; one model instance's step loop owns its CudaOps.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <initializer_list>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/ops.h"
#include "model/cuda/act_ops.h"
#include "model/cuda/attend_split.h"
#include "model/cuda/decision_tap.h"
#include "model/cuda/device_buffer.h"
#include "model/cuda/device_pages.h"
#include "model/cuda/ffn_cuda.h"
#include "model/blocks/kda.h"
#include "model/cache/split_rows.h"
#include "model/parallel/tensor_parallel.h"

namespace ferry::model::cuda {

// glm5_next's blocks on the device (model/families/next_step.h): an mHC site's weights (fn float32 in
// both precisions) and a token's mix, a KDA layer's weights.
struct CudaMhc {
  DeviceWeight fn;  // float32 [(2 + S) S, S D]
  DeviceBuffer base, scale;
};
struct CudaMhcMix {
  float *m = nullptr, *pre = nullptr, *post = nullptr, *comb = nullptr;
};
struct CudaKda {
  DeviceWeight q_proj, k_proj, v_proj, f_a, f_b, g_a, g_b, b_proj, o_proj;
  DeviceBuffer q_conv, k_conv, v_conv, a_log, dt_bias, o_norm;  // float32
  int64_t heads = 0, low_rank = 0;
};

template <typename T>
class CudaOps {
 public:
  using Act = T;
  using WeightT = DeviceWeight;
  using Floats = DeviceBuffer;
  using Ffn = CudaFfn;
  using FfnScratch = cuda::FfnScratch<T>;
  using Cache = act::Cache<T>;
  using LinearProblem = act::LinearProblem<T>;
  using Part = StepUpload::Part;
  using Download = StepDownload::Part;
  using Mhc = CudaMhc;
  using MhcMix = CudaMhcMix;
  using KdaLayer = CudaKda;
  struct KdaScratch {
    T *kq, *kk, *kv, *low, *low_g, *f, *gate, *ky;
    float *qc, *kc, *vc, *g, *beta, *o;
  };
  static int64_t KdaLowRank(const KdaLayer& k) { return k.low_rank; }

  absl::Status Reset() { return ws_.Reset(); }
  template <typename U>
  absl::StatusOr<U*> Take(int64_t n) {
    return ws_.Take<U>(n);
  }
  absl::StatusOr<std::vector<void*>> Send(std::initializer_list<Part> parts) { return upload_.Send(ws_, parts); }
  absl::Status Receive(std::initializer_list<Download> parts) { return download_.Receive(parts); }
  absl::Status ToHost(void* host, const void* dev, size_t bytes) { return kernels::cuda::CopyToHost(host, dev, bytes); }
  absl::Status ToDevice(void* dev, const void* host, size_t bytes) {
    return kernels::cuda::CopyToDevice(dev, host, bytes);
  }
  Cache View(const PageArena& arena, int64_t region, const int32_t* table, int64_t stride) const {
    return act::CacheView<T>(arena, region, table, stride);
  }

  absl::Status Embed(const T* table, int64_t vocab, int64_t dim, const int32_t* ids, int64_t rows, float* x) {
    return act::Embed(table, vocab, dim, ids, rows, x);
  }
  absl::Status Linear(const T* x, int64_t rows, int64_t in, const T* w, int64_t out, T* y) {
    return act::Linear(x, rows, in, w, out, y);
  }
  absl::Status LinearMany(std::span<const LinearProblem> p, int64_t rows) { return act::LinearMany(p, rows); }
  absl::Status LinearToF32(const T* x, int64_t rows, int64_t in, const T* w, int64_t out, float alpha, float* y) {
    return act::LinearToF32(x, rows, in, w, out, alpha, y);
  }
  absl::Status BatchedLinear(const T* x, int64_t x_batch, int64_t x_row, int64_t rows, int64_t in, const T* w,
                             int64_t w_batch, int64_t out, T* y, int64_t y_batch, int64_t y_row, int64_t batch) {
    return act::BatchedLinear(x, x_batch, x_row, rows, in, w, w_batch, out, y, y_batch, y_row, batch);
  }
  absl::Status RmsNorm(const T* x, int64_t rows, int64_t dim, const T* w, float eps, T* y) {
    return act::RmsNorm(x, rows, dim, w, eps, y);
  }
  absl::Status NormResidual(const float* x, int64_t rows, int64_t dim, const T* w, float eps, T* y) {
    return act::NormResidual(x, rows, dim, w, eps, y);
  }
  absl::Status LayerNorm(const T* x, int64_t rows, int64_t dim, const T* w, const T* b, float eps, T* y) {
    return act::LayerNorm(x, rows, dim, w, b, eps, y);
  }
  absl::Status Rope(T* x, int64_t rows, int64_t heads, int64_t row_stride, int64_t head_stride, int64_t offset,
                    int64_t dim, const int64_t* pos, const float* inv_freq) {
    return act::Rope(x, rows, heads, row_stride, head_stride, offset, dim, pos, inv_freq);
  }
  absl::Status CopyRows(const T* src, int64_t src_stride, const int32_t* src_idx, T* dst, int64_t dst_stride,
                        const int32_t* dst_idx, int64_t rows, int64_t cols) {
    return act::CopyRows(src, src_stride, src_idx, dst, dst_stride, dst_idx, rows, cols);
  }
  absl::Status WritePaged(const T* src, int64_t rows, int64_t src_stride, int64_t cols, int64_t col_offset,
                          const int64_t* pos, const Cache& cache) {
    return act::WritePaged(src, rows, src_stride, cols, col_offset, pos, cache);
  }
  absl::Status AddResidual(float* x, const T* y, int64_t n) { return act::AddResidual(x, y, n); }
  absl::Status AddResidual(float* x, const float* y, int64_t n) requires(!std::is_same_v<T, float>) {
    return act::AddResidual(x, y, n);
  }
  absl::Status ToF32(const T* x, int64_t n, float* y) { return act::ToF32(x, n, y); }
  absl::Status IndexerScores(const T* qi, const float* w, int64_t rows, int64_t heads, int64_t dim, const Cache& keys,
                             const int32_t* n_keys, float scale, float* scores, int64_t stride) {
    return act::IndexerScores(qi, w, rows, heads, dim, keys, n_keys, scale, scores, stride);
  }
  absl::Status TopK(const float* scores, int64_t rows, int64_t cols, const int32_t* lengths, int64_t k, int32_t* ids,
                    int32_t* counts) {
    return kernels::cuda::TopK(scores, rows, cols, lengths, k, ids, counts);
  }
  absl::Status CompactSelection(const int32_t* ids, const int32_t* counts, int64_t rows, int64_t k, int32_t* sel,
                                int32_t* offsets) {
    return kernels::cuda::CompactSelection(ids, counts, rows, k, sel, offsets);
  }
  int64_t MlaWorkspaceBytes(int64_t rows, int64_t heads) const { return act::MlaWorkspaceBytes<T>(rows, heads); }
  absl::Status MlaDecode(const T* q_abs, const T* q_pe, int64_t rows, int64_t heads, int64_t latent, int64_t rope,
                         const Cache& cache, const int32_t* sel, const int32_t* offsets, float scale, T* out,
                         void* workspace, int64_t workspace_bytes) {
    return act::MlaDecode(q_abs, q_pe, rows, heads, latent, rope, cache, sel, offsets, scale, out, workspace,
                          workspace_bytes);
  }
  absl::StatusOr<FfnScratch> TakeFfnScratch(const ModelConfig& c, int64_t rows) {
    return cuda::TakeFfnScratch<T>(ws_, c, rows, nvfp4_tile_bytes_);
  }
  // Layer `layer`'s FFN (LoadFfnCuda), noting the scratch its NVFP4 MLPs want; on a GPU sharing
  // the host's memory (opts.drop_checkpoint_pages) the layer's file pages are then given back:
  // the MLP is the last of a layer's weights the loaders read.
  absl::StatusOr<CudaFfn> LoadFfn(const Checkpoint& ck, const WeightLoader& w, const ModelConfig& c, int64_t layer,
                                  const CudaLoadOptions& opts, const TensorParallel& tp, int64_t* bytes) {
    absl::StatusOr<CudaFfn> f = LoadFfnCuda(w, c, layer, opts, tp, bytes);
    if (f.ok()) nvfp4_tile_bytes_ = std::max(nvfp4_tile_bytes_, Nvfp4TileBytes(*f));
    if (opts.drop_checkpoint_pages) ck.DropPages(c.LayerPrefix(layer));
    return f;
  }
  absl::Status FfnAdd(const Ffn& f, const ModelConfig& c, const T* a, int64_t rows, const FfnScratch& s, T* y,
                      float* x, const DecisionTap& tap, bool assign = false) {
    return cuda::FfnAdd<T>(f, c, a, rows, s, y, x, tap, assign);
  }
  absl::Status Sample(const float* logits, int64_t rows, int64_t vocab, const kernels::RowSampler* samplers,
                      kernels::SampledToken* out) {
    return kernels::cuda::SampleRows(logits, rows, vocab, samplers, out);
  }
  absl::Status FfnError(int32_t error, int64_t n_experts) const { return FfnErrorStatus(error, n_experts); }
  absl::Status TapTopK(const DecisionTap& tap, int64_t rows, int64_t k, int32_t* ids, int32_t* counts) {
    return cuda::TapTopK(tap, rows, k, ids, counts);
  }

  // glm5_next's blocks (model/blocks/cpu_ops.h says what each computes).
  absl::StatusOr<MhcMix> TakeMhcMix(const ModelConfig& c, int64_t rows) {
    const int64_t S = c.hc_mult;
    MhcMix m;
    FERRY_ASSIGN_OR_RETURN(m.m, ws_.Take<float>(rows * (2 + S) * S));
    FERRY_ASSIGN_OR_RETURN(m.pre, ws_.Take<float>(rows * S));
    FERRY_ASSIGN_OR_RETURN(m.post, ws_.Take<float>(rows * S));
    FERRY_ASSIGN_OR_RETURN(m.comb, ws_.Take<float>(rows * S * S));
    return m;
  }
  absl::StatusOr<KdaScratch> TakeKdaScratch(const ModelConfig& c, int64_t rows, int64_t heads, int64_t low_rank) {
    const int64_t C = heads * c.linear_head_dim;
    KdaScratch s;
    for (T** p : {&s.kq, &s.kk, &s.kv, &s.f, &s.gate, &s.ky}) {
      FERRY_ASSIGN_OR_RETURN(*p, ws_.Take<T>(rows * C));
    }
    for (T** p : {&s.low, &s.low_g}) {
      FERRY_ASSIGN_OR_RETURN(*p, ws_.Take<T>(rows * low_rank));
    }
    for (float** p : {&s.qc, &s.kc, &s.vc, &s.g, &s.o}) {
      FERRY_ASSIGN_OR_RETURN(*p, ws_.Take<float>(rows * C));
    }
    FERRY_ASSIGN_OR_RETURN(s.beta, ws_.Take<float>(rows * heads));
    return s;
  }
  absl::Status MhcStreams(const float* x, int64_t rows, int64_t streams, int64_t dim, float* h) {
    return kernels::cuda::MhcStreamsF32(x, rows, streams, dim, h);
  }
  // Two launches: the normed mixing logits (row-invariant, not cuBLAS: a token's mix must not
  // depend on the batch, or a last-bit change can flip a bf16 rounding downstream), then Sinkhorn,
  // mix and norm.
  absl::Status MhcIn(const Mhc& m, const ModelConfig& c, const float* h, int64_t rows, const T* norm, MhcMix& mix,
                     float* u, T* a) {
    const int64_t S = c.hc_mult, D = c.hidden_size;
    FERRY_RETURN_IF_ERROR(kernels::cuda::RmsNormLinearF32RowInvariant(h, rows, S * D, c.rms_norm_eps,
                                                                      m.fn.as<float>(), (2 + S) * S, mix.m));
    return act::SinkhornMixInNorm(mix.m, m.scale.as<const float>(), m.base.as<const float>(), c.hc_eps,
                                  c.hc_sinkhorn_iters, mix.pre, mix.post, mix.comb, h, rows, S, D, norm,
                                  c.rms_norm_eps, u, a);
  }
  absl::Status MhcOut(const MhcMix& mix, const ModelConfig& c, const T* y, int64_t rows, float* h) {
    return act::MhcMixOut(h, mix.post, mix.comb, y, rows, c.hc_mult, c.hidden_size);
  }
  absl::Status MhcOut(const MhcMix& mix, const ModelConfig& c, const float* y, int64_t rows, float* h)
    requires(!std::is_same_v<T, float>) {
    return kernels::cuda::MhcMixOutF32(h, mix.post, mix.comb, y, rows, c.hc_mult, c.hidden_size);
  }
  absl::Status StreamMeanNorm(const float* h, const float* mean_w, int64_t rows, int64_t streams, int64_t dim,
                              const T* norm, float eps, float* u, T* a) {
    return act::MixInNorm(h, mean_w, rows, streams, dim, norm, eps, u, a);
  }
  // Naive: the recurrence runs one token a launch, also in prefill (segs.chunk is not used).
  absl::Status Kda(const KdaLayer& w, int64_t layer, const ModelConfig& c, const T* a, int64_t R,
                   const KdaSegments& segs, KdaScratch& s, T* y) {
    const int64_t D = c.hidden_size, H = w.heads, d = c.linear_head_dim, C = H * d, K = c.linear_conv_kernel_dim,
                  r = w.low_rank;
    // The projections of a in one launch at decode sizes, then the two low-rank second halves.
    FERRY_RETURN_IF_ERROR(act::LinearMany({{a, D, w.q_proj.as<T>(), C, s.kq},
                                           {a, D, w.k_proj.as<T>(), C, s.kk},
                                           {a, D, w.v_proj.as<T>(), C, s.kv},
                                           {a, D, w.f_a.as<T>(), r, s.low},
                                           {a, D, w.g_a.as<T>(), r, s.low_g}},
                                          R));
    FERRY_RETURN_IF_ERROR(
        act::LinearMany({{s.low, r, w.f_b.as<T>(), C, s.f}, {s.low_g, r, w.g_b.as<T>(), C, s.gate}}, R));
    FERRY_RETURN_IF_ERROR(act::KdaDecay(s.f, R, H, d, w.a_log.as<const float>(), w.dt_bias.as<const float>(),
                                        c.linear_lower_bound, s.g));
    FERRY_RETURN_IF_ERROR(act::LinearToF32(a, R, D, w.b_proj.as<T>(), H, 1.0f, s.beta));
    FERRY_RETURN_IF_ERROR(kernels::cuda::SigmoidF32(s.beta, R * H));
    for (size_t k = 0; k < segs.begin.size(); ++k) {
      const int64_t begin = segs.begin[k], n = segs.n[k];
      float* tails = segs.state[k] + segs.layout->conv[static_cast<size_t>(layer)];
      const T* const x[3] = {s.kq + begin * C, s.kk + begin * C, s.kv + begin * C};
      const float* const weight[3] = {w.q_conv.as<const float>(), w.k_conv.as<const float>(),
                                      w.v_conv.as<const float>()};
      float* const out[3] = {s.qc + begin * C, s.kc + begin * C, s.vc + begin * C};
      FERRY_RETURN_IF_ERROR(act::KdaConvSiluQkv(x, n, C, K, weight, tails, out));
    }
    FERRY_RETURN_IF_ERROR(kernels::cuda::KdaL2NormQk(s.qc, 1.0f / std::sqrt(static_cast<float>(d)), s.kc, R, H, d));
    for (size_t k = 0; k < segs.begin.size(); ++k) {
      float* state = segs.state[k] + segs.layout->s[static_cast<size_t>(layer)];
      for (int64_t i = 0; i < segs.n[k]; ++i) {
        const int64_t row = segs.begin[k] + i;
        FERRY_RETURN_IF_ERROR(kernels::cuda::KdaRecurrentStep(state, nullptr, 1, 1, H, d, s.qc + row * C,
                                                              s.kc + row * C, s.vc + row * C, s.g + row * C,
                                                              s.beta + row * H, s.o + row * C));
      }
    }
    FERRY_RETURN_IF_ERROR(act::KdaOutput(s.o, s.gate, R, H, d, w.o_norm.as<const float>(), c.rms_norm_eps, s.ky));
    return act::Linear(s.ky, R, C, w.o_proj.as<T>(), D, y);
  }
  absl::Status PooledKeys(const Cache& keys, const Cache& gates, const Cache& pools, int64_t row, int64_t p0, int64_t p1,
                          int64_t kpool, const float* ape) {
    return act::PooledKeys(keys, gates, pools, row, p0, p1, kpool, ape);
  }
  absl::Status ExpandPoolSelection(const int32_t* pool_ids, int64_t k, const int64_t* pos, int64_t rows, int64_t kpool,
                                   const int32_t* offsets, int32_t* sel) {
    return kernels::cuda::ExpandPoolSelection(pool_ids, k, pos, rows, kpool, offsets, sel);
  }

  // Tensor parallelism: x [n] float32 (device) summed over the ranks in the collective's fixed
  // order, staged through host memory (the UCX data plane's transport).
  absl::Status AllReduce(const TensorParallel& tp, float* x, int64_t n) { return ReduceOverGroup(tp, x, n, &reduce_); }
  // The latent split's attention (model/cuda/attend_split.h).
  absl::Status AttendSplit(const ModelConfig& c, int64_t heads, const T* q_abs, const T* q_pe, int64_t rows,
                           const RowOwners& owners, const TensorParallel& tp, const Cache& latent, const int32_t* sel,
                           const int32_t* offsets, T* o_lat, OwnerSplitStats* stats) {
    return AttendSplitCuda<T>(split_, c, heads, q_abs, q_pe, rows, owners, tp, latent, sel, offsets, o_lat, stats);
  }

 private:
  Workspace ws_;
  int64_t nvfp4_tile_bytes_ = 0;  // the most any layer's NVFP4 MLPs want (LoadFfn)
  StepUpload upload_;      // the step's host inputs, one copy
  StepDownload download_;  // the step's logits and MoE error word, one wait
  std::vector<float> reduce_;  // AllReduce's host staging
  SplitScratch split_;         // AttendSplit's
};

}  // namespace ferry::model::cuda
