// The books of a page pool: which pages are free and how many holders each used page has (a
// running conversation, a kept prompt-cache state). Pure bookkeeping, no memory: the
// coordinator keeps the books, the workers map page ids to addresses in their arenas.
//
// Invariants (CheckInvariants() verifies them):
//   - every page id in [0, num_pages) is either free (refcount 0, in the free list) or used
//     (refcount >= 1, not in the free list);
//   - free_pages() + used_pages() == num_pages().
// Allocation takes the lowest free ids first, so the same sequence of calls always yields the
// same pages (runs are reproducible).
//
// Thread safety: not thread-safe; the coordinator's scheduler thread owns the books.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ferry::kvpool {

class PageBooks {
 public:
  // REQUIRES: num_pages >= 0 and fits in int32.
  explicit PageBooks(int64_t num_pages);

  int64_t num_pages() const { return static_cast<int64_t>(refs_.size()); }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_pages() const { return num_pages() - free_pages(); }

  // Takes `n` free pages, each with one holder. RESOURCE_EXHAUSTED naming both counts when
  // fewer than n are free (then nothing is taken).
  absl::StatusOr<std::vector<int32_t>> Allocate(int64_t n);
  // Takes these particular free pages, one holder each (a worker's arena following the
  // coordinator's books). FAILED_PRECONDITION naming the page when one is used, repeated or
  // unknown (then nothing is taken).
  absl::Status Take(std::span<const int32_t> pages);
  // One more holder of each page (sharing a kept prefix). FAILED_PRECONDITION for a free or
  // unknown page (then nothing changes).
  absl::Status AddRef(std::span<const int32_t> pages);
  // One fewer holder of each page; a page left with none is free again. FAILED_PRECONDITION for
  // a free or unknown page (then nothing changes).
  absl::Status Release(std::span<const int32_t> pages);

  // Adds `more` free pages with the next ids (a pool that grows on demand).
  void Grow(int64_t more);

  // Holders of `page` (0 when free). REQUIRES: 0 <= page < num_pages().
  int32_t refcount(int32_t page) const { return refs_[static_cast<size_t>(page)]; }
  absl::Status CheckInvariants() const;

 private:
  absl::Status CheckUsed(std::span<const int32_t> pages, const char* what) const;

  std::vector<int32_t> refs_;
  std::set<int32_t> free_;
};

// Pages a conversation of `tokens` tokens needs at `page_size` tokens a page.
inline int64_t PagesFor(int64_t tokens, int64_t page_size) { return (tokens + page_size - 1) / page_size; }

}  // namespace ferry::kvpool
