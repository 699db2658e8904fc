// The CPU backend of the layer sequences written once over a backend (model/families/dsa_step.h): the ops
// of model/cuda/act_ops.h under the same names and argument lists, over host float32 buffers,
// computed by the float32 references of kernels/cpu (and the family blocks that compose them),
// so a row's values are those of the CPU reference whatever the step holds. "Device" pointers
// are host pointers here; a copy to or from the "device" is a memcpy.
//
// Thread safety: none; one model instance's step loop owns its CpuOps.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/sampler.h"
#include "model/checkpoint/config.h"
#include "model/golden/decision_log.h"
#include "model/blocks/ffn.h"
#include "model/blocks/kda.h"
#include "model/blocks/mhc.h"
#include "model/cache/paged_cache.h"
#include "model/parallel/tensor_parallel.h"
#include "model/checkpoint/weights.h"

namespace ferry::model {

class CpuOps {
 public:
  using Act = float;
  using WeightT = Weight;
  using Floats = Weight;  // a float32 vector kept as it is (RoPE's inverse frequencies)
  using Ffn = FfnWeights;
  // glm5_next's blocks (model/families/next_step.h): an mHC site's weights and its per-token mix, a KDA
  // layer's weights and the step's KDA scratch.
  using Mhc = MhcWeights;
  using MhcMix = model::MhcMix;
  using KdaLayer = KdaWeights;
  struct KdaScratch {
    KdaInputs in;
    std::vector<float> o;
  };
  static int64_t KdaLowRank(const KdaLayer& k) { return k.f_a.rows; }
  struct FfnScratch {
    float* error = nullptr;  // no device dispatch, no error word
  };
  // Region `region` of a host arena through `table` [rows, stride]: token t of row r is
  // arena->Row(table[r * stride + t / rows], region, t % rows). A row with no page there (-1: its
  // latent rows live on another rank) has no rows: Held() is false.
  struct Cache {
    PageArena* arena = nullptr;
    int64_t region = 0;
    const int32_t* table = nullptr;
    int64_t stride = 0;
    bool Held(int64_t r, int64_t t) const { return table[r * stride + t / arena->rows(region)] >= 0; }
    const float* Row(int64_t r, int64_t t) const {
      const int64_t n = arena->rows(region);
      return arena->Row(table[r * stride + t / n], region, t % n);
    }
    float* Row(int64_t r, int64_t t) {
      const int64_t n = arena->rows(region);
      return arena->Row(table[r * stride + t / n], region, t % n);
    }
  };
  struct LinearProblem {
    const float* x;
    int64_t in;
    const float* w;
    int64_t out;
    float* y;
  };
  struct Part {
    const void* data;
    size_t bytes;
  };
  struct Download {
    void* host;
    const void* device;
    size_t bytes;
  };

  // Step scratch: every block handed out since the last Reset stays valid until the next one.
  absl::Status Reset();
  template <typename T>
  absl::StatusOr<T*> Take(int64_t n) {
    blocks_.emplace_back(static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(T) + 1);
    return reinterpret_cast<T*>(blocks_.back().data());
  }
  // The step's host inputs as the ops read them: the same memory (it outlives the step).
  absl::StatusOr<std::vector<void*>> Send(std::initializer_list<Part> parts);
  absl::Status Receive(std::initializer_list<Download> parts);
  absl::Status ToHost(void* host, const void* src, size_t bytes);
  absl::Status ToDevice(void* dst, const void* host, size_t bytes);
  absl::StatusOr<std::vector<float>> Upload(const std::vector<float>& v) { return v; }
  Cache View(PageArena& arena, int64_t region, const int32_t* table, int64_t stride) const {
    return Cache{&arena, region, table, stride};
  }

