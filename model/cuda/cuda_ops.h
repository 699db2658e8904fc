// The CUDA backend of the layer sequences written once over a backend (model/dsa_step.h): the
// ops of act_ops.h for activation type T (uint16_t bf16 bits to serve, float to verify) with the
// step's device scratch (Workspace), its one upload of host inputs (StepUpload) and its one wait
// for the results (StepDownload). model/cpu_ops.h is the CPU twin, name for name.
// Internal to model/cuda.
//
// Thread safety: none; one model instance's step loop owns its CudaOps.
#pragma once

#include <cstdint>
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
#include "model/split_rows.h"
#include "model/tensor_parallel.h"

namespace ferry::model::cuda {

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
    return cuda::TakeFfnScratch<T>(ws_, c, rows);
  }
  absl::Status FfnAdd(const Ffn& f, const ModelConfig& c, const T* a, int64_t rows, const FfnScratch& s, T* y,
                      float* x, const DecisionTap& tap, bool assign = false) {
    return cuda::FfnAdd<T>(f, c, a, rows, s, y, x, tap, assign);
  }
  absl::Status ArgMax(const float* logits, int64_t rows, int64_t vocab, int32_t* ids) {
    return kernels::cuda::SampleGreedy(logits, rows, vocab, ids);
  }
  absl::Status FfnError(int32_t error, int64_t n_experts) const { return FfnErrorStatus(error, n_experts); }
  absl::Status TapTopK(const DecisionTap& tap, int64_t rows, int64_t k, int32_t* ids, int32_t* counts) {
    return cuda::TapTopK(tap, rows, k, ids, counts);
  }

  // Tensor parallelism: x [n] float32 (device) summed over the ranks in the collective's fixed
  // order, staged through host memory (the UCX data plane's transport).
  absl::Status AllReduce(const TensorParallel& tp, float* x, int64_t n) { return ReduceThroughHost(tp, x, n, &reduce_); }
  // The latent split's attention (model/cuda/attend_split.h).
  absl::Status AttendSplit(const ModelConfig& c, int64_t heads, const T* q_abs, const T* q_pe, int64_t rows,
                           const RowOwners& owners, const TensorParallel& tp, const Cache& latent, const int32_t* sel,
                           const int32_t* offsets, T* o_lat, OwnerSplitStats* stats) {
    return AttendSplitCuda<T>(split_, c, heads, q_abs, q_pe, rows, owners, tp, latent, sel, offsets, o_lat, stats);
  }

 private:
  Workspace ws_;
  StepUpload upload_;      // the step's host inputs, one copy
  StepDownload download_;  // the step's logits and MoE error word, one wait
  std::vector<float> reduce_;  // AllReduce's host staging
  SplitScratch split_;         // AttendSplit's
};

}  // namespace ferry::model::cuda
