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
#include "model/families/causal_lm.h"
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
class GlmMoeDsa final : public CausalLM {
 public:
  // Loads this rank's tensor-parallel shard (all of it when tp.world == 1).
  static absl::StatusOr<std::unique_ptr<GlmMoeDsa>> Load(const Checkpoint& ck, const ModelConfig& c,
                                                         const TensorParallel& tp = {},
                                                         const CacheOptions& cache = {},
                                                         Nvfp4Numerics nvfp4 = Nvfp4Numerics::kW4A16);

  const ModelConfig& config() const override { return config_; }
  // The key arena (replicated part); the latent arena is latent_arena().
  const PageArena& arena() const override { return *keys_arena_; }
  const PageArena& latent_arena() const { return *latent_arena_; }
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

  // As Forward(), and when `hidden` is non-null also records the residual stream after every
  // layer in transformers' convention: hidden[0] the embeddings, hidden[i] the output of layer
  // i - 1, hidden[num_layers] the final-normed output; each [rows, hidden].
  absl::StatusOr<ForwardOutput> ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                  std::vector<std::vector<float>>* hidden);

 private:
  GlmMoeDsa(ModelConfig c, const TensorParallel& tp) : config_(std::move(c)), tp_(tp) {}

  ModelConfig config_;
  TensorParallel tp_;
  std::shared_ptr<PageArena> keys_arena_, latent_arena_;
  OwnerSplitStats split_stats_;
  DsaWeights<CpuOps> weights_;
  CpuOps ops_;
};

}  // namespace ferry::model
