// glm5_next (GLM-5.3-Flash text model) on one CUDA device: model/glm5_next.h's math
// (../shared/MODELS.md) with model/cuda's precisions (bf16 to serve, f32 to verify). The four
// hyper-connected residual streams, mHC mixing, KDA state and the routing stay float32.
//
// Conversations are model::Conversation over two device arenas laid out as the CPU model's
// (Glm5Next::LatentRegions, Glm5Next::KeyRegions): per MLA layer a latent region (kv_lora wide,
// NoPE); on full indexer layers the per-token key and pool-gate regions and a pooled-key region
// of one row a pool, which lives in the page of the pool's tokens. KDA layers keep a float32
// state per conversation on the device (conv tails and S, KdaStateLayout) as its fixed state.
//
// What is naive (correctness first): prefill runs the KDA recurrence one token a launch
// (KdaRecurrentStep, the decode kernel) instead of the chunked form, and MLA prefill the decode
// attention kernel per row; the indexer scores every complete pool of every row; MoE dispatch
// syncs with the host per MoE layer. Tensor parallelism as the CPU model splits it (MLA and KDA
// heads, every MLP's intermediate rows): the float32 reductions and the latent split's exchanges
// go through the group's Collective, staged through host memory (cuda_ops.h, attend_split.h).
// This step is still a second copy of the CPU model's sequence (docs/backends.md).
// Batch invariance (CausalLM::Forward's "a row's logits do not depend on the other segments"):
// every op but the cuBLAS GEMMs computes a row alone in a fixed order; cuBLAS picks its kernel by
// the row count, so in float32 a row may move in the last bits with the step's composition
// (measured <= 4.4e-05 logits on the tiny checkpoints; in bf16 the same comparisons were exact).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/causal_lm.h"
#include "model/checkpoint.h"
#include "model/cuda/attend_split.h"
#include "model/cuda/device_buffer.h"
#include "model/cuda/device_pages.h"
#include "model/conversation.h"
#include "model/kda.h"
#include "model/cuda/ffn_cuda.h"
#include "model/decision_log.h"
#include "model/split_rows.h"
#include "model/tensor_parallel.h"

namespace ferry::model::cuda {

class Glm5NextCuda final : public CausalLM {
 public:
  // Uploads this rank's tensor-parallel shard (all of it on one rank) to the current device.
  static absl::StatusOr<std::unique_ptr<Glm5NextCuda>> Load(const Checkpoint& ck, const ModelConfig& c,
                                                            const CacheOptions& cache, const CudaLoadOptions& opts = {},
                                                            const TensorParallel& tp = {});
  // Reports each indexer top-k and MoE routing decision to `log` (null: off, the default),
  // which may pin them (model/decision_log.h; check-golden's bf16 check). Not owned.
  void set_decision_log(DecisionLog* log) { decisions_ = log; }
  const ModelConfig& config() const override { return config_; }
  // The key arena (replicated part); the latent arena holds the MLA rows.
  const PageArena& arena() const override { return *keys_arena_; }
  // The arenas' sizing for a worker's plan (PageArena::SetCapacity).
  absl::Status SizeArena(int64_t pages) override { return SizeArenas(pages, pages); }
  absl::Status SizeArenas(int64_t pages, int64_t latent_pages) override;
  int64_t page_bytes() const override { return keys_arena_->page_bytes() + latent_arena_->page_bytes(); }
  int64_t latent_page_bytes() const override { return latent_arena_->page_bytes(); }
  OwnerSplitStats owner_split_stats() const override { return split_stats_; }
  absl::Status CarryLatent(std::span<const LatentCarry> carries) override {
    return CarryLatentRows(carries, tp_, &split_stats_);
  }
  std::unique_ptr<SequenceState> NewSequence() const override;
  absl::StatusOr<ForwardOutput> Forward(std::span<const ForwardSegment> segments) override;
  // As Forward(); `hidden` (non-null) gets Glm5Next::ForwardWithOptions' hidden states: [0] the
  // embeddings in every stream [rows, S, D], [i] the streams after layer i - 1, [num_layers] the
  // final-normed stream mean [rows, D].
  absl::StatusOr<ForwardOutput> ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                  std::vector<std::vector<float>>* hidden);

 private:
  struct Mhc {
    DeviceWeight fn;  // float32 [(2 + S) S, S D]
    DeviceBuffer base, scale;
  };
  struct Layer {
    bool kda = false;
    DeviceWeight input_norm, post_norm;
    Mhc hc_attn, hc_ffn;
    // KDA
    DeviceWeight q_proj, k_proj, v_proj, f_a, f_b, g_a, g_b, b_proj, o_proj_kda;
    DeviceBuffer q_conv, k_conv, v_conv, a_log, dt_bias, o_norm;  // float32
    int64_t low_rank = 0;
    int64_t heads = 0;  // this rank's KDA or MLA heads
    // MLA (NoPE) and the pooled indexer
    DeviceWeight q_a, q_a_norm, q_b, kv_a, kv_a_norm, w_uk_t, w_uv, o_proj;
    // Regions: latent of the latent arena, key / gate / pool of the key arena.
    int64_t latent_region = -1, key_region = -1, gate_region = -1, pool_region = -1;
    bool has_indexer = false;
    DeviceWeight wq_b, wk, k_norm_w, k_norm_b, weights_proj, pool_gate;
    DeviceBuffer ape;  // float32 [kpool, Di]
    CudaFfn ffn;
  };
  template <typename T>
  struct Step;

  Glm5NextCuda(ModelConfig c, Precision p, const TensorParallel& tp)
      : config_(std::move(c)),
        precision_(p),
        tp_(tp),
        kda_layout_(KdaStateLayout::Of(config_, tp.Local(config_.linear_num_heads))) {}
  template <typename T>
  absl::StatusOr<ForwardOutput> ForwardT(std::span<const ForwardSegment> segments,
                                         std::vector<std::vector<float>>* hidden);
  template <typename T>
  absl::Status MhcIn(const Mhc& m, const T* norm, Step<T>& b);
  template <typename T>
  absl::Status Kda(size_t layer, Step<T>& b);
  template <typename T>
  absl::Status Mla(const Layer& L, Step<T>& b);

  // y [R, hidden] (this rank's partial sum under tensor parallelism) into the streams: summed over
  // the ranks in float32 first (through b.yf), then mHC's post-mixing.
  template <typename T>
  absl::Status MixOut(const T* y, Step<T>& b);

  ModelConfig config_;
  Precision precision_;
  TensorParallel tp_;
  OwnerSplitStats split_stats_;
  SplitScratch split_;           // the latent split's (attend_split.h)
  std::vector<float> reduce_;    // the reductions' host staging
  KdaStateLayout kda_layout_;
  std::shared_ptr<PageArena> keys_arena_, latent_arena_;
  DeviceWeight embed_, norm_, lm_head_;
  DeviceBuffer ones_;  // float32 [S * D]: mHC's weightless RMSNorm
  std::vector<Layer> layers_;
  Workspace ws_;
  StepUpload upload_;      // the step's host inputs, one copy
  StepDownload download_;  // the step's logits and MoE error word, one wait
  DecisionLog* decisions_ = nullptr;  // see set_decision_log
};

}  // namespace ferry::model::cuda
