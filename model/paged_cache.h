// Paged token caches on the CPU backend. A PageArena holds pages of `page_size` token rows; a
// page stores, for every layer that caches per-token state, that layer's rows of the page's
// tokens (MLA latent + rope part, indexer keys, pool gates). A conversation's PagedRows maps its
// token t to page pages()[t / page_size], slot t % page_size. Attention and the indexers read
// through that table; the values and their summation order are those of a contiguous cache, so
// results are bit-identical whatever the page size.
//
// Pages are reference-counted: a fork (a kept prompt-cache state, a resumed conversation) shares
// the whole pages of its prefix and copies the partial last one; a conversation only ever writes
// tokens at or past its length, and Truncate() copies a shared page before it could be written.
//
// Thread safety: not thread-safe; one model instance (one worker's step loop) uses its arena.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kvpool/page_books.h"

namespace ferry::model {

// Reads a cached row: token `token` of the conversation that step row `row` belongs to.
using RowOf = std::function<const float*(int64_t row, int64_t token)>;

class PageArena {
 public:
  // widths[l]: floats layer l caches a token (0: none). capacity: pages it may hold; -1 grows
  // as needed (in-process use without a memory plan).
  // REQUIRES: page_size >= 1.
  PageArena(std::vector<int64_t> widths, int64_t page_size, int64_t capacity = -1);

  int64_t page_size() const { return page_size_; }
  int64_t width(int64_t layer) const { return widths_[static_cast<size_t>(layer)]; }
  int64_t num_layers() const { return static_cast<int64_t>(widths_.size()); }
  int64_t page_floats() const { return page_floats_; }
  int64_t capacity() const { return capacity_; }
  int64_t used_pages() const;
  // Bytes one page takes (page_floats() float32 values).
  int64_t page_bytes() const { return page_floats_ * static_cast<int64_t>(sizeof(float)); }

  // Fixes a growing arena at `pages` pages, allocated at once in one block (the coordinator's
  // plan chose the size; its books then hand out ids below it). The block is not touched
  // here, so the operating system commits its memory as pages are first written.
  // Errors: FAILED_PRECONDITION when the arena is fixed already or has handed out a page;
  // INVALID_ARGUMENT for pages < 1 or past the int32 page ids; RESOURCE_EXHAUSTED when the
  // allocation fails (with the bytes).
  absl::Status SetCapacity(int64_t pages);

  // A page with one holder. RESOURCE_EXHAUSTED (with the counts) when a fixed arena is full.
  absl::StatusOr<int32_t> Allocate();
  // Takes the given free pages, each with one holder (the coordinator's books chose them).
  // INVALID_ARGUMENT naming the page when one is outside the arena or not free (then none is
  // taken).
  absl::Status Take(std::span<const int32_t> pages);
  void AddRef(int32_t page);
  void Release(int32_t page);
  int32_t refcount(int32_t page) const;

  // Layer `layer`'s row of slot `slot` of `page` (width(layer) floats).
  float* Row(int32_t page, int64_t layer, int64_t slot) {
    return pages_[static_cast<size_t>(page)] + offsets_[static_cast<size_t>(layer)] * page_size_ +
           slot * widths_[static_cast<size_t>(layer)];
  }

 private:
  std::vector<int64_t> widths_;
  std::vector<int64_t> offsets_;  // per layer: floats before its rows, per token of the page
  int64_t page_size_;
  int64_t page_floats_;
  int64_t capacity_;
  kvpool::PageBooks books_;
  std::vector<std::unique_ptr<float[]>> blocks_;  // the storage: one block a growth
  std::vector<float*> pages_;                      // page id -> its first float
  // Adds `pages` pages in one block.
  absl::Status AddBlock(int64_t pages);
};

// One conversation's page table.
class PagedRows {
 public:
  explicit PagedRows(std::shared_ptr<PageArena> arena) : arena_(std::move(arena)) {}
  ~PagedRows();
  PagedRows(const PagedRows&) = delete;
  PagedRows& operator=(const PagedRows&) = delete;

  // Pages for tokens [0, n). RESOURCE_EXHAUSTED from the arena (then nothing changes).
  absl::Status Reserve(int64_t n);
  // Appends pages the caller chose (PageArena::Take) to the table.
  absl::Status Adopt(std::span<const int32_t> pages);
  // Token t's row at `layer`. REQUIRES: t < reserved tokens.
  float* Row(int64_t layer, int64_t t) {
    const int64_t p = arena_->page_size();
    return arena_->Row(pages_[static_cast<size_t>(t / p)], layer, t % p);
  }
  const float* Row(int64_t layer, int64_t t) const {
    const int64_t p = arena_->page_size();
    return arena_->Row(pages_[static_cast<size_t>(t / p)], layer, t % p);
  }
  // Forgets tokens >= n: releases whole pages past it; a shared page that n cuts is copied
  // first, so later writes cannot reach the other holders.
  absl::Status Truncate(int64_t n);
  // A table for the first n tokens of this one: shares the whole pages, copies the partial one
  // into `copy_page` (taken from the arena; -1: allocated by the arena).
  absl::StatusOr<std::unique_ptr<PagedRows>> Fork(int64_t n, int32_t copy_page = -1) const;

  const std::vector<int32_t>& pages() const { return pages_; }
  int64_t reserved_tokens() const { return static_cast<int64_t>(pages_.size()) * arena_->page_size(); }
  PageArena& arena() const { return *arena_; }
  const std::shared_ptr<PageArena>& shared_arena() const { return arena_; }

 private:
  std::shared_ptr<PageArena> arena_;
  std::vector<int32_t> pages_;
};

}  // namespace ferry::model
