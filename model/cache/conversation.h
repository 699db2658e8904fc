// One conversation's cached state, the same class for every family and backend: its page tables
// (SplitRows: the replicated part and the MLA latent rows, on the ranks that hold them), an
// optional block of fixed state that does not grow with the tokens (glm5_next: every KDA layer's
// conv tails and recurrent state), the snapshots of that block a rewind or fork can return to,
// and its length. Only where the bytes live differs between backends: the tables' arenas carry
// their PageMemory, the fixed state its StateMemory.
//
// Thread safety: not thread-safe (one model instance's step loop uses it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/families/causal_lm.h"
#include "model/cache/split_rows.h"
#include "model/families/step_rows.h"

namespace ferry::model {

// Where fixed state lives: host memory (the CPU backend) or the device (model/cuda).
class StateMemory {
 public:
  virtual ~StateMemory() = default;
  // A block of `bytes`, zeroed, freed with its last handle. RESOURCE_EXHAUSTED with the bytes.
  virtual absl::StatusOr<std::shared_ptr<void>> Zeroed(int64_t bytes) = 0;
  // A new block holding a copy of `bytes` at src.
  virtual absl::StatusOr<std::shared_ptr<void>> Copy(const void* src, int64_t bytes) = 0;
  // dst[0, bytes) <- src[0, bytes) (both blocks of this memory).
  virtual absl::Status CopyInto(void* dst, const void* src, int64_t bytes) = 0;
};
std::shared_ptr<StateMemory> HostStateMemory();

class Conversation final : public SequenceState {
 public:
  // A new, empty conversation over `rows` with `fixed_bytes` of fixed state (0: none) in
  // `memory`, zeroed. When that block cannot be had the conversation exists without it
  // (has_state() false): a model refuses it in every Forward (RESOURCE_EXHAUSTED), since
  // CausalLM::NewSequence cannot fail.
  Conversation(SplitRows rows, int64_t fixed_bytes, std::shared_ptr<StateMemory> memory);

  int64_t length() const override { return length_; }
  int64_t bytes() const override;
  int64_t fixed_bytes() const override { return fixed_bytes_; }
  // Copies the fixed state at the current length (no-op without one). When the copy cannot be
  // had the snapshot is not kept (logged), and a later RewindTo there says so.
  void KeepSnapshot() override;
  // Per-token rows rewind anywhere; the fixed state only to the current length or a snapshot.
  absl::Status RewindTo(int64_t position) override;
  absl::StatusOr<std::unique_ptr<SequenceState>> ForkAt(int64_t length, int32_t copy_page = -1) const override;
  absl::StatusOr<std::unique_ptr<SequenceState>> ForkSplitAt(int64_t length, int32_t copy_page,
                                                             int32_t latent_copy_page) const override;
  absl::StatusOr<std::unique_ptr<SequenceState>> ForkCarriedAt(int64_t length, int32_t copy_page,
                                                               int new_owner) const override;
  const SplitRows* split_rows() const override { return &rows_; }
  SplitRows* split_rows() override { return &rows_; }
  absl::Status AdoptPages(std::span<const int32_t> pages) override { return rows_.Adopt(pages); }
  std::vector<int32_t> Pages() const override { return rows_.keys().pages(); }
  absl::Status SetLatentOwner(int owner, bool borrowed) override { return rows_.SetOwner(owner, borrowed, length_); }
  int latent_owner() const override { return rows_.owner(); }
  bool latent_borrowed() const override { return rows_.borrowed(); }
  absl::Status AdoptLatentPages(std::span<const int32_t> pages) override { return rows_.AdoptLatent(pages); }
  std::vector<int32_t> LatentPages() const override { return rows_.latent().pages(); }

  SplitRows& rows() { return rows_; }
  const SplitRows& rows() const { return rows_; }
  // The fixed state block (fixed_bytes() bytes in the memory's address space); null without one.
  void* state() const { return state_.get(); }
  // Whether the fixed state exists (always, when fixed_bytes() is 0).
  bool has_state() const { return fixed_bytes_ == 0 || state_ != nullptr; }
  // Positions that hold a kept snapshot, ascending.
  std::vector<int64_t> SnapshotPositions() const;
  // A step appended `n` tokens (the model's Forward, once they are in the caches).
  void Advance(int64_t n) { length_ += n; }

 private:
  Conversation(SplitRows rows, int64_t length, int64_t fixed_bytes, std::shared_ptr<StateMemory> memory,
               std::shared_ptr<void> state)
      : rows_(std::move(rows)), length_(length), fixed_bytes_(fixed_bytes), memory_(std::move(memory)),
        state_(std::move(state)) {}
  // The conversation of the first `length` tokens (checked) with the tables fork_rows() makes.
  absl::StatusOr<std::unique_ptr<SequenceState>> ForkWith(
      int64_t length, const std::function<absl::StatusOr<SplitRows>()>& fork_rows) const;

  SplitRows rows_;
  int64_t length_ = 0;
  int64_t fixed_bytes_ = 0;
  std::shared_ptr<StateMemory> memory_;
  std::shared_ptr<void> state_;
  std::map<int64_t, std::shared_ptr<void>> snapshots_;  // position -> a copy of state_
};

// Each segment's state as a Conversation of the model whose replicated-part arena is `keys`.
// INVALID_ARGUMENT naming the segment for a state of another kind, family or model instance.
absl::StatusOr<std::vector<Conversation*>> ConversationsOf(std::span<const ForwardSegment> segments,
                                                           const PageArena& keys, const char* family);

// Grows the page tables of every segment's conversation (seqs[s], lengths[s] tokens before the
// step) for its new tokens, all or nothing, and fills `owners` for the step's rows
// (ReserveSplitRows; world: the tensor-parallel width).
absl::Status ReserveConversations(std::span<const ForwardSegment> segments, std::span<Conversation* const> seqs,
                                  std::span<const int64_t> lengths, const StepRows& rows, int world,
                                  RowOwners* owners);

// The longest page table (either arena) of the step's conversations.
int64_t TableWidth(std::span<Conversation* const> seqs);

// Every row's copy of its conversation's key and latent page tables, [rows, width] each, -1
// padded: what the kernels' paged views read. REQUIRES: width >= TableWidth(seqs).
void RowTables(std::span<Conversation* const> seqs, const StepRows& rows, int64_t width, std::vector<int32_t>* keys,
               std::vector<int32_t>* latent);

}  // namespace ferry::model