  // act_ops.h's ops (the contracts are kernels/cuda/ops.h's; all float32 here).
  absl::Status Embed(const float* table, int64_t vocab, int64_t dim, const int32_t* ids, int64_t rows, float* x);
  absl::Status Linear(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y);
  absl::Status LinearMany(std::span<const LinearProblem> p, int64_t rows);
  absl::Status LinearToF32(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float alpha,
                           float* y);
  absl::Status BatchedLinear(const float* x, int64_t x_batch, int64_t x_row, int64_t rows, int64_t in, const float* w,
                             int64_t w_batch, int64_t out, float* y, int64_t y_batch, int64_t y_row, int64_t batch);
  absl::Status RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y);
  absl::Status NormResidual(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y) {
    return RmsNorm(x, rows, dim, w, eps, y);
  }
  absl::Status LayerNorm(const float* x, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
                         float* y);
  absl::Status Rope(float* x, int64_t rows, int64_t heads, int64_t row_stride, int64_t head_stride, int64_t offset,
                    int64_t dim, const int64_t* pos, const float* inv_freq);
  absl::Status CopyRows(const float* src, int64_t src_stride, const int32_t* src_idx, float* dst, int64_t dst_stride,
                        const int32_t* dst_idx, int64_t rows, int64_t cols);
  // Rows without a page at their position (Cache::Held) are skipped.
  absl::Status WritePaged(const float* src, int64_t rows, int64_t src_stride, int64_t cols, int64_t col_offset,
                          const int64_t* pos, Cache cache);
  absl::Status AddResidual(float* x, const float* y, int64_t n);
  absl::Status ToF32(const float* x, int64_t n, float* y);
  absl::Status IndexerScores(const float* qi, const float* w, int64_t rows, int64_t heads, int64_t dim,
                             const Cache& keys, const int32_t* n_keys, float scale, float* scores, int64_t stride);
  absl::Status TopK(const float* scores, int64_t rows, int64_t cols, const int32_t* lengths, int64_t k, int32_t* ids,
                    int32_t* counts);
  absl::Status CompactSelection(const int32_t* ids, const int32_t* counts, int64_t rows, int64_t k, int32_t* sel,
                                int32_t* offsets);
  int64_t MlaWorkspaceBytes(int64_t, int64_t) const { return 0; }
  absl::Status MlaDecode(const float* q_abs, const float* q_pe, int64_t rows, int64_t heads, int64_t latent,
                         int64_t rope, const Cache& cache, const int32_t* sel, const int32_t* offsets, float scale,
                         float* out, void* workspace, int64_t workspace_bytes);
  absl::StatusOr<FfnScratch> TakeFfnScratch(const ModelConfig&, int64_t) { return FfnScratch{}; }
  // x = (or +=) FFN(a) (MoeForward / MlpForward in float32); an attached decision tap sees, and
  // on replay pins, each MoE layer's routing.
  absl::Status FfnAdd(const Ffn& f, const ModelConfig& c, const float* a, int64_t rows, const FfnScratch& s, float* y,
                      float* x, const DecisionTap& tap, bool assign = false);
  absl::Status FfnError(int32_t, int64_t) const { return absl::OkStatus(); }
  absl::Status TapTopK(const DecisionTap& tap, int64_t rows, int64_t k, int32_t* ids, int32_t* counts);
  // out[r] = the token sampled from logits [rows, vocab] row r by samplers[r] (cpu::SampleRow).
  absl::Status Sample(const float* logits, int64_t rows, int64_t vocab, const kernels::RowSampler* samplers,
                      kernels::SampledToken* out);

  // glm5_next's blocks, the CPU reference's: model/blocks/mhc.h, model/blocks/kda.h (its chunked prefill),
  // model/blocks/pooled_indexer.h.
  absl::StatusOr<MhcMix> TakeMhcMix(const ModelConfig&, int64_t) { return MhcMix{}; }
  absl::StatusOr<KdaScratch> TakeKdaScratch(const ModelConfig&, int64_t, int64_t, int64_t) { return KdaScratch{}; }
  // h [R, S, D] <- x [R, D] in every stream.
  absl::Status MhcStreams(const float* x, int64_t rows, int64_t streams, int64_t dim, float* h);
  // An mHC site: its mix from the streams h, the site input u [R, D] and u RMS-normed by `norm` into a.
  absl::Status MhcIn(const Mhc& m, const ModelConfig& c, const float* h, int64_t rows, const float* norm, MhcMix& mix,
                     float* u, float* a);
  // h <- the site's post-mixing of the block output y [R, D] (MhcPost).
  absl::Status MhcOut(const MhcMix& mix, const ModelConfig& c, const float* y, int64_t rows, float* h);
  // u [R, D] = the streams' unweighted mean, a = RMSNorm(u) (mean_w unused: the mean divides by S).
  absl::Status StreamMeanNorm(const float* h, const float* mean_w, int64_t rows, int64_t streams, int64_t dim,
                              const float* norm, float eps, float* u, float* a);
  // y [R, D] = the KDA block of a [R, D] (this rank's partial sum), each conversation's rows
  // through its state (KdaProject, KdaRun with segs.chunk on multi-token pieces, KdaOutput).
  absl::Status Kda(const KdaLayer& w, int64_t layer, const ModelConfig& c, const float* a, int64_t rows,
                   const KdaSegments& segs, KdaScratch& s, float* y);
  // Pools [p0, p1) of step row `row`'s conversation from its cached keys and gates
  // (PooledIndexerPools).
  absl::Status PooledKeys(const Cache& keys, const Cache& gates, const Cache& pools, int64_t row, int64_t p0, int64_t p1,
                          int64_t kpool, const float* ape);
  // kernels::cuda::ExpandPoolSelection's contract: the pooled selection's CSR rows.
  absl::Status ExpandPoolSelection(const int32_t* pool_ids, int64_t k, const int64_t* pos, int64_t rows, int64_t kpool,
                                   const int32_t* offsets, int32_t* sel);

  // Tensor parallelism: x [n] float32 summed over the ranks (TensorParallel::Reduce).
  absl::Status AllReduce(const TensorParallel& tp, float* x, int64_t n) { return tp.Reduce(x, n); }
  // The latent split's attention (model/blocks/mla.h's MlaAttendSplit) for the step's rows: q_abs
  // [R, heads, L], q_pe [R, heads, P], the selection in CSR form, the rows' latent cache; o_lat
  // [R, heads, L]. `owners` as ReserveSplitRows fills it.
  absl::Status AttendSplit(const ModelConfig& c, int64_t heads, const float* q_abs, const float* q_pe, int64_t rows,
                           const struct RowOwners& owners, const TensorParallel& tp, const Cache& latent,
                           const int32_t* sel, const int32_t* offsets, float* o_lat, OwnerSplitStats* stats);

 private:
  std::vector<std::vector<unsigned char>> blocks_;
};

}  // namespace ferry::model
