// GLM-5.3-Flash (`glm5_next`, Glm5NextForConditionalGeneration, text model only): four
// hyper-connected residual streams (mHC), KDA linear attention on most layers and NoPE MLA with
// the pooled indexer on the rest, SwiGLU with a clamp on every FFN, sigmoid-routed MoE.
// The vision tower in the checkpoint is not loaded. Math: docs/models.md.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/families/owner_split_lm.h"
#include "model/checkpoint/checkpoint.h"
#include "model/cache/conversation.h"
#include "model/blocks/cpu_ops.h"
#include "model/families/next_step.h"
#include "model/blocks/ffn.h"
#include "model/blocks/kda.h"
#include "model/blocks/mhc.h"
#include "model/blocks/mla.h"
#include "model/cache/paged_cache.h"
#include "model/blocks/pooled_indexer.h"
#include "model/cache/split_rows.h"

namespace ferry::model {

// The step is model/families/next_step.h's over model/blocks/cpu_ops.h. Per conversation (model/cache/conversation.h):
// on MLA layers the latent rows [L] (the latent table, on the ranks that hold them under the
// latent split: model/cache/split_rows.h) and on full indexer layers the indexer's rows in the key
// table: per token its key and pool gate, per pool of index_kpool tokens its pooled key
// (NextKeyRegion). KDA layers keep their recurrent state (conv
// tails + S, KdaStateLayout) in the conversation's fixed state, which cannot be rewound by
// position: RewindTo() works only to the current length or to a position kept with
// KeepSnapshot().
class Glm5Next final : public OwnerSplitLM {
 public:
  // KDA chunk length of the chunked (prefill) form.
  static constexpr int64_t kKdaChunk = 64;

  // Loads this rank's tensor-parallel shard (all of it when tp.world == 1).
  static absl::StatusOr<std::unique_ptr<Glm5Next>> Load(const Checkpoint& ck, const ModelConfig& c,
                                                        const TensorParallel& tp = {},
                                                        const CacheOptions& cache = {},
                                                        Nvfp4Numerics nvfp4 = Nvfp4Numerics::kW4A16);

  std::unique_ptr<SequenceState> NewSequence() const override;
  absl::StatusOr<ForwardOutput> Forward(std::span<const ForwardSegment> segments) override;

  // As Forward(); `hidden` (if non-null) gets transformers' hidden states: [0] the embeddings
  // copied to the streams [rows, S, D], [i] the streams after layer i - 1, and [num_layers]
  // the stream mean after the final norm [rows, D]. `kda_chunk` overrides the chunk length of
  // multi-token segments (0: the token-by-token recurrence everywhere).
  absl::StatusOr<ForwardOutput> ForwardWithOptions(std::span<const ForwardSegment> segments,
                                                   std::vector<std::vector<float>>* hidden,
                                                   int64_t kda_chunk = kKdaChunk);

 private:
  Glm5Next(ModelConfig c, const TensorParallel& tp)
      : OwnerSplitLM(std::move(c), tp), kda_layout_(KdaStateLayout::Of(config_, tp.Local(config_.linear_num_heads))) {}

  KdaStateLayout kda_layout_;  // this rank's KDA heads
  NextWeights<CpuOps> weights_;
  CpuOps ops_;
};

}  // namespace ferry::model
