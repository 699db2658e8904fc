// Where a CUDA model's caches live: the device twins of the host memories of
// model/cache/paged_cache.h (PageMemory) and model/cache/conversation.h (StateMemory), and the kernels'
// views of an arena's regions.
//
// DevicePageMemory keeps every page in one contiguous device block of bf16 values (float32 in
// the verification precision), page p at byte p * page_bytes, so the kernels address a region
// as base + region_offset + p * page_elems (kernels/cuda/ops.h's PagedCacheBf16 / PagedCacheF32).
// A growing arena reallocates the block (doubling) and copies it when a page id passes its
// end, so device pointers into pages are valid only within a step; a fixed arena
// (PageArena::SetCapacity, a worker's plan) allocates every page at once.
//
// Thread safety: none; one model instance (one step loop) uses its memories.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/ops.h"
#include "model/cache/conversation.h"
#include "model/cuda/device_buffer.h"
#include "model/cache/paged_cache.h"

namespace ferry::model::cuda {

std::unique_ptr<PageMemory> DevicePageMemory(Precision precision);
std::shared_ptr<StateMemory> DeviceStateMemory();

// A page arena on the device for these regions. INVALID_ARGUMENT unless the cache options are
// valid, every width is 0 or a multiple of 8 (16-byte aligned rows for the kernels) and every
// region's rows a page is a power of two (the kernels split a row index with a shift).
absl::StatusOr<std::shared_ptr<PageArena>> DeviceArena(std::vector<PageRegion> regions, const CacheOptions& cache,
                                                       Precision precision);

// Region `region` of a device arena as the kernels' paged cache, the query rows' page tables
// being `table` [rows, table_stride] int32 on the device.
// REQUIRES: the arena's memory is DevicePageMemory of bf16 (View) or float32 (ViewF32).
kernels::cuda::PagedCacheBf16 View(const PageArena& arena, int64_t region, const int32_t* table,
                                   int64_t table_stride);
kernels::cuda::PagedCacheF32 ViewF32(const PageArena& arena, int64_t region, const int32_t* table,
                                     int64_t table_stride);

}  // namespace ferry::model::cuda
