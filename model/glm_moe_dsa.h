// GLM-5 / 5.1 / 5.2 / 5.3 (`glm_moe_dsa`, GlmMoeDsaForCausalLM): MLA with interleaved RoPE, the
// lightning indexer (full and shared layers), dense first layers, sigmoid-routed MoE with a
// shared expert. The math, op by op, is in ../shared/MODELS.md; tensors are the Hub's names.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/causal_lm.h"
#include "model/checkpoint.h"
#include "model/dsa_indexer.h"
#include "model/ffn.h"
#include "model/mla.h"
#include "model/paged_cache.h"

namespace ferry::model {

// Per conversation, on its pages: for every layer a row per token, [c (L) | k_pe (P)], followed
// on full indexer layers by the indexer key [Di].
class DsaSequence final : public SequenceState {
 public:
  explicit DsaSequence(std::shared_ptr<PageArena> arena) : rows_(std::make_unique<PagedRows>(std::move(arena))) {}
  int64_t length() const override { return length_; }
  int64_t bytes() const override;
  absl::Status RewindTo(int64_t position) override;
  absl::StatusOr<std::unique_ptr<SequenceState>> ForkAt(int64_t length, int32_t copy_page = -1) const override;
  absl::Status AdoptPages(std::span<const int32_t> pages) override { return rows_->Adopt(pages); }
  std::vector<int32_t> Pages() const override { return rows_->pages(); }
  const PagedRows& rows() const { return *rows_; }

 private:
  friend class GlmMoeDsa;
  int64_t length_ = 0;
  std::unique_ptr<PagedRows> rows_;
};

class GlmMoeDsa final : public CausalLM {
 public:
  // Loads this rank's tensor-parallel shard (all of it when tp.world == 1).
  static absl::StatusOr<std::unique_ptr<GlmMoeDsa>> Load(const Checkpoint& ck, const ModelConfig& c,
                                                         const TensorParallel& tp = {},
                                                         const CacheOptions& cache = {});

  const ModelConfig& config() const override { return config_; }
  const PageArena& arena() const override { return *arena_; }
  std::unique_ptr<SequenceState> NewSequence() const override;
  absl::StatusOr<ForwardOutput> Forward(std::span<const ForwardSegment> segments) override;

  // As Forward(), and when `hidden` is non-null also records the residual stream after every
  // layer in transformers' convention: hidden[0] the embeddings, hidden[i] the output of layer
  // i - 1, hidden[num_layers] the final-normed output; each [rows, hidden].
  absl::StatusOr<ForwardOutput> ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                  std::vector<std::vector<float>>* hidden);

 private:
  struct Layer {
    Weight input_norm, post_norm;
    MlaWeights attn;
    bool has_indexer = false;
    DsaIndexerWeights indexer;
    FfnWeights ffn;
  };

  GlmMoeDsa(ModelConfig c, const TensorParallel& tp) : config_(std::move(c)), tp_(tp) {}

  ModelConfig config_;
  TensorParallel tp_;
  std::shared_ptr<PageArena> arena_;
  Weight embed_;    // [vocab, hidden]
  Weight norm_;     // [hidden]
  Weight lm_head_;  // [vocab, hidden]
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;  // [P / 2]
};

}  // namespace ferry::model
