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

namespace ferry::model {

// Per conversation: for every layer the latent cache rows [length, L + P], and for every full
// indexer layer the indexer key cache [length, Di] (empty for shared layers).
class DsaSequence final : public SequenceState {
 public:
  explicit DsaSequence(const ModelConfig& c);
  int64_t length() const override { return length_; }
  int64_t bytes() const override;
  absl::Status RewindTo(int64_t position) override;
  std::unique_ptr<SequenceState> Clone() const override;

 private:
  friend class GlmMoeDsa;
  int64_t latent_width_ = 0, key_width_ = 0;
  int64_t length_ = 0;
  std::vector<std::vector<float>> latent_;
  std::vector<std::vector<float>> index_keys_;
};

class GlmMoeDsa final : public CausalLM {
 public:
  // Loads this rank's tensor-parallel shard (all of it when tp.world == 1).
  static absl::StatusOr<std::unique_ptr<GlmMoeDsa>> Load(const Checkpoint& ck, const ModelConfig& c,
                                                         const TensorParallel& tp = {});

  const ModelConfig& config() const override { return config_; }
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
    bool dense = false;
    MlpWeights mlp;
    MoeWeights moe;
  };

  GlmMoeDsa(ModelConfig c, const TensorParallel& tp) : config_(std::move(c)), tp_(tp) {}

  ModelConfig config_;
  TensorParallel tp_;
  Weight embed_;    // [vocab, hidden]
  Weight norm_;     // [hidden]
  Weight lm_head_;  // [vocab, hidden]
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;  // [P / 2]
};

}  // namespace ferry::model
