// Paged token caches, on either backend. A PageArena holds pages of `page_size` token rows; a
// page stores, for every region (one cached quantity of one layer: MLA latent rows, indexer
// keys, pool gates, pooled keys), that region's rows of the page's tokens. A conversation's
// PagedRows maps its token t to page pages()[t / page_size]; a region that keeps one row per
// `divisor` tokens (glm5_next's pooled keys: one a pool) holds row i of that page's
// page_size / divisor at slot i % (page_size / divisor), so every row lives in the page of the
// tokens it is made of. Attention and the indexers read through the table; the values and their
// summation order are those of a contiguous cache, so results are bit-identical whatever the
// page size.
//
// Layout of a page (what kernels/cuda/ops.h's PagedCache* views address): region i starts at
// element region_offset(i) and holds rows(i) rows of width(i) values, contiguous; a page is
// page_elems() values of elem_bytes() each. Where the pages live is the arena's PageMemory: host
// memory (the CPU backend: float32 values, Row() gives a pointer) or one device block
// (model/cuda/device_pages.h: bf16 or float32 values).
//
// Pages are reference-counted: a fork (a kept prompt-cache state, a resumed conversation) shares
// the whole pages of its prefix and copies the partial last one; a conversation only ever writes
// rows of tokens at or past its length (a pooled row when its pool's last token is written), and
// Truncate() copies a shared page before it could be written.
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

// Where an arena's pages live. Page p is page_bytes contiguous bytes at Page(p).
class PageMemory {
 public:
  virtual ~PageMemory() = default;
  // Bytes of one stored value: 4 (float32) or 2 (bf16).
  virtual int64_t elem_bytes() const = 0;
  // Whether Page() addresses host memory the CPU may read and write.
  virtual bool host() const = 0;
  // Pages addressable now.
  virtual int64_t pages() const = 0;
  // Makes at least pages [0, pages) addressable, keeping the bytes of those held so far (a
  // device block may move: device addresses are valid only until the next call).
  // RESOURCE_EXHAUSTED with the bytes when the memory cannot be had (then nothing changes).
  virtual absl::Status Grow(int64_t pages, int64_t page_bytes) = 0;
  // Exactly `pages` pages, the old contents dropped (the arena is fixed before any page is used).
  virtual absl::Status Reset(int64_t pages, int64_t page_bytes) = 0;
  // The first byte of page p. REQUIRES: p < pages().
  virtual char* Page(int32_t p) const = 0;
  // Copies page src's bytes into page dst.
  virtual absl::Status CopyPage(int32_t dst, int32_t src, int64_t page_bytes) = 0;
  // Copies `bytes` bytes at byte `offset` of page p into host memory `dst` (Read), or host
  // memory `src` into them (Write): how what is not host memory is reached from the host.
  virtual absl::Status Read(int32_t p, int64_t offset, void* dst, int64_t bytes) const = 0;
  virtual absl::Status Write(int32_t p, int64_t offset, const void* src, int64_t bytes) = 0;
};

// Float32 pages in host memory, one block a growth (earlier pages never move).
std::unique_ptr<PageMemory> HostPageMemory();

// One region of a page: `width` values a row, one row per `divisor` tokens.
struct PageRegion {
  explicit PageRegion(int64_t width, int64_t divisor = 1) : width(width), divisor(divisor) {}
  int64_t width = 0;
  int64_t divisor = 1;
};

class PageArena {
 public:
  // widths[i]: values region i caches a token (0: none). capacity: pages it may hold; -1 grows
  // as needed (in-process use without a memory plan). memory: null for HostPageMemory().
  // REQUIRES: page_size >= 1; a capacity > 0 that the memory can hold (aborts otherwise).
  PageArena(std::vector<int64_t> widths, int64_t page_size, int64_t capacity = -1,
            std::unique_ptr<PageMemory> memory = nullptr);
  // The same with regions that keep a row per `divisor` tokens.
  // REQUIRES: every divisor >= 1 divides page_size.
  PageArena(std::vector<PageRegion> regions, int64_t page_size, int64_t capacity = -1,
            std::unique_ptr<PageMemory> memory = nullptr);

