// glm_moe_dsa on one CUDA device: model/families/dsa_step.h's layer sequence (the CPU model's, op by op)
// over model/cuda/cuda_ops.h: bf16 weights and activations with float32 accumulation, float32
// where MODELS.md asks for it (router logits and routing, indexer head weights and scores,
// softmax, the lm_head logits) and a float32 residual stream. Precision::kF32 runs the same
// sequence with float32 activations and weights (verification against the float32 goldens; see
// device_buffer.h). Conversations are model::Conversation over two device arenas
// (device_pages.h), as on the CPU backend: the latent arena's region l holds layer l's rows
// [c | k_pe] (kv_lora + rope wide), the key arena's region l the indexer keys of a full indexer
// layer (index_head_dim wide; 0 on shared layers).
//
// What is naive (correctness first):
//   - prefill runs MlaDecodeAttention with one query row per token (no prefill attention
//     kernel): each token re-reads its selected rows;
//   - the indexer scores every visible key of every row, also below index_topk visible tokens,
//     where TopK then keeps them all (the dense causal case);
//   - MoE dispatch above decode sizes syncs with the host once per MoE layer (expert ids to the
//     host, grouping there, one cuBLAS call per expert with rows, the experts side by side on side
//     streams);
//   - everything else runs on the default stream; no CUDA graphs.
// Tensor parallelism: the sequence's float32 reductions and the latent split's exchanges go
// through the group's Collective, staged through host memory (cuda_ops.h, attend_split.h).
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
#include "model/families/dsa_step.h"

namespace ferry::model::cuda {

class GlmMoeDsaCuda final : public OwnerSplitLM {
 public:
  // Uploads this rank's tensor-parallel shard (model/families/dsa_step.h's LoadDsaWeights: heads and
  // every MLP's intermediate rows split, the rest replicated; all of it on one rank) to the
  // current device.
  static absl::StatusOr<std::unique_ptr<GlmMoeDsaCuda>> Load(const Checkpoint& ck, const ModelConfig& c,
                                                             const CacheOptions& cache,
                                                             const CudaLoadOptions& opts = {},
                                                             const TensorParallel& tp = {});
  Precision precision() const { return precision_; }

  std::unique_ptr<SequenceState> NewSequence() const override;
  // As CausalLM::Forward. Logits come back to the host (float32); the step synchronizes.
  absl::StatusOr<ForwardOutput> Forward(std::span<const ForwardSegment> segments) override;
  // As Forward(), and when `hidden` is non-null also copies the residual stream to the host
  // after every layer, in GlmMoeDsa::ForwardWithHidden's convention (hidden[0] the embeddings,
  // hidden[i] layer i - 1's output, hidden[num_layers] the final-normed rows, bf16 widened).
  // For diagnosis (ferry-cuda-model-check): when `layer_inputs` is non-null, layer l starts from
  // layer_inputs[l] ([rows, hidden], e.g. the reference's hidden states) instead of layer l - 1's
  // output, so hidden[l + 1] shows one layer's own error. REQUIRES: num_layers entries of R * hidden.
  absl::StatusOr<ForwardOutput> ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                  std::vector<std::vector<float>>* hidden,
                                                  const std::vector<std::vector<float>>* layer_inputs = nullptr);

 private:
  // The backend and the weights of one activation type (only the loaded precision's exists).
  template <typename T>
  struct Impl {
    CudaOps<T> ops;
    DsaWeights<CudaOps<T>> weights;
  };
  template <typename T>
  static absl::Status LoadImpl(const Checkpoint& ck, const ModelConfig& c, const CudaLoadOptions& opts,
                               const TensorParallel& tp, Impl<T>* impl, int64_t* bytes);

  GlmMoeDsaCuda(ModelConfig c, Precision p, const TensorParallel& tp) : OwnerSplitLM(std::move(c), tp), precision_(p) {}
  DsaStepContext Context() {
    return {&config_, keys_arena_.get(), latent_arena_.get(), tp_, &split_stats_, decision_log()};
  }

  Precision precision_;
  PerPrecision<Impl> impl_;
};

}  // namespace ferry::model::cuda
