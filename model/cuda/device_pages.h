// The KV pages of a CUDA model instance: one contiguous device block of rows of bf16 values
// (float32 ones in the verification precision: elem_bytes() 4).
//
// Layout (what kernels/cuda/ops.h's PagedCacheBf16 / PagedCacheF32 address): page p starts at
// element p * page_elems(); inside a page, region i holds page_size rows of width(i) values,
// contiguous, from element region_offset(i). A region is one cached quantity of one layer
// (glm_moe_dsa: a layer's latent rows [c | k_pe]; a full indexer layer's keys as a region of its
// own, so every region's rows are exactly as wide as the kernels that read them expect).
// Invariants: every width is a multiple of 8 and page_size a power of two >= 16, so every
// region starts 16-byte aligned (MlaDecodeAttention's row loads).
//
// Page ids and reference counts live in a PageArena (model/paged_cache.h) whose rows are zero
// wide: the same books, the same errors and the same arena() numbers as the CPU backend, with
// the storage here. A fixed arena (CacheOptions::capacity_pages > 0) allocates every page at
// once; a growing one reallocates the block (doubling) and copies it when a page id passes the
// end, so device pointers into pages are valid only within a step.
//
// Thread safety: none; one model instance (one step loop) uses its pages.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/ops.h"
#include "model/causal_lm.h"
#include "model/cuda/device_buffer.h"
#include "model/paged_cache.h"

namespace ferry::model::cuda {

class DevicePages {
 public:
  // REQUIRES (INVALID_ARGUMENT otherwise): ValidateCacheOptions(cache), every width a positive
  // multiple of 8.
  static absl::StatusOr<std::shared_ptr<DevicePages>> Create(std::vector<int64_t> widths, const CacheOptions& cache,
                                                             Precision precision = Precision::kBf16);

  const PageArena& books() const { return books_; }
  int64_t page_size() const { return books_.page_size(); }
  int64_t page_elems() const { return page_elems_; }
  int64_t elem_bytes() const { return elem_; }
  int64_t page_bytes() const { return page_elems_ * elem_; }
  int64_t width(int region) const { return widths_[static_cast<size_t>(region)]; }
  int64_t region_offset(int region) const { return offsets_[static_cast<size_t>(region)]; }
  int64_t device_pages() const { return device_pages_; }

  // Fixes a growing arena at `pages` pages, allocated on the device at once (a worker's memory
  // plan sized it). Errors: FAILED_PRECONDITION when the arena is fixed already or a page is in
  // use; INVALID_ARGUMENT for pages outside [1, INT32_MAX]; RESOURCE_EXHAUSTED with the bytes
  // when the device allocation fails (the arena then stays as it was).
  absl::Status SetCapacity(int64_t pages);

  // A page with one holder (books first, then storage). RESOURCE_EXHAUSTED from either.
  absl::StatusOr<int32_t> Allocate();
  // These free pages, one holder each (the coordinator's choice). INVALID_ARGUMENT as
  // PageArena::Take; RESOURCE_EXHAUSTED when storage cannot grow to hold them.
  absl::Status Take(std::span<const int32_t> pages);
  void AddRef(int32_t page) { books_.AddRef(page); }
  void Release(int32_t page) { books_.Release(page); }
  int32_t refcount(int32_t page) const { return books_.refcount(page); }
  // Copies page `src`'s contents (every region) into page `dst`.
  absl::Status CopyPage(int32_t dst, int32_t src);

  // Region `region`'s view for the kernels: the query rows' tables are `table`
  // [rows, table_stride] int32 on the device.
  // REQUIRES: elem_bytes() 2 for View, 4 for ViewF32.
  kernels::cuda::PagedCacheBf16 View(int region, const int32_t* table, int64_t table_stride) const;
  kernels::cuda::PagedCacheF32 ViewF32(int region, const int32_t* table, int64_t table_stride) const;

 private:
  DevicePages(std::vector<int64_t> widths, const CacheOptions& cache, Precision precision);
  absl::Status EnsureStorage(int64_t pages);

  std::vector<int64_t> widths_, offsets_;
  int64_t page_elems_ = 0;
  int64_t elem_ = 2;
  PageArena books_;
  DeviceBuffer block_;
  int64_t device_pages_ = 0;
};

// One conversation's page table over DevicePages (the device twin of PagedRows, same rules:
// pages released on destruction, a shared page copied before a truncation could write it, a
// fork shares whole pages and copies the partial one).
class DevicePageTable {
 public:
  explicit DevicePageTable(std::shared_ptr<DevicePages> pages) : pages_(std::move(pages)) {}
  ~DevicePageTable();
  DevicePageTable(const DevicePageTable&) = delete;
  DevicePageTable& operator=(const DevicePageTable&) = delete;

  // Pages for tokens [0, n). RESOURCE_EXHAUSTED (then nothing changes).
  absl::Status Reserve(int64_t n);
  absl::Status Adopt(std::span<const int32_t> pages);
  absl::Status Truncate(int64_t n);
  absl::StatusOr<std::unique_ptr<DevicePageTable>> Fork(int64_t n, int32_t copy_page = -1) const;

  const std::vector<int32_t>& ids() const { return ids_; }
  DevicePages& pages() const { return *pages_; }

 private:
  std::shared_ptr<DevicePages> pages_;
  std::vector<int32_t> ids_;
};

}  // namespace ferry::model::cuda
