// ferry-kernel-check cases for the paged attention-side ops: MlaDecodeAttention against
// cpu::MlaAttendRow, IndexerScores against cpu::IndexerScoresRow. Each case builds conversations
// whose rows are scattered over a shuffled page arena (unused table entries are -1, so a read past
// a conversation's pages would show), gathers each conversation's rows back into a contiguous
// cache on the host, and runs the CPU twin on that.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/mla_decode_tc.h"
#include "model/cuda/act_ops.h"
#include "tests/kernels/harness.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

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
std::vector<int32_t> Select(std::mt19937& rng, int64_t len, int64_t n) {
  std::vector<int32_t> all(len);
  std::iota(all.begin(), all.end(), 0);
  if (n < len) {
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(n);
    std::sort(all.begin(), all.end());
  }
  return all;
}

// Whether the current device can run MlaDecodeAttention's tensor-core path: compute capability
// >= 9.0 with kMlaTcSmemBytes of opt-in shared memory a block (mla_decode_tc.h; an sm_120/121
// part has 99 KiB and runs the per-head kernel).
bool TcDevice() {
  int device = 0, major = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major >= 9 && optin >= cu::kMlaTcSmemBytes;
}

// On a TcDevice(), an error unless MlaDecodeAttention takes the tensor-core path exactly when
// `want_tc`: were MlaTcApplies to regress to false, the model-shape cases would all run the
// per-head kernel and pass as well; were it to take a misaligned out, the path would fault.
absl::Status ExpectMlaPath(bool want_tc, const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads,
                           int64_t latent, int64_t rope, const cu::PagedCacheBf16& cache, const uint16_t* out) {
  if (!TcDevice()) return absl::OkStatus();
  const bool tc = cu::MlaTcApplies(q_abs, q_pe, rows, heads, latent, rope, cache, out);
  if (tc == want_tc) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("MlaTcApplies is ", tc, ", want ", want_tc, " (latent ", latent, ", rope ",
                                          rope, ", out at byte ", reinterpret_cast<uintptr_t>(out) % 16,
                                          " of 16, q_abs at byte ", reinterpret_cast<uintptr_t>(q_abs) % 16, ")"));
}

struct MlaShape {
  int64_t heads, latent, rope, page_rows, gap;  // gap: other data per page (multiple of 8)
  std::vector<int64_t> lengths;  // per conversation
  std::vector<int64_t> row_conv;  // per query row: its conversation
  int64_t n_sel;                  // per row, min(n_sel, length) selected tokens
  bool specials;                  // the last two rows: an empty selection, then an unaddressable id
  // specials: the unaddressable id, put in the middle of the last row's selection; by default
  // one past the row's table, as its last token.
  std::optional<int32_t> bad_id = std::nullopt;
  // out starts this many elements into its buffer: 1 leaves it 2 bytes past 16-byte alignment,
  // which the tensor-core path cannot store to (the per-head kernel must run).
  int64_t out_offset = 0;
  // The persistent form's workspace holds this many rows (0: all), so more rows run in several
  // launch pairs.
  int64_t ws_rows = 0;
};

// The path MlaDecodeAttention must take for s on a TcDevice(): the tensor cores at the model
// shapes with every pointer aligned (the cases' q, arena and page strides are).
bool WantTc(const MlaShape& s) {
  return s.latent == 512 && (s.rope == 0 || s.rope == 64) && s.out_offset % 8 == 0;
}

