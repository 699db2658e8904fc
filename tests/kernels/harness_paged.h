// The paged geometry the attention-side harness cases share (harness_attention.cc,
// harness_indexer.cc): conversations scattered over a shuffled page arena, and a token
// selection. Test code only, included by those files inside ferry::harness.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/ops.h"
#include "tests/kernels/harness.h"

namespace ferry::harness {

// Conversations of the given lengths over a shuffled arena of pages (plus a few spare pages),
// `width` bf16 values a row. Each page is [lead | page_rows rows | tail] with lead + tail = gap
// values of other data (as when a page holds every layer's rows): the cache view starts at
// arena + lead with page_stride = page_rows * width + gap.
struct PagedConversations {
  int64_t page_rows = 0, width = 0, n_pages = 0, table_stride = 0, lead = 0, page_stride = 0;
  std::vector<uint16_t> arena_bits;
  std::vector<float> arena;
  std::vector<std::vector<int32_t>> tables;  // per conversation, table_stride entries (-1 unused)

  PagedConversations(std::mt19937& rng, const std::vector<int64_t>& lengths, int64_t p, int64_t w, int64_t gap)
      : page_rows(p), width(w), lead(8 * (gap / 16)), page_stride(p * w + gap) {
    for (int64_t len : lengths) {
      const int64_t pages = (len + p - 1) / p;
      n_pages += pages;
      table_stride = std::max(table_stride, pages + 1);  // one spare entry, left at -1
    }
    n_pages += 3;
    RandomBf16(n_pages * page_stride, 1.0f, 0.0f, rng, &arena_bits, &arena);
    std::vector<int32_t> ids(n_pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    for (int64_t len : lengths) {
      std::vector<int32_t> t(table_stride, -1);
      for (int64_t i = 0; i < (len + p - 1) / p; ++i) t[i] = ids[next++];
      tables.push_back(t);
    }
  }
  // Row t of conversation c as floats (REQUIRES its page is mapped).
  const float* Row(int64_t c, int64_t t) const {
    return arena.data() + lead + tables[c][t / page_rows] * page_stride + (t % page_rows) * width;
  }
  // Rows 0..len-1 of conversation c, contiguous.
  std::vector<float> Gather(int64_t c, int64_t len) const {
    std::vector<float> out(len * width);
    for (int64_t t = 0; t < len; ++t) std::memcpy(&out[t * width], Row(c, t), width * sizeof(float));
    return out;
  }
  // The device view; `arena_dev` holds arena_bits, `table_dev` the query rows' tables.
  cu::PagedCacheBf16 View(const uint16_t* arena_dev, const int32_t* table_dev) const {
    cu::PagedCacheBf16 v;
    v.arena = arena_dev + lead;
    v.n_pages = n_pages;
    v.page_rows = page_rows;
    v.page_stride = page_stride;
    v.width = width;
    v.page_table = table_dev;
    v.table_stride = table_stride;
    return v;
  }
  // The same geometry over a float32 copy of the arena (the verification precision's kernels).
  cu::PagedCacheF32 ViewF32(const float* arena_dev, const int32_t* table_dev) const {
    const cu::PagedCacheBf16 b = View(nullptr, table_dev);
    return cu::PagedCacheF32{arena_dev + lead, b.n_pages, b.page_rows, b.page_stride, b.width, b.page_table,
                             b.table_stride};
  }
};

// The ascending selection of n of [0, len): all of them when n >= len.
inline std::vector<int32_t> Select(std::mt19937& rng, int64_t len, int64_t n) {
  std::vector<int32_t> all(len);
  std::iota(all.begin(), all.end(), 0);
  if (n < len) {
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(n);
    std::sort(all.begin(), all.end());
  }
  return all;
}

}  // namespace ferry::harness
