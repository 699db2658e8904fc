// What every family shares on either backend: a cache of two arenas under the owner split
// (docs/owner-split.md). The key arena holds the rows every rank keeps (the indexer keys; on
// glm5_next also the pool gates and pooled keys); the latent arena holds the MLA latent rows, which
// live on their conversation's owner rank only (every rank while replicated). A family's model
// derives from this and adds its weights, its step and its per-conversation fixed state.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "absl/status/status.h"
#include "model/cache/conversation.h"
#include "model/cache/paged_cache.h"
#include "model/cache/split_rows.h"
#include "model/families/causal_lm.h"

namespace ferry::model {

class OwnerSplitLM : public CausalLM {
 public:
  const ModelConfig& config() const override { return config_; }
  // The key arena (the replicated part); the latent arena is latent_arena().
  const PageArena& arena() const override { return *keys_arena_; }
  const PageArena& latent_arena() const { return *latent_arena_; }
  absl::Status SizeArena(int64_t pages) override { return SizeArenas(pages, pages); }
  absl::Status SizeArenas(int64_t pages, int64_t latent_pages) override;
  int64_t page_bytes() const override { return keys_arena_->page_bytes() + latent_arena_->page_bytes(); }
  int64_t latent_page_bytes() const override { return latent_arena_->page_bytes(); }
  OwnerSplitStats owner_split_stats() const override { return split_stats_; }
  absl::Status CarryLatent(std::span<const LatentCarry> carries) override;

 protected:
  OwnerSplitLM(ModelConfig c, const TensorParallel& tp) : config_(std::move(c)), tp_(tp) {}

  // A new conversation over the two arenas whose fixed state (`fixed_bytes`: a KDA layer's
  // recurrent state, 0 for none) lives in `memory` (host or device).
  std::unique_ptr<SequenceState> NewConversation(int64_t fixed_bytes, std::shared_ptr<StateMemory> memory) const;

  ModelConfig config_;
  TensorParallel tp_;
  // Set by the family's loader: the backend decides where the pages live.
  std::shared_ptr<PageArena> keys_arena_, latent_arena_;
  OwnerSplitStats split_stats_;
};

}  // namespace ferry::model
