// The interface every model family implements on the CPU backend: per-conversation state and a
// batched forward step over several conversations at once (continuous batching).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/sampler.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/quantization.h"
#include "model/parallel/tensor_parallel.h"

namespace ferry::model {

// One conversation's cached state (latent rows, index keys, recurrent state). Owned by the
// caller; a family's Forward() appends to it.
class SplitRows;
class DecisionLog;
class FfnObserver;

class SequenceState {
 public:
  virtual ~SequenceState() = default;
  // Tokens consumed so far (the position the next token takes).
  virtual int64_t length() const = 0;
  // Bytes of cached state held right now.
  virtual int64_t bytes() const = 0;
  // Bytes of the part that does not grow with the tokens (glm5_next: the KDA conv tails and
  // recurrent state of every KDA layer; 0 for glm_moe_dsa). Included in bytes().
  virtual int64_t fixed_bytes() const { return 0; }
  // Keeps what RewindTo(length()) will need later. A no-op for families whose every cache is
  // per token; glm5_next copies its recurrent state (fixed_bytes() more per snapshot).
  virtual void KeepSnapshot() {}
  // Forgets every token at or past `position`, as if only the first `position` tokens had been
  // fed. Per-token caches rewind anywhere; recurrent state only to a kept snapshot.
  // Errors: OUT_OF_RANGE past length(); FAILED_PRECONDITION when no snapshot exists there
  // (the state is then unchanged).
  virtual absl::Status RewindTo(int64_t position) = 0;
  // Appends pages the coordinator assigned to this conversation's page table (before the step
  // that writes them). INVALID_ARGUMENT when a page is not free in this rank's arena.
  virtual absl::Status AdoptPages(std::span<const int32_t> pages) = 0;
  // Page ids of the conversation's table, in token order.
  virtual std::vector<int32_t> Pages() const = 0;
  // A new conversation holding this one's first `length` tokens (the prompt cache resuming a
  // kept state): the whole pages are shared, the partial last page is copied into `copy_page`
  // (a page the caller's books chose; -1: the arena picks one). Per-token caches fork anywhere;
  // recurrent state only at the current length or a kept snapshot.
  // Errors: OUT_OF_RANGE past length(); FAILED_PRECONDITION without the recurrent state there;
  // RESOURCE_EXHAUSTED / INVALID_ARGUMENT when the copy page cannot be had.
  virtual absl::StatusOr<std::unique_ptr<SequenceState>> ForkAt(int64_t length, int32_t copy_page = -1) const = 0;
  absl::StatusOr<std::unique_ptr<SequenceState>> Clone() const { return ForkAt(length()); }
  // ForkAt under the latent split: the partial page's latent part is copied into
  // latent_copy_page of this rank's latent arena (a page the owner's books chose; -1: the arena
  // picks one). A rank that does not hold the latent rows ignores it. Without an owner this is
  // ForkAt(length, copy_page). Errors: ForkAt's; UNIMPLEMENTED for a family without the split.
  virtual absl::StatusOr<std::unique_ptr<SequenceState>> ForkSplitAt(int64_t length, int32_t copy_page,
                                                                     int32_t latent_copy_page) const;
  // The latent split's carry (a kept conversation resumed on another rank than its owner):
  // ForkSplitAt, but the fork's latent rows will live on `new_owner` alone and its latent table
  // starts empty on every rank; the new owner adopts pages for it and CausalLM::CarryLatent
  // fills them from the old owner. Errors: ForkSplitAt's; FAILED_PRECONDITION unless this
  // conversation's rows live on one rank other than new_owner; UNIMPLEMENTED without the split.
  virtual absl::StatusOr<std::unique_ptr<SequenceState>> ForkCarriedAt(int64_t length, int32_t copy_page,
                                                                       int new_owner) const;
  // The conversation's tables under the latent split (null for a family without it).
  virtual const SplitRows* split_rows() const { return nullptr; }
  virtual SplitRows* split_rows() { return nullptr; }