  int64_t page_size() const { return page_size_; }
  int64_t num_regions() const { return static_cast<int64_t>(regions_.size()); }
  int64_t width(int64_t region) const { return regions_[static_cast<size_t>(region)].width; }
  int64_t divisor(int64_t region) const { return regions_[static_cast<size_t>(region)].divisor; }
  // Rows of `region` in one page (page_size / divisor).
  int64_t rows(int64_t region) const { return page_size_ / divisor(region); }
  int64_t region_offset(int64_t region) const { return offsets_[static_cast<size_t>(region)]; }
  int64_t page_elems() const { return page_elems_; }
  int64_t capacity() const { return capacity_; }
  int64_t used_pages() const;
  // Bytes one page takes.
  int64_t page_bytes() const { return page_elems_ * memory_->elem_bytes(); }
  PageMemory& memory() const { return *memory_; }

  // Fixes a growing arena at `pages` pages, allocated at once (the coordinator's plan chose the
  // size; its books then hand out ids below it). Host memory is not touched here, so the
  // operating system commits it as pages are first written.
  // Errors: FAILED_PRECONDITION when the arena is fixed already or a page is in use;
  // INVALID_ARGUMENT for pages < 1 or past the int32 page ids; RESOURCE_EXHAUSTED when the
  // allocation fails (with the bytes; the arena then stays as it was).
  absl::Status SetCapacity(int64_t pages);

  // A page with one holder. RESOURCE_EXHAUSTED (with the counts) when a fixed arena is full or
  // a growing one cannot grow.
  absl::StatusOr<int32_t> Allocate();
  // Takes the given free pages, each with one holder (the coordinator's books chose them).
  // INVALID_ARGUMENT naming the page when one is outside the arena or not free (then none is
  // taken).
  absl::Status Take(std::span<const int32_t> pages);
  void AddRef(int32_t page);
  void Release(int32_t page);
  int32_t refcount(int32_t page) const;
  // Copies page src's contents (every region) into page dst.
  absl::Status CopyPage(int32_t dst, int32_t src) { return memory_->CopyPage(dst, src, page_bytes()); }

  // Region `region`'s row of slot `slot` of `page` (width(region) floats).
  // REQUIRES: host float32 memory (the CPU backend); slot < rows(region).
  float* Row(int32_t page, int64_t region, int64_t slot) {
    return reinterpret_cast<float*>(memory_->Page(page)) + offsets_[static_cast<size_t>(region)] +
           slot * regions_[static_cast<size_t>(region)].width;
  }

 private:
  std::vector<PageRegion> regions_;
  std::vector<int64_t> offsets_;  // per region: values before its rows in a page
  int64_t page_size_;
  int64_t page_elems_ = 0;
  int64_t capacity_;
  kvpool::PageBooks books_;
  std::unique_ptr<PageMemory> memory_;
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
  // Token t's row at `region` (a divided region's row i: RowAt). REQUIRES: t < reserved tokens;
  // host float32 memory.
  float* Row(int64_t region, int64_t t) {
    const int64_t p = arena_->page_size();
    return arena_->Row(pages_[static_cast<size_t>(t / p)], region, t % p);
  }
  const float* Row(int64_t region, int64_t t) const {
    const int64_t p = arena_->page_size();
    return arena_->Row(pages_[static_cast<size_t>(t / p)], region, t % p);
  }
  // Row i of a region that keeps one row per divisor(region) tokens: it lives in the page of
  // tokens [i * divisor, (i + 1) * divisor). REQUIRES as Row.
  float* RowAt(int64_t region, int64_t i) {
    const int64_t n = arena_->rows(region);
    return arena_->Row(pages_[static_cast<size_t>(i / n)], region, i % n);
  }
  const float* RowAt(int64_t region, int64_t i) const {
    const int64_t n = arena_->rows(region);
    return arena_->Row(pages_[static_cast<size_t>(i / n)], region, i % n);
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
