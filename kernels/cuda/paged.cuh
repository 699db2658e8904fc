// Device view of a PagedCacheBf16 (kernels/cuda/ops.h) and its host-side checks, shared by the
// kernels that read paged rows (mla_decode.cu, indexer.cu).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/ops.h"

namespace ferry::kernels::cuda {

// The cache as kernels see it: page_rows replaced by its log2 so that a token splits into
// (page index, slot) with a shift and a mask. T: the element type (bf16, or float32 for the
// verification precision).
template <typename T>
struct PagedViewOf {
  const T* arena;
  const int32_t* page_table;
  int64_t n_pages;
  int64_t page_stride;
  int64_t table_stride;
  int64_t width;
  int page_shift;
};
using PagedView = PagedViewOf<__nv_bfloat16>;
using PagedViewF32 = PagedViewOf<float>;

// The row holding token t of query row r, or nullptr when the token or its page cannot be
// addressed (t < 0, page index beyond the table, page id outside [0, n_pages)).
template <typename T>
__device__ inline const T* PagedRow(const PagedViewOf<T>& c, int64_t r, int64_t t) {
  if (t < 0) return nullptr;
  const int64_t page_index = t >> c.page_shift;
  if (page_index >= c.table_stride) return nullptr;
  const int32_t page = c.page_table[r * c.table_stride + page_index];
  if (page < 0 || page >= c.n_pages) return nullptr;
  const int64_t slot = t & ((int64_t{1} << c.page_shift) - 1);
  return c.arena + page * c.page_stride + slot * c.width;
}

// Checks the host-side invariants of `cache` (a PagedCacheBf16 or PagedCacheF32) and builds its
// view; `op` names the caller.
template <typename Cache, typename T>
inline absl::Status MakePagedViewOf(const Cache& cache, const char* op, PagedViewOf<T>* view) {
  const int64_t p = cache.page_rows;
  if (p < 1 || (p & (p - 1)) != 0 || p > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": page_rows is ", p, ", not a power of two"));
  }
  if (cache.width < 1 || cache.page_stride < p * cache.width || cache.table_stride < 1 || cache.n_pages < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": cache width ", cache.width, ", page_rows ", p, ", page_stride ", cache.page_stride, ", table_stride ",
        cache.table_stride, ", n_pages ", cache.n_pages,
        " (need width >= 1, page_stride >= page_rows * width, table_stride >= 1, n_pages >= 0)"));
  }
  if (cache.page_table == nullptr || (cache.n_pages > 0 && cache.arena == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null page table or arena"));
  }
  int shift = 0;
  while ((int64_t{1} << shift) < p) ++shift;
  *view = PagedViewOf<T>{reinterpret_cast<const T*>(cache.arena), cache.page_table, cache.n_pages,
                         cache.page_stride, cache.table_stride, cache.width, shift};
  return absl::OkStatus();
}
inline absl::Status MakePagedView(const PagedCacheBf16& cache, const char* op, PagedView* view) {
  return MakePagedViewOf(cache, op, view);
}
inline absl::Status MakePagedView(const PagedCacheF32& cache, const char* op, PagedViewF32* view) {
  return MakePagedViewOf(cache, op, view);
}

}  // namespace ferry::kernels::cuda