// f32: MlaDecodeAttentionF32 on the same (bf16-exact) values, held to float32 rounding.
Result MlaCase(std::mt19937& rng, const MlaShape& s, bool f32 = false) {
  Result r;
  r.tolerance = f32 ? 1e-5 : 1e-2;
  const int64_t R = s.row_conv.size(), H = s.heads, L = s.latent, W = s.latent + s.rope;
  PagedConversations pc(rng, s.lengths, s.page_rows, W, s.gap);
  std::vector<uint16_t> qab, qpb;
  std::vector<float> qaf, qpf;
  RandomBf16(R * H * L, 1.0f, 0.0f, rng, &qab, &qaf);
  RandomBf16(R * H * s.rope, 1.0f, 0.0f, rng, &qpb, &qpf);
  const float scale = 1.0f / 16.0f;  // (192 + 64)^-0.5 for GLM-5.2, 256^-0.5 for GLM-5.3-Flash
  std::vector<int32_t> table, sel, offsets = {0};
  std::vector<float> want(R * H * L);
  for (int64_t t = 0; t < R; ++t) {
    const int64_t c = s.row_conv[t], len = s.lengths[c];
    table.insert(table.end(), pc.tables[c].begin(), pc.tables[c].end());
    std::vector<int32_t> row_sel = Select(rng, len, s.n_sel);
    float* o = want.data() + t * H * L;
    if (s.specials && t == R - 2) {
      row_sel.clear();
      std::fill(o, o + H * L, 0.0f);
    } else if (s.specials && t == R - 1) {
      if (s.bad_id.has_value()) {
        row_sel[row_sel.size() / 2] = *s.bad_id;
      } else {
        row_sel.back() = static_cast<int32_t>(pc.table_stride * pc.page_rows);  // beyond the table
      }
      std::fill(o, o + H * L, NAN);
    } else {
      const std::vector<float> cache = pc.Gather(c, len);
      std::vector<float> scratch(row_sel.size());
      cpu::MlaAttendRow(qaf.data() + t * H * L, qpf.data() + t * H * s.rope, H, L, s.rope, cache.data(), W,
                        row_sel.data(), row_sel.size(), scale, o, scratch.data());
    }
    sel.insert(sel.end(), row_sel.begin(), row_sel.end());
    offsets.push_back(static_cast<int32_t>(sel.size()));
  }
  Device dev(&r.error);
  int32_t* dtable = dev.Upload(table);
  int32_t* dsel = dev.Upload(sel);
  int32_t* doff = dev.Upload(offsets);
  std::vector<float> got;
  if (f32) {
    const cu::PagedCacheF32 cache = pc.ViewF32(dev.Upload(pc.arena), dtable);
    float* qa = dev.Upload(qaf);
    float* qp = s.rope > 0 ? dev.Upload(qpf) : nullptr;
    float* out = dev.Poisoned<float>(R * H * L);
    if (!r.error.empty()) return r;
    HARNESS_CHECK_OK(cu::MlaDecodeAttentionF32(qa, qp, R, H, L, s.rope, cache, dsel, doff, scale, out));
    HARNESS_CHECK_OK(cu::Synchronize());
    got = dev.Download(out, R * H * L);
  } else {
    const cu::PagedCacheBf16 cache = pc.View(dev.Upload(pc.arena_bits), dtable);
    uint16_t* qa = dev.Upload(qab);
    uint16_t* qp = s.rope > 0 ? dev.Upload(qpb) : nullptr;
    uint16_t* out = dev.Poisoned<uint16_t>(R * H * L + s.out_offset);
    if (!r.error.empty()) return r;
    out += s.out_offset;
    HARNESS_CHECK_OK(ExpectMlaPath(WantTc(s), qa, qp, R, H, L, s.rope, cache, out));
    HARNESS_CHECK_OK(cu::MlaDecodeAttention(qa, qp, R, H, L, s.rope, cache, dsel, doff, scale, out));
    HARNESS_CHECK_OK(cu::Synchronize());
    const std::vector<uint16_t> cluster = dev.Download(out, R * H * L);
    // With a workspace (the persistent form where the device has sm_90a, else the same path
    // again): bitwise the same outputs.
    const int64_t ws_bytes = cu::MlaDecodeWorkspaceBytes(s.ws_rows > 0 ? s.ws_rows : R, H);
    uint16_t* ws = ws_bytes > 0 ? dev.Poisoned<uint16_t>(ws_bytes / 2) : nullptr;
    uint16_t* out2 = dev.Poisoned<uint16_t>(R * H * L + s.out_offset);
    if (!r.error.empty()) return r;
    out2 += s.out_offset;
    HARNESS_CHECK_OK(
        cu::MlaDecodeAttention(qa, qp, R, H, L, s.rope, cache, dsel, doff, scale, out2, nullptr, ws, ws_bytes));
    HARNESS_CHECK_OK(cu::Synchronize());
    const std::vector<uint16_t> persistent = dev.Download(out2, R * H * L);
    long differ = 0;
    for (int64_t i = 0; i < R * H * L; ++i) differ += persistent[i] != cluster[i];
    r.mismatched += differ;
    r.note = absl::StrCat(differ, " outputs differ with a workspace of ", s.ws_rows > 0 ? s.ws_rows : R, " rows");
    got = ToF32(cluster);
  }
  if (!r.error.empty()) return r;
  r.rel_err = RelErr(got, want, &r.unwritten);
  if (s.specials) {  // the empty row must be exactly zero
    for (int64_t i = (R - 2) * H * L; i < (R - 1) * H * L; ++i) r.mismatched += got[i] != 0.0f;
  }
  return r;
}

