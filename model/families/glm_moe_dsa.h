// GLM-5 / 5.1 / 5.2 / 5.3 (`glm_moe_dsa`, GlmMoeDsaForCausalLM) on the CPU backend: MLA with
// interleaved RoPE, the lightning indexer (full and shared layers), dense first layers,
// sigmoid-routed MoE with a shared expert. The layer sequence is model/families/dsa_step.h's, run over
// model/blocks/cpu_ops.h (float32, the reference); the CUDA model runs the same sequence
// (model/cuda/glm_moe_dsa_cuda.h). The math, op by op, is in docs/models.md; tensors are the
// Hub's names.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/families/owner_split_lm.h"
#include "model/checkpoint/checkpoint.h"
#include "model/cache/conversation.h"
#include "model/blocks/cpu_ops.h"
#include "model/families/dsa_step.h"
#include "model/cache/paged_cache.h"
#include "model/cache/split_rows.h"

namespace ferry::model {

// Per conversation (model/cache/conversation.h), on two page tables of the same page size: the latent
// table holds, for every layer, a row per token [c (L) | k_pe (P)]; the key table holds on full
// indexer layers the indexer key [Di]. The replicated layout (owner -1) fills both on every rank
// with the same page ids; under the latent split (SetLatentOwner) the key table stays on every
// rank and the latent table only on the ranks that hold the rows (the owner; every rank while
// borrowed). Region l of each arena is layer l's (DsaLatentRegions, DsaKeyRegions).
class GlmMoeDsa final : public OwnerSplitLM {
 public:
  // Loads this rank's tensor-parallel shard (all of it when tp.world == 1).
  static absl::StatusOr<std::unique_ptr<GlmMoeDsa>> Load(const Checkpoint& ck, const ModelConfig& c,
                                                         const TensorParallel& tp = {},
                                                         const CacheOptions& cache = {},
                                                         Nvfp4Numerics nvfp4 = Nvfp4Numerics::kW4A16);

  std::unique_ptr<SequenceState> NewSequence() const override;
  absl::StatusOr<ForwardOutput> Forward(std::span<const ForwardSegment> segments) override;

  // As Forward(), and when `hidden` is non-null also records the residual stream after every
  // layer in transformers' convention: hidden[0] the embeddings, hidden[i] the output of layer
  // i - 1, hidden[num_layers] the final-normed output; each [rows, hidden].
  absl::StatusOr<ForwardOutput> ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                  std::vector<std::vector<float>>* hidden);

 private:
  GlmMoeDsa(ModelConfig c, const TensorParallel& tp) : OwnerSplitLM(std::move(c), tp) {}

  DsaWeights<CpuOps> weights_;
  CpuOps ops_;
};

}  // namespace ferry::model
