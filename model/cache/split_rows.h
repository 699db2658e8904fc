// A conversation's two page tables under the latent split (docs/owner-split.md):
// `keys` holds what every rank keeps (indexer keys, pool gates) and `latent` the MLA latent rows,
// kept only on the ranks that hold them: the owner, or every rank while a fill borrows. Without
// an owner (-1, the replicated layout) both tables are filled on every rank with the same page
// ids. Both families' sequences keep their per-token rows here.
//
// Thread safety: not thread-safe (one model instance's step loop uses it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/families/causal_lm.h"
#include "model/cache/paged_cache.h"
#include "model/parallel/tensor_parallel.h"

namespace ferry::model {

class SplitRows {
 public:
  SplitRows(std::shared_ptr<PageArena> keys, std::shared_ptr<PageArena> latent, int rank)
      : keys_(std::make_unique<PagedRows>(std::move(keys))),
        latent_(std::make_unique<PagedRows>(std::move(latent))),
        rank_(rank) {}

  int owner() const { return owner_; }
  bool borrowed() const { return borrowed_; }
  // Whether this rank holds the latent rows.
  bool holds_latent() const { return owner_ < 0 || borrowed_ || owner_ == rank_; }
  // Whether the rows live on one rank only (queries then go to the owner).
  bool split() const { return owner_ >= 0 && !borrowed_; }

  PagedRows& keys() { return *keys_; }
  PagedRows& latent() { return *latent_; }
  const PagedRows& keys() const { return *keys_; }
  const PagedRows& latent() const { return *latent_; }
  int64_t bytes() const;

  // SequenceState's contracts (causal_lm.h); `length` is the conversation's length.
  absl::Status SetOwner(int owner, bool borrowed, int64_t length);
  absl::Status Adopt(std::span<const int32_t> pages);
  absl::Status AdoptLatent(std::span<const int32_t> pages);
  absl::Status Truncate(int64_t n);
  absl::StatusOr<SplitRows> Fork(int64_t n, int32_t copy_page, int32_t latent_copy_page) const;
  // A carry (docs/owner-split.md): a fork of the first n tokens whose latent rows will live on
  // `new_owner` alone. The keys are forked as in Fork(); the latent table starts empty on every
  // rank (the new owner adopts pages and receives the rows, CarryLatentRows below).
  // FAILED_PRECONDITION unless this conversation's rows live on one rank other than new_owner.
  absl::StatusOr<SplitRows> ForkCarried(int64_t n, int32_t copy_page, int new_owner) const;
  // The tables to grow for a step that appends tokens (the latent one where this rank holds it).
  void AppendTables(std::vector<PagedRows*>* tables);

 private:
  std::unique_ptr<PagedRows> keys_;
  std::unique_ptr<PagedRows> latent_;
  int rank_ = 0;
  int owner_ = -1;
  bool borrowed_ = false;
};

// Per row of a step: the rank that alone holds its conversation's latent rows (-1: every rank
// holds them), and whether this rank does.
struct RowOwners {
  std::vector<int> owner;
  std::vector<uint8_t> held;
  // Rows of prompt chunks (pieces of two or more tokens) whose rows live on one rank: the other
  // ranks fetch the rows their selections name instead of shipping queries (history fetch).
  std::vector<uint8_t> fetch;
  std::vector<int64_t> group;  // the row's conversation in the step (seg_of)
  bool split = false;  // some row's latent rows live on one rank: attention goes through owners
};

// Grows every conversation's tables (conversation s: rows[s], lengths[s] + adds[s] tokens; a
// refused step gives back what it took) and fills `owners` for the step's rows (seg_of[r]: the
// conversation of row r). world: the tensor-parallel width (1: nothing is split).
absl::Status ReserveSplitRows(std::span<SplitRows* const> rows, std::span<const int64_t> lengths,
                              std::span<const int64_t> adds, std::span<const int64_t> seg_of, int world,
                              RowOwners* owners);

// Runs a step's carries (causal_lm.h's LatentCarry: a kept conversation resumed on a rank other
// than its owner; src and dst are SequenceStates whose split_rows() hold the tables; src is read
// on `from` only and dst written on `to` only). Every rank calls it with the same carries in the
// same order (they come from the step). The rows go in exchanges of at most FetchPieceFloats()
// floats a peer (model/blocks/mla.h), as many as the largest stream needs (every rank computes it), each
// (from, to) stream packed in carry order, each carry layer by layer in token order, and packed
// and unpacked a piece at a time (never the whole stream in memory). The values arrive bit for
// bit. Counts rows_carried (on `to`) and the floats sent.
// Errors: INVALID_ARGUMENT for a carry whose ranks are out of range or equal, or whose src (on
// `from`) or dst (on `to`) cannot address `tokens` rows (nothing is sent: a broken invariant of
// the step on one rank, whose peers then fail in the exchange within the collective's timeout);
// the collective's.
absl::Status CarryLatentRows(std::span<const LatentCarry> carries, const TensorParallel& tp, OwnerSplitStats* stats);

}  // namespace ferry::model