// Batch invariance (ops.h): every row of a ragged batch of 8 alone (rows = 1), and a window of
// three of them, must give bitwise the output they give inside the batch of 8. The batch is also
// held to the CPU twin.
Result MlaInvarianceCase(std::mt19937& rng, int64_t heads, int64_t rope) {
  Result r;
  r.tolerance = 1e-2;
  const int64_t H = heads, L = 512, W = L + rope;
  const std::vector<int64_t> lengths = {8192, 3000, 2048, 40, 5000, 700, 1, 2100};
  const int64_t R = lengths.size();
  PagedConversations pc(rng, lengths, 64, W, 0);
  std::vector<uint16_t> qab, qpb;
  std::vector<float> qaf, qpf;
  RandomBf16(R * H * L, 1.0f, 0.0f, rng, &qab, &qaf);
  RandomBf16(R * H * rope, 1.0f, 0.0f, rng, &qpb, &qpf);
  const float scale = 1.0f / 16.0f;
  std::vector<int32_t> table, sel, offsets = {0};
  std::vector<float> want(R * H * L);
  for (int64_t t = 0; t < R; ++t) {
    table.insert(table.end(), pc.tables[t].begin(), pc.tables[t].end());
    const std::vector<int32_t> row_sel = Select(rng, lengths[t], 2048);
    const std::vector<float> cache = pc.Gather(t, lengths[t]);
    std::vector<float> scratch(row_sel.size());
    cpu::MlaAttendRow(qaf.data() + t * H * L, qpf.data() + t * H * rope, H, L, rope, cache.data(), W,
                      row_sel.data(), row_sel.size(), scale, want.data() + t * H * L, scratch.data());
    sel.insert(sel.end(), row_sel.begin(), row_sel.end());
    offsets.push_back(static_cast<int32_t>(sel.size()));
  }
  Device dev(&r.error);
  int32_t* dtable = dev.Upload(table);
  int32_t* dsel = dev.Upload(sel);
  int32_t* doff = dev.Upload(offsets);
  const uint16_t* arena = dev.Upload(pc.arena_bits);
  uint16_t* qa = dev.Upload(qab);
  uint16_t* qp = rope > 0 ? dev.Upload(qpb) : nullptr;
  uint16_t* batch = dev.Poisoned<uint16_t>(R * H * L);
  uint16_t* part = dev.Poisoned<uint16_t>(R * H * L);
  if (!r.error.empty()) return r;
  // Rows [first, first + n) as their own launch, into `part`.
  auto run = [&](int64_t first, int64_t n) {
    return cu::MlaDecodeAttention(qa + first * H * L, qp != nullptr ? qp + first * H * rope : nullptr, n, H, L, rope,
                                  pc.View(arena, dtable + first * pc.table_stride), dsel, doff + first, scale,
                                  part + first * H * L);
  };
  // Every launch here must run on the tensor cores where the device has them: the invariance
  // of the per-head kernel is not what this case is for.
  HARNESS_CHECK_OK(ExpectMlaPath(true, qa, qp, R, H, L, rope, pc.View(arena, dtable), batch));
  for (int64_t first = 0; first < R; ++first) {
    HARNESS_CHECK_OK(ExpectMlaPath(true, qa + first * H * L, qp != nullptr ? qp + first * H * rope : nullptr, 1, H, L,
                                   rope, pc.View(arena, dtable + first * pc.table_stride), part + first * H * L));
  }
  HARNESS_CHECK_OK(cu::MlaDecodeAttention(qa, qp, R, H, L, rope, pc.View(arena, dtable), dsel, doff, scale, batch));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint16_t> got = dev.Download(batch, R * H * L);
  long differ = 0;
  for (int64_t t = 0; t < R; ++t) HARNESS_CHECK_OK(run(t, 1));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<uint16_t> alone = dev.Download(part, R * H * L);
  for (int64_t i = 0; i < R * H * L; ++i) differ += alone[i] != got[i];
  HARNESS_CHECK_OK(run(2, 3));
  HARNESS_CHECK_OK(cu::Synchronize());
  alone = dev.Download(part, R * H * L);
  for (int64_t i = 2 * H * L; i < 5 * H * L; ++i) differ += alone[i] != got[i];
  if (!r.error.empty()) return r;
  r.mismatched = differ;
  r.rel_err = RelErr(ToF32(got), want, &r.unwritten);
  r.note = absl::StrCat(differ, " outputs differ between a row alone and in the batch");
  return r;
}

