// ferry-kernel-check cases for IndexerScores against cpu::IndexerScoresRow: keys cached in a
// shuffled page arena (PagedConversations, harness_paged.h), the CPU twin on each row's keys
// gathered back, both precisions, and batch invariance.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/kernels/harness.h"
#include "tests/kernels/harness_paged.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

struct IndexerShape {
  int64_t heads, dim, page_rows, gap, score_stride;
  std::vector<int64_t> n_keys;  // per row (each row its own conversation); > stride: invalid
  int64_t bad_page_row;         // this row's second page is unmapped (-1): those keys score NaN
};

// The query side of R rows of H heads x D: q (bf16 bits and their float values), the per-head
// weights (scaled by H^-1/2 as the model's are) and the score scale D^-1/2.
struct IndexerQuery {
  std::vector<uint16_t> qb;
  std::vector<float> qf, w;
  float scale;
};
IndexerQuery RandomIndexerQuery(std::mt19937& rng, int64_t R, int64_t H, int64_t D) {
  IndexerQuery q;
  RandomBf16(R * H * D, 1.0f, 0.0f, rng, &q.qb, &q.qf);
  q.w = RandomF32(R * H, 1.0f / std::sqrt(static_cast<float>(H)), 0.0f, rng);
  q.scale = 1.0f / std::sqrt(static_cast<float>(D));
  return q;
}

Result IndexerCase(std::mt19937& rng, const IndexerShape& s, bool f32 = false) {
  Result r;
  r.tolerance = 1e-4;  // float32 sums in another order (both precisions: the inputs are bf16-exact)
  const int64_t R = s.n_keys.size(), H = s.heads, D = s.dim, stride = s.score_stride;
  std::vector<int64_t> lengths;
  for (int64_t n : s.n_keys) lengths.push_back(std::min(n, stride));
  PagedConversations pc(rng, lengths, s.page_rows, D, s.gap);
  const auto [qb, qf, w, scale] = RandomIndexerQuery(rng, R, H, D);
  std::vector<int32_t> table, n_keys;
  std::vector<float> want_valid, got_valid;
  std::vector<char> expect_poison(R * stride, 0);
  std::vector<float> want(R * stride, NAN);
  for (int64_t t = 0; t < R; ++t) {
    std::vector<int32_t> row_table = pc.tables[t];
    n_keys.push_back(static_cast<int32_t>(s.n_keys[t]));
    if (s.n_keys[t] > stride) {
      table.insert(table.end(), row_table.begin(), row_table.end());
      continue;  // invalid: the whole row NaN
    }
    const int64_t n = s.n_keys[t];
    std::vector<float> keys = pc.Gather(t, n);
    cpu::IndexerScoresRow(qf.data() + t * H * D, w.data() + t * H, H, D, keys.data(), D, n, scale,
                          want.data() + t * stride);
    if (t == s.bad_page_row && n > s.page_rows) {
      row_table[1] = -1;
      for (int64_t k = s.page_rows; k < std::min(n, 2 * s.page_rows); ++k) want[t * stride + k] = NAN;
    }
    for (int64_t k = n; k < stride; ++k) expect_poison[t * stride + k] = 1;
    table.insert(table.end(), row_table.begin(), row_table.end());
  }
  Device dev(&r.error);
  int32_t* dtable = dev.Upload(table);
  float* dw = dev.Upload(w);
  int32_t* dn = dev.Upload(n_keys);
  float* scores = dev.Poisoned<float>(R * stride);
  if (f32) {
    const cu::PagedCacheF32 cache = pc.ViewF32(dev.Upload(pc.arena), dtable);
    float* q = dev.Upload(qf);
    if (!r.error.empty()) return r;
    HARNESS_CHECK_OK(cu::IndexerScoresF32(q, dw, R, H, D, cache, dn, scale, scores, stride));
  } else {
    const cu::PagedCacheBf16 cache = pc.View(dev.Upload(pc.arena_bits), dtable);
    uint16_t* q = dev.Upload(qb);
    if (!r.error.empty()) return r;
    HARNESS_CHECK_OK(cu::IndexerScores(q, dw, R, H, D, cache, dn, scale, scores, stride));
  }
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<float> got = dev.Download(scores, R * stride);
  if (!r.error.empty()) return r;
  std::vector<float> g2, w2;
  for (int64_t i = 0; i < R * stride; ++i) {
    if (expect_poison[i]) {
      uint32_t bits;
      std::memcpy(&bits, &got[i], 4);
      r.mismatched += bits != 0xffffffffu;  // entries past n_keys stay as they were
    } else {
      g2.push_back(got[i]);
      w2.push_back(want[i]);
    }
  }
  r.rel_err = RelErr(g2, w2, &r.unwritten);
  return r;
}

