// glm5_next (GLM-5.3-Flash text model) on one CUDA device: model/glm5_next.h's math
// (../shared/MODELS.md) with model/cuda's precisions (bf16 to serve, f32 to verify). The four
// hyper-connected residual streams, mHC mixing, KDA state and the routing stay float32.
//
// Cache: DevicePages with, per MLA layer, a latent region (kv_lora wide, NoPE) and on full
// indexer layers the per-token key and pool-gate regions plus a pool-key region where pool p
// sits at slot p (a pool's index is below its first token, so the conversation's pages hold it).
// KDA layers keep a float32 state per conversation on the device (conv tails and S).
//
// What is naive (correctness first): prefill runs the KDA recurrence one token a launch
// (KdaRecurrentStep, the decode kernel) instead of the chunked form, and MLA prefill the decode
// attention kernel per row; the indexer scores every complete pool of every row; MoE dispatch
// syncs with the host per MoE layer. Tensor parallelism: one rank only.
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
#include "model/cuda/device_buffer.h"
#include "model/cuda/device_pages.h"
#include "model/cuda/ffn_cuda.h"
#include "model/decision_log.h"

namespace ferry::model::cuda {

// Where each KDA layer's state lives inside a conversation's state block (float32 offsets).
struct NextStateLayout {
  std::vector<int64_t> conv;  // per layer: [3 (q, k, v), K - 1, C], -1 on MLA layers
  std::vector<int64_t> s;     // per layer: [H, d, d], -1 on MLA layers
  int64_t floats = 0;
};

class NextCudaSequence final : public SequenceState {
 public:
  // The state block starts zeroed. REQUIRES: a live CUDA device.
  static absl::StatusOr<std::unique_ptr<NextCudaSequence>> Create(std::shared_ptr<DevicePages> pages,
                                                                  std::shared_ptr<const NextStateLayout> layout,
                                                                  int64_t kpool);
  int64_t length() const override { return length_; }
  int64_t bytes() const override;
  int64_t fixed_bytes() const override { return layout_->floats * static_cast<int64_t>(sizeof(float)); }
  // Copies the KDA state at the current length (a device copy; when the copy cannot be had the
  // snapshot is not kept, and a later RewindTo there says so).
  void KeepSnapshot() override;
  absl::Status RewindTo(int64_t position) override;
  absl::StatusOr<std::unique_ptr<SequenceState>> ForkAt(int64_t length, int32_t copy_page = -1) const override;
  absl::Status AdoptPages(std::span<const int32_t> pages) override { return table_->Adopt(pages); }
  std::vector<int32_t> Pages() const override { return table_->ids(); }

 private:
  friend class Glm5NextCuda;
  NextCudaSequence(std::shared_ptr<DevicePages> pages, std::shared_ptr<const NextStateLayout> layout, int64_t kpool)
      : table_(std::make_unique<DevicePageTable>(std::move(pages))), layout_(std::move(layout)), kpool_(kpool) {}
  float* state() const { return state_.as<float>(); }
  std::vector<int64_t> SnapshotPositions() const;

  int64_t length_ = 0;
  std::unique_ptr<DevicePageTable> table_;
  std::shared_ptr<const NextStateLayout> layout_;
  int64_t kpool_ = 1;
  DeviceBuffer state_;                          // layout_->floats
  std::map<int64_t, DeviceBuffer> snapshots_;  // position -> a copy of state_
};

class Glm5NextCuda final : public CausalLM {
 public:
  static absl::StatusOr<std::unique_ptr<Glm5NextCuda>> Load(const Checkpoint& ck, const ModelConfig& c,
                                                            const CacheOptions& cache,
                                                            Precision precision = Precision::kBf16);
  // Reports each indexer top-k and MoE routing decision to `log` (null: off, the default),
  // which may pin them (model/decision_log.h; check-golden's bf16 check). Not owned.
  void set_decision_log(DecisionLog* log) { decisions_ = log; }
  const ModelConfig& config() const override { return config_; }
  const PageArena& arena() const override { return pages_->books(); }
  // The device arena's sizing and page size for a worker's plan (DevicePages::SetCapacity; a page
  // holds every region of every layer, bf16 or float32). page_bytes must be overridden: arena()
  // counts no bytes itself (its rows are zero wide: the pages live on the device).
  absl::Status SizeArena(int64_t pages) override { return pages_->SetCapacity(pages); }
  int64_t page_bytes() const override { return pages_->page_bytes(); }
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
    // MLA (NoPE) and the pooled indexer
    DeviceWeight q_a, q_a_norm, q_b, kv_a, kv_a_norm, w_uk_t, w_uv, o_proj;
    int latent_region = -1, key_region = -1, gate_region = -1, pool_region = -1;
    bool has_indexer = false;
    DeviceWeight wq_b, wk, k_norm_w, k_norm_b, weights_proj, pool_gate;
    DeviceBuffer ape;  // float32 [kpool, Di]
    CudaFfn ffn;
  };
  template <typename T>
  struct Step;

  Glm5NextCuda(ModelConfig c, Precision p) : config_(std::move(c)), precision_(p) {}
  template <typename T>
  absl::StatusOr<ForwardOutput> ForwardT(std::span<const ForwardSegment> segments,
                                         std::vector<std::vector<float>>* hidden);
  template <typename T>
  absl::Status MhcIn(const Mhc& m, const T* norm, Step<T>& b);
  template <typename T>
  absl::Status Kda(size_t layer, Step<T>& b);
  template <typename T>
  absl::Status Mla(const Layer& L, Step<T>& b);

  ModelConfig config_;
  Precision precision_;
  std::shared_ptr<DevicePages> pages_;
  std::shared_ptr<const NextStateLayout> layout_;
  DeviceWeight embed_, norm_, lm_head_;
  DeviceBuffer ones_;  // float32 [S * D]: mHC's weightless RMSNorm
  std::vector<Layer> layers_;
  Workspace ws_;
  StepUpload upload_;      // the step's host inputs, one copy
  StepDownload download_;  // the step's logits and MoE error word, one wait
  DecisionLog* decisions_ = nullptr;  // see set_decision_log
};

}  // namespace ferry::model::cuda