struct IndexerShape {
  int64_t heads, dim, page_rows, gap, score_stride;
  std::vector<int64_t> n_keys;  // per row (each row its own conversation); > stride: invalid
  int64_t bad_page_row;         // this row's second page is unmapped (-1): those keys score NaN
};

Result IndexerCase(std::mt19937& rng, const IndexerShape& s, bool f32 = false) {
  Result r;
  r.tolerance = 1e-4;  // float32 sums in another order (both precisions: the inputs are bf16-exact)
  const int64_t R = s.n_keys.size(), H = s.heads, D = s.dim, stride = s.score_stride;
  std::vector<int64_t> lengths;
  for (int64_t n : s.n_keys) lengths.push_back(std::min(n, stride));
  PagedConversations pc(rng, lengths, s.page_rows, D, s.gap);
  std::vector<uint16_t> qb;
  std::vector<float> qf;
  RandomBf16(R * H * D, 1.0f, 0.0f, rng, &qb, &qf);
  const std::vector<float> w = RandomF32(R * H, 1.0f / std::sqrt(static_cast<float>(H)), 0.0f, rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
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
  std::vector<uint16_t> qb;
  std::vector<float> qf;
  RandomBf16(R * H * D, 1.0f, 0.0f, rng, &qb, &qf);
  const std::vector<float> w = RandomF32(R * H, 1.0f / std::sqrt(static_cast<float>(H)), 0.0f, rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
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

// `rows` query rows over `convs` conversations in turn (row t: conversation t % convs).
std::vector<int64_t> ManyRows(int64_t rows, int64_t convs) {
  std::vector<int64_t> v(rows);
  for (int64_t t = 0; t < rows; ++t) v[t] = t % convs;
  return v;
}

// The case name's description of s, after "mla_decode" or "mla_decode_f32".
std::string MlaName(const MlaShape& s, bool f32) {
  std::string specials;
  if (s.specials) {
    specials = s.bad_id.has_value() ? (*s.bad_id == INT32_MIN ? " +empty+INT_MIN" : absl::StrCat(" +empty+", *s.bad_id))
                                    : " +empty+bad";
  }
  return absl::StrCat(" heads=", s.heads, " latent=", s.latent, " rope=", s.rope, " page=", s.page_rows,
                      !f32 && s.gap > 0 ? "+gap" : "", " rows=", s.row_conv.size(), " sel<=", s.n_sel, specials,
                      s.out_offset != 0 ? absl::StrCat(" out+", s.out_offset) : "",
                      s.ws_rows != 0 ? absl::StrCat(" ws_rows=", s.ws_rows) : "");
}

}  // namespace

// MlaDecodeAttention's workspace sizes and argument checks: host-side, so they run without a
// device too.
int RunMlaHostChecks() {
  int failed = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      printf("host check FAILED: %s\n", what.c_str());
      ++failed;
    }
  };
  expect(cu::MlaDecodeWorkspaceBytes(64, 64) == 64 * cu::kMlaWgRowGroupBytes, "MlaDecodeWorkspaceBytes(64, 64)");
  expect(cu::MlaDecodeWorkspaceBytes(3, 128) == 6 * cu::kMlaWgRowGroupBytes, "MlaDecodeWorkspaceBytes(3, 128)");
  expect(cu::MlaDecodeWorkspaceBytes(1, 48) == cu::kMlaWgRowGroupBytes, "MlaDecodeWorkspaceBytes(1, 48)");
  expect(cu::MlaDecodeWorkspaceBytes(64, 32) == 0, "MlaDecodeWorkspaceBytes(64, 32): no form uses one");
  expect(cu::kMlaWgRowGroupBytes == 532480, "kMlaWgRowGroupBytes");
  // What the model gives it: decode-sized bf16 steps only.
  namespace act = model::cuda::act;
  expect(act::MlaWorkspaceBytes<uint16_t>(64, 64) == 64 * cu::kMlaWgRowGroupBytes, "model workspace, 64 rows");
  expect(act::MlaWorkspaceBytes<uint16_t>(65, 64) == 0, "model workspace, a 65-row (prefill-sized) step");
  expect(act::MlaWorkspaceBytes<uint16_t>(8, 32) == 0, "model workspace, 32 heads");
  expect(act::MlaWorkspaceBytes<float>(8, 64) == 0, "model workspace, float32");
  // A well-formed call on host memory up to the workspace check (nothing runs: rows == 0 after it).
  alignas(16) static uint16_t arena[64 * 576];
  static int32_t table[1] = {0};
  cu::PagedCacheBf16 cache{arena, 1, 64, 64 * 576, 576, table, 1};
  alignas(16) static unsigned char ws[256];
  auto call = [&](void* w, int64_t bytes) {
    return cu::MlaDecodeAttention(arena, arena, 0, 64, 512, 64, cache, table, table, 1.0f, arena, nullptr, w, bytes);
  };
  auto refused = [&](const absl::Status& st, const std::string& needle, const std::string& what) {
    expect(absl::IsInvalidArgument(st) && std::string(st.message()).find(needle) != std::string::npos,
           absl::StrCat(what, ": got ", st.ToString()));
  };
  refused(call(ws, -1), "workspace_bytes -1", "MlaDecodeAttention negative workspace_bytes");
  refused(call(nullptr, 256), "workspace_bytes 256 with a null workspace", "MlaDecodeAttention null workspace");
  expect(call(ws, 256).ok(), "MlaDecodeAttention with a small workspace and no rows");
  expect(call(nullptr, 0).ok(), "MlaDecodeAttention without a workspace and no rows");
  printf("mla host checks: %s\n", failed == 0 ? "all passed" : "FAILED");
  return failed;
}

