// glm5_next (GLM-5.3-Flash text model) on one CUDA device: model/families/next_step.h's layer sequence (the
// CPU model's, op by op) over model/cuda/cuda_ops.h, with model/cuda's precisions (bf16 to serve,
// f32 to verify). The four hyper-connected residual streams, mHC mixing, KDA state and the
// routing stay float32.
//
// Conversations are model::Conversation over two device arenas laid out as the CPU model's
// (NextLatentRegions, NextKeyRegions): per MLA layer a latent region (kv_lora wide, NoPE); on full
// indexer layers the per-token key and pool-gate regions and a pooled-key region of one row a
// pool, which lives in the page of the pool's tokens. KDA layers keep a float32 state per
// conversation on the device (conv tails and S, KdaStateLayout) as its fixed state.
//
// What is naive (correctness first): prefill runs the KDA recurrence one token a launch
// (KdaRecurrentStep, the decode kernel) instead of the chunked form, and MLA prefill the decode
// attention kernel per row; the indexer scores every complete pool of every row; MoE dispatch
// above decode sizes syncs with the host per MoE layer. Tensor parallelism as the CPU model
// splits it (MLA and KDA heads, every MLP's intermediate rows): the float32 reductions and the
// latent split's exchanges go through the group's Collective, staged through host memory.
// Batch invariance (CausalLM::Forward's "a row's logits do not depend on the other segments"):
// every op but the cuBLAS GEMMs computes a row alone in a fixed order; cuBLAS picks its kernel by
// the row count, so in float32 a row may move in the last bits with the step's composition
// (measured <= 4.4e-05 logits on the tiny checkpoints; in bf16 the same comparisons were exact).
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/families/owner_split_lm.h"
#include "model/checkpoint/checkpoint.h"
#include "model/cache/conversation.h"
#include "model/cuda/cuda_ops.h"
#include "model/cuda/device_buffer.h"
#include "model/golden/decision_log.h"
#include "model/blocks/kda.h"
#include "model/families/next_step.h"
#include "model/cache/split_rows.h"
#include "model/parallel/tensor_parallel.h"

namespace ferry::model::cuda {

class Glm5NextCuda final : public OwnerSplitLM {
 public:
  // Uploads this rank's tensor-parallel shard (all of it on one rank) to the current device.
  static absl::StatusOr<std::unique_ptr<Glm5NextCuda>> Load(const Checkpoint& ck, const ModelConfig& c,
                                                            const CacheOptions& cache, const CudaLoadOptions& opts = {},
                                                            const TensorParallel& tp = {});
  std::unique_ptr<SequenceState> NewSequence() const override;
  absl::StatusOr<ForwardOutput> Forward(std::span<const ForwardSegment> segments) override;
  // As Forward(); `hidden` (non-null) gets Glm5Next::ForwardWithOptions' hidden states: [0] the
  // embeddings in every stream [rows, S, D], [i] the streams after layer i - 1, [num_layers] the
  // final-normed stream mean [rows, D].
  absl::StatusOr<ForwardOutput> ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                  std::vector<std::vector<float>>* hidden);

 private:
  // The backend and the weights of one activation type (only the loaded precision's exists).
  template <typename T>
  struct Impl {
    CudaOps<T> ops;
    NextWeights<CudaOps<T>> weights;
  };
  template <typename T>
  static absl::Status LoadImpl(const Checkpoint& ck, const ModelConfig& c, const CudaLoadOptions& opts,
                               const TensorParallel& tp, Impl<T>* impl, int64_t* bytes);

  Glm5NextCuda(ModelConfig c, Precision p, const TensorParallel& tp)
      : OwnerSplitLM(std::move(c), tp),
        precision_(p),
        kda_layout_(KdaStateLayout::Of(config_, tp.Local(config_.linear_num_heads))) {}
  NextStepContext Context() {
    return {&config_, keys_arena_.get(), latent_arena_.get(), tp_, &split_stats_, decision_log(), &kda_layout_, 0};
  }

  Precision precision_;
  KdaStateLayout kda_layout_;  // this rank's KDA heads
  PerPrecision<Impl> impl_;
};

}  // namespace ferry::model::cuda