// Batch invariance of IndexerScores at the model shape (32 heads x 128, 64-row pages): each of
// 8 ragged rows (one empty) scored alone, and rows 2..4 as their own launch, must equal the batch
// bitwise; the batch is also checked against the CPU twin.
Result IndexerInvarianceCase(std::mt19937& rng, int64_t heads) {
  Result r;
  r.tolerance = 1e-4;
  const std::vector<int64_t> lengths = {4096, 3001, 0, 64, 65, 2500, 1, 4000};
  const int64_t R = lengths.size(), H = heads, D = 128, stride = 4096;
  PagedConversations pc(rng, lengths, 64, D, 0);
  const auto [qb, qf, w, scale] = RandomIndexerQuery(rng, R, H, D);
  std::vector<int32_t> table, n_keys;
  std::vector<float> want, got_valid;
  for (int64_t t = 0; t < R; ++t) {
    table.insert(table.end(), pc.tables[t].begin(), pc.tables[t].end());
    n_keys.push_back(static_cast<int32_t>(lengths[t]));
    std::vector<float> row(lengths[t]);
    const std::vector<float> keys = pc.Gather(t, lengths[t]);
    cpu::IndexerScoresRow(qf.data() + t * H * D, w.data() + t * H, H, D, keys.data(), D, lengths[t], scale,
                          row.data());
    want.insert(want.end(), row.begin(), row.end());
  }
  Device dev(&r.error);
  uint16_t* arena = dev.Upload(pc.arena_bits);
  int32_t* dtable = dev.Upload(table);
  uint16_t* q = dev.Upload(qb);
  float* dw = dev.Upload(w);
  int32_t* dn = dev.Upload(n_keys);
  float* batch = dev.Poisoned<float>(R * stride);
  float* part = dev.Poisoned<float>(R * stride);
  if (!r.error.empty()) return r;
  auto run = [&](int64_t first, int64_t n, float* out) {
    return cu::IndexerScores(q + first * H * D, dw + first * H, n, H, D,
                             pc.View(arena, dtable + first * pc.table_stride), dn + first, scale,
                             out + first * stride, stride);
  };
  HARNESS_CHECK_OK(run(0, R, batch));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<float> got = dev.Download(batch, R * stride);
  for (int64_t t = 0; t < R; ++t) HARNESS_CHECK_OK(run(t, 1, part));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> alone = dev.Download(part, R * stride);
  long differ = 0;
  // Bitwise over whole rows: entries past n_keys are the poison on both sides.
  for (int64_t i = 0; i < R * stride; ++i) differ += std::memcmp(&alone[i], &got[i], 4) != 0;
  HARNESS_CHECK_OK(run(2, 3, part));
  HARNESS_CHECK_OK(cu::Synchronize());
  alone = dev.Download(part, R * stride);
  for (int64_t i = 2 * stride; i < 5 * stride; ++i) differ += std::memcmp(&alone[i], &got[i], 4) != 0;
  if (!r.error.empty()) return r;
  for (int64_t t = 0; t < R; ++t) {
    got_valid.insert(got_valid.end(), got.begin() + t * stride, got.begin() + t * stride + lengths[t]);
  }
  r.mismatched = differ;
  r.rel_err = RelErr(got_valid, want, &r.unwritten);
  r.note = absl::StrCat(differ, " scores differ between a row alone and in the batch");
  return r;
}

}  // namespace

void AddIndexerCases(std::vector<Case>* cases) {
  const std::vector<IndexerShape> idx = {
      // GLM-5.x indexer: 32 heads x 128, a full 128K-token context and a short one.
      {32, 128, 64, 0, 131072, {131072, 4097}, -1},
      // Empty, one key, an unmapped page, and an invalid n_keys (> stride); pages shared with
      // other layers' rows.
      {32, 128, 16, 1000, 2048, {0, 1, 300, 2048, 2049}, 2},
      {64, 64, 128, 0, 1024, {1000, 999, 3}, -1},
      {5, 17, 2, 3, 40, {9, 31}, 1},
      // The tensor-core path at the model shape (32 heads x 128, 64-row pages shuffled over the
      // arena): 4K and 32K contexts, ragged rows (tile and block edges: 64, 65, 255, 257), an empty
      // row, an unmapped page (row 3 / row 0), an invalid n_keys.
      {32, 128, 64, 0, 32768, {32768, 4096, 0, 30001, 4097, 255, 32769}, 3},
      {32, 128, 64, 0, 4096, {4096, 4000, 0, 1, 64, 65, 257, 256}, 0},
      // Longer rows ending inside a 256-key CTA chunk and inside a 64-key tile.
      {32, 128, 64, 0, 70000, {70000, 65537, 8193}, 0},
      // The other head counts it takes (16, 48, 64), pages with a gap between them.
      {16, 128, 64, 1000, 4096, {4096, 1000, 0}, 1},
      {48, 128, 64, 0, 4096, {3000, 4096, 17}, 0},
      {64, 128, 32, 1000, 4096, {4096, 129, 0, 2000}, 3},
  };
  for (const IndexerShape& s : idx) {
    cases->push_back({absl::StrCat("indexer_scores heads=", s.heads, " dim=", s.dim, " page=", s.page_rows,
                                   s.gap > 0 ? "+gap" : "", " n_keys=", absl::StrJoin(s.n_keys, ",")),
                      [=](std::mt19937& rng) { return IndexerCase(rng, s); }});
    cases->push_back({absl::StrCat("indexer_scores_f32 heads=", s.heads, " dim=", s.dim, " page=", s.page_rows,
                                   " n_keys=", absl::StrJoin(s.n_keys, ",")),
                      [=](std::mt19937& rng) { return IndexerCase(rng, s, true); }});
  }
  for (int64_t heads : {32, 64}) {
    cases->push_back({absl::StrCat("indexer_scores batch invariance heads=", heads, " dim=128"),
                      [=](std::mt19937& rng) { return IndexerInvarianceCase(rng, heads); }});
  }
}

}  // namespace ferry::harness
