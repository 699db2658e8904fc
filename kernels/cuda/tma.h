// Tensor-memory-accelerator (TMA) copies of single cached rows: a tensor map over a paged arena
// of bf16 rows, and the copy of one 64-value block of one row into a 128-byte-swizzled tile.
// Used where rows are gathered by id (the persistent MLA decode form), so a row costs a few copy
// instructions issued by one thread instead of a warp's worth of 16-byte cp.async.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace ferry::kernels::cuda {

// Encodes `map` over `n_pages` pages of `page_rows` rows of `width` bf16 values at `arena`
// (row s of page p at arena + p * page_stride + s * width), as a 3-D tensor (value, slot, page)
// whose boxes are 64 values of `box_rows` consecutive rows of one page (box_rows <= page_rows,
// at most 256), written with the 128-byte swizzle (box row i at 128 i bytes from the box's
// start) and zero-filled where a coordinate is out of range (a page of -1 reads zeros). False
// when the driver has no cuTensorMapEncodeTiled or the shape cannot be mapped (n_pages < 1 or >=
// 2^31, width not a multiple of 64, arena not 16-byte aligned, strides not multiples of 16
// bytes); the caller then copies another way.
bool EncodePagedRowsMap(CUtensorMap* map, const void* arena, int64_t width, int64_t page_rows, int64_t page_stride,
                        int64_t n_pages, int box_rows = 1);

#if defined(__CUDACC__)
namespace ptx {
// Values [64 b, 64 b + 64) of the box_rows rows from `slot` of page `page` (EncodePagedRowsMap's
// map) into 128 bytes a row at shared address `dst`, swizzled by the address bits 7..9 as
// wgmma's and ldmatrix's 128-byte layouts want (dst 128-byte aligned, its atoms 1024-byte
// aligned); the box's bytes counted on mbarrier `bar` as they land, read under the L2 cache
// policy `policy` (createpolicy). sm_90 and up.
__device__ __forceinline__ void TmaRowBlock(uint32_t dst, const CUtensorMap* map, int b, int slot, int page,
                                            uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(64 * b), "r"(slot), "r"(page), "r"(bar), "l"(policy)
      : "memory");
}
}  // namespace ptx
#endif

}  // namespace ferry::kernels::cuda