void AddAttentionCases(std::vector<Case>* cases) {
  const std::vector<MlaShape> mla = {
      // GLM-5.2: 64 heads, kv_lora 512 + rope 64, sparse top-2048 of long contexts; rows 0 and 3
      // share a conversation (as MTP rows do).
      {64, 512, 64, 64, 0, {3000, 5000, 2100}, {0, 1, 2, 0}, 2048, false},
      // GLM-5.3-Flash: NoPE (latent 512 only), dense below 2048 tokens, pages shared with
      // another layer's rows.
      {64, 512, 0, 128, 4096, {40, 1000, 2600}, {0, 1, 2}, 2048, false},
      // Toy with an empty selection and an unaddressable id; a one-row conversation. Then
      // INT32_MIN as the id (an unaddressable token like any negative one: NaN, not skipped).
      {3, 16, 8, 4, 24, {1, 7, 30, 13}, {0, 1, 2, 3, 3, 2}, 5, true},
      {3, 16, 8, 4, 24, {1, 7, 30, 13}, {0, 1, 2, 3, 3, 2}, 5, true, INT32_MIN},
      // One-row pages, and the widest latent.
      {2, 64, 0, 1, 8, {17, 50}, {0, 1}, 100, false},
      {4, 1024, 64, 16, 0, {300, 5}, {0, 1}, 257, false},
  };
  for (const MlaShape& s : mla) {
    cases->push_back({"mla_decode" + MlaName(s, false), [=](std::mt19937& rng) { return MlaCase(rng, s); }});
    cases->push_back({"mla_decode_f32" + MlaName(s, true), [=](std::mt19937& rng) { return MlaCase(rng, s, true); }});
  }
  // The tensor-core path at the model shapes (GLM-5.2: rope 64; GLM-5.3-Flash: rope 0; 64 heads
  // on one GPU, 32 a rank at TP=2): top-2048 of up to 8K-token contexts in 64-row pages, ragged
  // rows, rows shorter than a 64-token tile, then an empty and a bad selection. Then padded head
  // groups (16 heads on a 32-head tile, 48 on a 64-head one, 128 as two groups) at tile edges.
  // On a device with the path (TcDevice) each must take it. Then INT32_MIN in a selection on
  // the path (its tile loader marks past-the-end tokens with INT_MIN: a selected INT32_MIN must
  // still make the row NaN), and an out one element past 16-byte alignment, which must fall back
  // to the per-head kernel and pass there. Then selections longer than 4096 tokens.
  const std::vector<MlaShape> model = {
      {64, 512, 64, 64, 0, {8192, 6000, 2048, 1500, 40, 1, 4000, 3000}, {0, 1, 2, 3, 4, 5, 6, 7}, 2048, true},
      {32, 512, 64, 64, 0, {8192, 6000, 2048, 1500, 40, 1, 4000, 3000}, {0, 1, 2, 3, 4, 5, 6, 7}, 2048, true},
      {64, 512, 0, 64, 0, {8192, 6000, 2048, 1500, 40, 1, 4000, 3000}, {0, 1, 2, 3, 4, 5, 6, 7}, 2048, true},
      {32, 512, 0, 64, 0, {8192, 6000, 2048, 1500, 40, 1, 4000, 3000}, {0, 1, 2, 3, 4, 5, 6, 7}, 2048, true},
      {16, 512, 0, 64, 0, {129, 64, 63}, {0, 1, 2}, 2048, false},
      {48, 512, 64, 64, 1152, {3000, 70, 1000}, {0, 1, 2, 0}, 2048, false},
      {128, 512, 64, 64, 0, {2500, 65, 300}, {0, 1, 2, 2}, 2048, true},
      {64, 512, 64, 64, 0, {3000, 70, 1000, 2100}, {0, 1, 2, 3}, 2048, true, INT32_MIN},
      {64, 512, 64, 64, 0, {3000, 70, 1000}, {0, 1, 2, 0, 1}, 2048, true, std::nullopt, 1},
      // Selections past 4096 tokens: a CTA of the path owns more than 16 tiles, so it looks up
      // its row addresses in several rounds (mla_decode_tc.cu, kTabTiles).
      {64, 512, 64, 64, 0, {9000, 5000}, {0, 1, 0, 1}, 9000, true},
      // More items (rows x 8) than an H200 has SMs (132), so the workspace runs the persistent
      // form: its CTAs take one or two items, some of two rows (q reloaded); rope 64 and 0. Then
      // the same rows through a 17-row workspace (pairs of 17 and 7 rows: 136 items, the
      // persistent form, then 56 in the same form), 128 heads (two groups a row), and 200 short
      // rows (1600 items: past 12 an SM, pairs of 198 and 2 rows).
      {64, 512, 64, 64, 0, {3000, 2100, 70, 5000, 2048, 1, 9000, 640},
       {0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0, 0, 2, 4, 6, 1, 3, 5, 7}, 2048, true},
      {64, 512, 0, 64, 0, {3000, 2100, 70, 5000, 2048, 1, 9000, 640},
       {0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0, 0, 2, 4, 6, 1, 3, 5, 7}, 2048, true},
      {64, 512, 0, 64, 0, {3000, 2100, 70, 5000, 2048, 1, 9000, 640},
       {0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0, 0, 2, 4, 6, 1, 3, 5, 7}, 2048, true, std::nullopt, 0, 17},
      {128, 512, 64, 64, 0, {3000, 2100, 70, 5000, 2048, 1, 9000, 640},
       {0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0, 0, 2, 4, 6, 1, 3, 5, 7}, 2048, true},
      {64, 512, 64, 64, 0, {130, 65, 1, 129, 200}, ManyRows(200, 5), 2048, true},
  };
  for (const MlaShape& s : model) {
    cases->push_back({"mla_decode" + MlaName(s, false), [=](std::mt19937& rng) { return MlaCase(rng, s); }});
  }
  for (int64_t heads : {64, 32}) {
    for (int64_t rope : {64, 0}) {
      cases->push_back({absl::StrCat("mla_decode batch invariance heads=", heads, " rope=", rope),
                        [=](std::mt19937& rng) { return MlaInvarianceCase(rng, heads, rope); }});
    }
  }
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