  // The latent split (docs/owner-split.md). A conversation's MLA latent rows
  // live on its owner rank only; the default owner -1 means every rank holds them (the
  // replicated layout). `borrowed`: every rank holds them for now (a prompt's fill) until
  // SetLatentOwner(owner, false) drops the other ranks' copies and their pages. With an owner,
  // AdoptPages() fills only the replicated part's table and AdoptLatentPages() the latent one.
  // Errors: FAILED_PRECONDITION for a change other than setting the owner of an empty
  // conversation or ending its borrow (nothing changes); UNIMPLEMENTED for a family without it.
  virtual absl::Status SetLatentOwner(int owner, bool borrowed);
  virtual int latent_owner() const { return -1; }
  virtual bool latent_borrowed() const { return false; }
  // Appends pages of this rank's latent arena (the owner's, or a borrower's) to the latent table.
  virtual absl::Status AdoptLatentPages(std::span<const int32_t> pages);
  // Page ids of the latent table (the replicated layout: the same as Pages()).
  virtual std::vector<int32_t> LatentPages() const { return Pages(); }
};

// A piece of one step: `tokens` appended to `state` at positions length()...
struct ForwardSegment {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits of every token, else only of the last one (unless `sample`)
  // Sample a token after the last row where its logits are (on the device for CUDA) and bring
  // back the token (ForwardOutput::picks), not the logits: with it the last row's logits come
  // back only with all_logits.
  std::optional<kernels::RowSampler> sample = std::nullopt;
};

struct ForwardOutput {
  int64_t vocab = 0;
  std::vector<float> logits;          // [rows, vocab]
  // Per segment: its first row in `logits`; -1 for a segment with no logits (a sampled one).
  std::vector<int64_t> first_row;
  // Per segment: the token sampled after its last row when it had `sample` (kernels::cpu::
  // SampleRow's pick; token -1 there when the logits were not finite); token -1 otherwise.
  std::vector<kernels::SampledToken> picks;
};

// How a model instance caches per-token state (model/cache/paged_cache.h).
struct CacheOptions {
  int64_t page_size = 512;      // tokens a page: a power of two from 16 to 1024
  int64_t capacity_pages = -1;  // pages in the arena; -1 grows as needed
};

// OK, or INVALID_ARGUMENT with the numbers.
absl::Status ValidateCacheOptions(const CacheOptions& o);

class PageArena;

// One carry of a step (docs/owner-split.md): rank `from` holds the latent rows of `src` (a kept
// conversation) and sends the first `tokens` of them to rank `to`, into `dst` (its fork by
// ForkCarriedAt, whose latent pages rank `to` adopted).
struct LatentCarry {
  const SequenceState* src = nullptr;
  SequenceState* dst = nullptr;
  int from = -1;
  int to = -1;
  int64_t tokens = 0;
};


class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  // The arena every conversation's pages come from.
  virtual const PageArena& arena() const = 0;
  // Bytes of weights this instance holds (its tensor-parallel shard); set by LoadCausalLM.
  int64_t weight_bytes() const { return weight_bytes_; }
  void set_weight_bytes(int64_t b) { weight_bytes_ = b; }

  virtual std::unique_ptr<SequenceState> NewSequence() const = 0;

  // Fixes the arena of a model loaded with a growing one (CacheOptions::capacity_pages -1) at
  // `pages` pages, allocated at once: the coordinator's plan sized it after every rank reported
  // its room. Errors: PageArena::SetCapacity's.
  virtual absl::Status SizeArena(int64_t pages) = 0;
  // The same with the latent part of a page in an arena of its own size (the latent split).
  // latent_pages == pages is SizeArena(pages).
  virtual absl::Status SizeArenas(int64_t pages, int64_t latent_pages) = 0;
  // Bytes one page of the arena takes, and one conversation's fixed state (what Ready reports).
  virtual int64_t page_bytes() const = 0;
  // Moves a step's carried latent rows (LatentCarry) before its Forward(): every rank calls it
  // with the same carries in the same order. Errors: CarryLatentRows's (model/cache/split_rows.h).
  virtual absl::Status CarryLatent(std::span<const LatentCarry> carries) = 0;
  // The latent split's traffic on this rank so far.
  virtual OwnerSplitStats owner_split_stats() const = 0;
  // The latent part of page_bytes() that the latent split keeps on owners only.
  virtual int64_t latent_page_bytes() const = 0;
  int64_t fixed_bytes_per_sequence() const { return NewSequence()->fixed_bytes(); }
  // Every later Forward() reports its indexer and routing decisions to `log` (model/golden/decision_log.h:
  // recorded, compared, or replayed and pinned), until detached with nullptr. Not owned.
  void set_decision_log(DecisionLog* log) { decisions_ = log; }
  DecisionLog* decision_log() const { return decisions_; }
  // Every later Forward() shows `observer` its MLP inputs (model/blocks/ffn.h: activation
  // calibration); nullptr detaches. The CPU backend only; the CUDA models ignore it.
  void set_ffn_observer(FfnObserver* observer) { ffn_inputs_ = observer; }
  FfnObserver* ffn_observer() const { return ffn_inputs_; }

  // Runs one step over the segments. Each segment's rows see their own conversation's earlier
  // tokens and the earlier tokens of the same segment (causal); segments never see each other,
  // and a row's logits do not depend on which other segments share the step.
  // Errors (nothing is appended to any state): INVALID_ARGUMENT for an empty segment, a token
  // id outside [0, vocab), a state of another family, or one state in two segments.
  virtual absl::StatusOr<ForwardOutput> Forward(std::span<const ForwardSegment> segments) = 0;

 private:
  int64_t weight_bytes_ = 0;
  DecisionLog* decisions_ = nullptr;
  FfnObserver* ffn_inputs_ = nullptr;
};

// Opens the checkpoint at `dir`, parses its config and loads the matching family: this rank's
// tensor-parallel shard when tp.world > 1 (every rank then runs Forward() in lockstep). `nvfp4`:
// how NVFP4 weights compute (model/blocks/ffn.h).
absl::StatusOr<std::unique_ptr<CausalLM>> LoadCausalLM(const std::string& dir, const TensorParallel& tp = {},
                                                       const CacheOptions& cache = {},
                                                       Nvfp4Numerics nvfp4 = Nvfp4Numerics::kW4A16);

// Shared validation of Forward()'s input (empty segments, token range, duplicates).
absl::Status ValidateSegments(std::span<const ForwardSegment> segments, int64_t vocab);

}  // namespace ferry::model
