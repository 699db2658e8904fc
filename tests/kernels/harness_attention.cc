// ferry-kernel-check cases for MlaDecodeAttention against cpu::MlaAttendRow, and its host-side
// checks. Each case builds conversations whose rows are scattered over a shuffled page arena
// (PagedConversations, harness_paged.h: unused table entries are -1, so a read past a
// conversation's pages would show), gathers each conversation's rows back into a contiguous cache
// on the host, and runs the CPU twin on that. (IndexerScores: harness_indexer.cc.)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/mla_decode_tc.h"
#include "model/cuda/act_ops.h"
#include "tests/kernels/harness.h"
#include "tests/kernels/harness_paged.h"
#include "tests/kernels/late_writer.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

// Whether the current device can run MlaDecodeAttention's tensor-core path in its standard form:
// compute capability >= 9.0 with kMlaTcSmemBytes of opt-in shared memory a block
// (mla_decode_tc.h; an sm_120/121 part has 99 KiB and runs the small form, which these cases
// check on an H200 with --mla-tc-small, scripts/gpu-check-golden.sh).
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
  // The workspace call runs behind a kernel that lets it start at once and writes sel_offsets
  // 1 ms later (RunBehindLateCopy): no kernel of the op may read them before its PdlWait.
  bool late_offsets = false;
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
    if (s.late_offsets) {
      // A first workspace call loads both kernels (lazy loading may synchronise the context at a
      // kernel's first launch, which would hide the overlap), then the one behind the late copy.
      const int32_t* doff_src = dev.Upload(offsets);
      uint16_t* warm = dev.Poisoned<uint16_t>(R * H * L);
      if (!r.error.empty()) return r;
      HARNESS_CHECK_OK(
          cu::MlaDecodeAttention(qa, qp, R, H, L, s.rope, cache, dsel, doff, scale, warm, nullptr, ws, ws_bytes));
      HARNESS_CHECK_OK(RunBehindLateCopy(doff, doff_src, static_cast<int64_t>(offsets.size()), 1000000, [&](void* st) {
        return cu::MlaDecodeAttention(qa, qp, R, H, L, s.rope, cache, dsel, doff, scale, out2, st, ws, ws_bytes);
      }));
    } else {
      HARNESS_CHECK_OK(
          cu::MlaDecodeAttention(qa, qp, R, H, L, s.rope, cache, dsel, doff, scale, out2, nullptr, ws, ws_bytes));
    }
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
                      s.ws_rows != 0 ? absl::StrCat(" ws_rows=", s.ws_rows) : "",
                      s.late_offsets ? " offsets written late" : "");
}

}  // namespace

// MlaDecodeAttention's workspace sizes and argument checks: host-side, so they run without a
// device too.
int RunMlaHostChecks() {
  HostChecks checks;
  checks.Expect(cu::MlaDecodeWorkspaceBytes(64, 64) == 64 * cu::kMlaWgRowGroupBytes, "MlaDecodeWorkspaceBytes(64, 64)");
  checks.Expect(cu::MlaDecodeWorkspaceBytes(3, 128) == 6 * cu::kMlaWgRowGroupBytes, "MlaDecodeWorkspaceBytes(3, 128)");
  checks.Expect(cu::MlaDecodeWorkspaceBytes(1, 48) == cu::kMlaWgRowGroupBytes, "MlaDecodeWorkspaceBytes(1, 48)");
  checks.Expect(cu::MlaDecodeWorkspaceBytes(64, 32) == 0, "MlaDecodeWorkspaceBytes(64, 32): no form uses one");
  checks.Expect(cu::kMlaWgRowGroupBytes == 532480, "kMlaWgRowGroupBytes");
  // What the model gives it: decode-sized bf16 steps only.
  namespace act = model::cuda::act;
  checks.Expect(act::MlaWorkspaceBytes<uint16_t>(64, 64) == 64 * cu::kMlaWgRowGroupBytes, "model workspace, 64 rows");
  checks.Expect(act::MlaWorkspaceBytes<uint16_t>(65, 64) == 0, "model workspace, a 65-row (prefill-sized) step");
  checks.Expect(act::MlaWorkspaceBytes<uint16_t>(8, 32) == 0, "model workspace, 32 heads");
  checks.Expect(act::MlaWorkspaceBytes<float>(8, 64) == 0, "model workspace, float32");
  // A well-formed call on host memory up to the workspace check (nothing runs: rows == 0 after it).
  alignas(16) static uint16_t arena[64 * 576];
  static int32_t table[1] = {0};
  cu::PagedCacheBf16 cache{arena, 1, 64, 64 * 576, 576, table, 1};
  alignas(16) static unsigned char ws[256];
  auto call = [&](void* w, int64_t bytes) {
    return cu::MlaDecodeAttention(arena, arena, 0, 64, 512, 64, cache, table, table, 1.0f, arena, nullptr, w, bytes);
  };
  checks.Refused(call(ws, -1), "workspace_bytes -1", "MlaDecodeAttention negative workspace_bytes");
  checks.Refused(call(nullptr, 256), "workspace_bytes 256 with a null workspace", "MlaDecodeAttention null workspace");
  checks.Expect(call(ws, 256).ok(), "MlaDecodeAttention with a small workspace and no rows");
  checks.Expect(call(nullptr, 0).ok(), "MlaDecodeAttention without a workspace and no rows");
  return checks.Finish("mla");
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
      // More items (rows x 8) than an H200 has SMs (132), so the persistent form's CTAs (every
      // case with a workspace runs it) take one or two items, some of two rows (q reloaded); rope
      // 64 and 0. Then the same rows through a 17-row workspace (pairs of 17 and 7 rows), 128
      // heads (two groups a row), and 200 short rows (1600 items: past 12 an SM, pairs of 198 and
      // 2 rows).
      {64, 512, 64, 64, 0, {3000, 2100, 70, 5000, 2048, 1, 9000, 640},
       {0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0, 0, 2, 4, 6, 1, 3, 5, 7}, 2048, true},
      {64, 512, 0, 64, 0, {3000, 2100, 70, 5000, 2048, 1, 9000, 640},
       {0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0, 0, 2, 4, 6, 1, 3, 5, 7}, 2048, true},
      {64, 512, 0, 64, 0, {3000, 2100, 70, 5000, 2048, 1, 9000, 640},
       {0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0, 0, 2, 4, 6, 1, 3, 5, 7}, 2048, true, std::nullopt, 0, 17},
      {128, 512, 64, 64, 0, {3000, 2100, 70, 5000, 2048, 1, 9000, 640},
       {0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0, 0, 2, 4, 6, 1, 3, 5, 7}, 2048, true},
      {64, 512, 64, 64, 0, {130, 65, 1, 129, 200}, ManyRows(200, 5), 2048, true},
      // The workspace call behind a kernel that writes the selection's offsets 1 ms after
      // letting it start (programmatic dependent launch): the outputs must still equal the
      // cluster form's. A kernel of the op that read the offsets before its PdlWait would see
      // zeros (a read before the wait in the fold once did).
      {64, 512, 64, 64, 0, {3000, 2100, 5000, 2048}, {0, 1, 2, 3, 3, 2, 1, 0}, 2048, false, std::nullopt, 0, 0, true},
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
}

}  // namespace ferry::harness
