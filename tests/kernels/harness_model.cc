// ferry-kernel-check cases for the model glue ops (kernels/cuda/glue.cu, the float32-output and
// batched Linears): each against the plain loop or CPU op its contract names. Ops that only move
// or cast values are compared exactly (every element, untouched ones included); float32
// reductions in the CPU's order to 1e-6; bf16 outputs to 1e-2 (output rounding about 2^-9).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"
#include "tests/kernels/harness.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

// Counts elements whose bits differ; any NaN equals any NaN (payloads may differ: the device
// makes canonical NaNs).
long BitMismatch(const std::vector<float>& got, const std::vector<float>& want) {
  long n = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    n += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
  }
  return n;
}

Result EmbeddingCase(std::mt19937& rng, int64_t vocab, int64_t dim, int64_t rows) {
  Result r;
  std::vector<uint16_t> tb;
  std::vector<float> tf;
  RandomBf16(vocab * dim, 1.0f, 0.0f, rng, &tb, &tf);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(rows);
  for (auto& i : ids) i = id(rng);
  ids[rows / 2] = static_cast<int32_t>(vocab);  // out of range: a NaN row
  std::vector<float> want(rows * dim);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < dim; ++i) want[t * dim + i] = ids[t] < vocab ? tf[ids[t] * dim + i] : NAN;
  }
  Device dev(&r.error);
  uint16_t* table = dev.Upload(tb);
  int32_t* d_ids = dev.Upload(ids);
  float* out = dev.Poisoned<float>(rows * dim);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::EmbeddingGatherF32(table, vocab, dim, d_ids, rows, out));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got = dev.Download(out, rows * dim);
  if (!r.error.empty()) return r;
  for (size_t i = 0; i < got.size(); ++i) r.mismatched += !(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i]);
  r.note = "one row out of range (NaN)";
  return r;
}

Result RmsNormF32Case(std::mt19937& rng, int64_t rows, int64_t dim) {
  Result r;
  r.tolerance = 1e-2;
  std::vector<float> x = RandomF32(rows * dim, 3.0f, 0.5f, rng);
  std::vector<uint16_t> wb;
  std::vector<float> wf;
  RandomBf16(dim, 0.1f, 1.0f, rng, &wb, &wf);
  std::vector<float> want(rows * dim);
  cpu::RmsNorm(x.data(), rows, dim, wf.data(), 1e-5f, want.data());
  Device dev(&r.error);
  float* dx = dev.Upload(x);
  uint16_t* w = dev.Upload(wb);
  uint16_t* y = dev.Poisoned<uint16_t>(rows * dim);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::RmsNormF32ToBf16(dx, rows, dim, w, 1e-5f, y));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got = ToF32(dev.Download(y, rows * dim));
  if (!r.error.empty()) return r;
  r.rel_err = RelErr(got, want, &r.unwritten);
  return r;
}

Result LayerNormCase(std::mt19937& rng, int64_t rows, int64_t dim, bool in_place) {
  Result r;
  r.tolerance = 1e-2;
  std::vector<uint16_t> xb, wb, bb;
  std::vector<float> xf, wf, bf;
  RandomBf16(rows * dim, 2.0f, 1.5f, rng, &xb, &xf);  // an offset, so the mean matters
  RandomBf16(dim, 0.1f, 1.0f, rng, &wb, &wf);
  RandomBf16(dim, 0.5f, 0.0f, rng, &bb, &bf);
  std::vector<float> want(rows * dim);
  cpu::LayerNorm(xf.data(), rows, dim, wf.data(), bf.data(), 1e-6f, want.data());
  Device dev(&r.error);
  uint16_t* x = dev.Upload(xb);
  uint16_t* w = dev.Upload(wb);
  uint16_t* b = dev.Upload(bb);
  uint16_t* y = in_place ? x : dev.Poisoned<uint16_t>(rows * dim);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::LayerNormBf16(x, rows, dim, w, b, 1e-6f, y));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got = ToF32(dev.Download(y, rows * dim));
  if (!r.error.empty()) return r;
  r.rel_err = RelErr(got, want, &r.unwritten);
  return r;
}

// AddBf16ToF32 and both casts: exact.
Result AddAndCastCase(std::mt19937& rng, int64_t n) {
  Result r;
  std::vector<float> x = RandomF32(n, 4.0f, 0.0f, rng);
  std::vector<uint16_t> yb;
  std::vector<float> yf;
  RandomBf16(n, 1.0f, 0.0f, rng, &yb, &yf);
  x[0] = NAN;  // NaN stays NaN through the casts
  std::vector<float> sum(x), to_f32(yf), round_trip(n);
  for (int64_t i = 0; i < n; ++i) sum[i] += yf[i];
  for (int64_t i = 0; i < n; ++i) round_trip[i] = Bf16ToF32(F32ToBf16(x[i]));
  Device dev(&r.error);
  float* dx = dev.Upload(x);
  uint16_t* dy = dev.Upload(yb);
  float* f32 = dev.Poisoned<float>(n);
  uint16_t* b16 = dev.Poisoned<uint16_t>(n);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::CastF32ToBf16(dx, n, b16));
  HARNESS_CHECK_OK(cu::CastBf16ToF32(dy, n, f32));
  HARNESS_CHECK_OK(cu::AddBf16ToF32(dx, dy, n));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got_sum = dev.Download(dx, n), got_f32 = dev.Download(f32, n);
  std::vector<float> got_rt = ToF32(dev.Download(b16, n));
  if (!r.error.empty()) return r;
  r.mismatched = BitMismatch(got_sum, sum) + BitMismatch(got_f32, to_f32) + BitMismatch(got_rt, round_trip);
  return r;
}

Result LinearF32Case(std::mt19937& rng, int64_t rows, int64_t in, int64_t out, float alpha) {
  Result r;
  r.tolerance = 1e-5;  // exact bf16 products, float32 sums in another order
  std::vector<uint16_t> xb, wb;
  std::vector<float> xf, wf;
  RandomBf16(rows * in, 1.0f, 0.0f, rng, &xb, &xf);
  RandomBf16(out * in, 0.05f, 0.0f, rng, &wb, &wf);
  std::vector<float> want(rows * out);
  cpu::Linear(xf.data(), rows, in, wf.data(), out, want.data());
  for (float& v : want) v *= alpha;
  Device dev(&r.error);
  uint16_t* x = dev.Upload(xb);
  uint16_t* w = dev.Upload(wb);
  float* y = dev.Poisoned<float>(rows * out);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::LinearBf16F32(x, rows, in, w, out, alpha, y));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got = dev.Download(y, rows * out);
  if (!r.error.empty()) return r;
  r.rel_err = RelErr(got, want, &r.unwritten);
  return r;
}

// The absorbed-MLA shapes: per head h, y[r, h, :] = w_h · x[r, h, off : off + in]. The row
// strides leave gaps in x (the q_pe part) that must not be read as input.
Result BatchedLinearCase(std::mt19937& rng, int64_t rows, int64_t heads, int64_t in, int64_t gap, int64_t out) {
  Result r;
  r.tolerance = 1e-2;
  const int64_t x_batch = in + gap, x_row = heads * x_batch;
  std::vector<uint16_t> xb, wb;
  std::vector<float> xf, wf;
  RandomBf16(rows * x_row, 1.0f, 0.0f, rng, &xb, &xf);
  RandomBf16(heads * out * in, 0.1f, 0.0f, rng, &wb, &wf);
  std::vector<float> want(rows * heads * out), xs(rows * in), ys(rows * out);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < rows; ++t) std::memcpy(&xs[t * in], &xf[t * x_row + h * x_batch], in * sizeof(float));
    cpu::Linear(xs.data(), rows, in, wf.data() + h * out * in, out, ys.data());
    for (int64_t t = 0; t < rows; ++t) std::memcpy(&want[(t * heads + h) * out], &ys[t * out], out * sizeof(float));
  }
  Device dev(&r.error);
  uint16_t* x = dev.Upload(xb);
  uint16_t* w = dev.Upload(wb);
  uint16_t* y = dev.Poisoned<uint16_t>(rows * heads * out);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::BatchedLinearBf16(x, x_batch, x_row, rows, in, w, out * in, out, y, out, heads * out, heads));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got = ToF32(dev.Download(y, rows * heads * out));
  if (!r.error.empty()) return r;
  r.rel_err = RelErr(got, want, &r.unwritten);
  return r;
}

// Gather a column slice through src_idx and scatter it through dst_idx (one index -1: skipped);
// every element of dst is compared, the unwritten ones against the poison.
Result CopyRowsCase(std::mt19937& rng, int64_t src_rows, int64_t rows, int64_t cols, int64_t src_stride) {
  Result r;
  const int64_t col0 = src_stride - cols, dst_rows = rows + 3;
  std::vector<uint16_t> sb;
  std::vector<float> sf;
  RandomBf16(src_rows * src_stride, 1.0f, 0.0f, rng, &sb, &sf);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(src_rows - 1));
  std::vector<int32_t> src_idx(rows), dst_idx(dst_rows);
  for (auto& i : src_idx) i = pick(rng);
  std::iota(dst_idx.begin(), dst_idx.end(), 0);
  std::shuffle(dst_idx.begin(), dst_idx.end(), rng);
  dst_idx.resize(rows);
  dst_idx[0] = -1;
  std::vector<uint16_t> want(dst_rows * cols, 0xffff);
  for (int64_t j = 1; j < rows; ++j) {
    for (int64_t c = 0; c < cols; ++c) want[dst_idx[j] * cols + c] = sb[src_idx[j] * src_stride + col0 + c];
  }
  Device dev(&r.error);
  uint16_t* src = dev.Upload(sb);
  int32_t* si = dev.Upload(src_idx);
  int32_t* di = dev.Upload(dst_idx);
  uint16_t* dst = dev.Poisoned<uint16_t>(dst_rows * cols);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::CopyRowsBf16(src + col0, src_stride, si, dst, cols, di, rows, cols));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<uint16_t> got = dev.Download(dst, dst_rows * cols);
  if (!r.error.empty()) return r;
  for (size_t i = 0; i < got.size(); ++i) r.mismatched += got[i] != want[i];
  return r;
}

// Rows of three conversations written into a shuffled arena at a column offset; the whole arena
// is compared afterwards (other columns, pages and slots keep their bits). The last row's
// token lies past its table: not written.
Result WritePagedCase(std::mt19937& rng, int64_t page_rows, int64_t width, int64_t cols, int64_t col_offset) {
  Result r;
  const int64_t n_pages = 9, table_stride = 3, page_stride = page_rows * width + 16;
  std::vector<uint16_t> arena, src;
  std::vector<float> unused;
  RandomBf16(n_pages * page_stride, 1.0f, 0.0f, rng, &arena, &unused);
  std::vector<int32_t> ids(n_pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t convs = 3;
  std::vector<int32_t> conv_table(convs * table_stride);
  for (size_t i = 0; i < conv_table.size(); ++i) conv_table[i] = ids[i];
  // Query rows: tokens of conversation r % 3 at positions spread over its pages.
  const int64_t rows = 12;
  std::vector<int32_t> table(rows * table_stride);
  std::vector<int64_t> pos(rows);
  for (int64_t q = 0; q < rows; ++q) {
    std::memcpy(&table[q * table_stride], &conv_table[(q % convs) * table_stride], table_stride * sizeof(int32_t));
    pos[q] = (q / convs) * (table_stride * page_rows / 4) + q % convs;  // distinct (conversation, token)
  }
  pos[rows - 1] = table_stride * page_rows;  // past the table
  RandomBf16(rows * cols, 1.0f, 0.0f, rng, &src, &unused);
  std::vector<uint16_t> want = arena;
  for (int64_t q = 0; q + 1 < rows; ++q) {
    const int64_t page = table[q * table_stride + pos[q] / page_rows];
    for (int64_t c = 0; c < cols; ++c) {
      want[page * page_stride + (pos[q] % page_rows) * width + col_offset + c] = src[q * cols + c];
    }
  }
  Device dev(&r.error);
  uint16_t* d_arena = dev.Upload(arena);
  uint16_t* d_src = dev.Upload(src);
  int32_t* d_table = dev.Upload(table);
  int64_t* d_pos = dev.Upload(pos);
  if (!r.error.empty()) return r;
  cu::PagedCacheBf16 view{d_arena, n_pages, page_rows, page_stride, width, d_table, table_stride};
  HARNESS_CHECK_OK(cu::WritePagedRowsBf16(d_src, rows, cols, cols, col_offset, d_pos, view));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<uint16_t> got = dev.Download(d_arena, arena.size());
  if (!r.error.empty()) return r;
  for (size_t i = 0; i < got.size(); ++i) r.mismatched += got[i] != want[i];
  return r;
}

Result CompactCase(std::mt19937& rng, int64_t rows, int64_t k) {
  Result r;
  std::uniform_int_distribution<int32_t> count(0, static_cast<int32_t>(k));
  std::vector<int32_t> ids(rows * k), counts(rows), want_sel, want_off;
  for (auto& i : ids) i = static_cast<int32_t>(rng() % 100000);
  for (auto& c : counts) c = count(rng);
  counts[0] = static_cast<int32_t>(k) + 5;  // out of range: counts as 0
  for (int64_t q = 0; q < rows; ++q) {
    want_off.push_back(static_cast<int32_t>(want_sel.size()));
    const int32_t n = (counts[q] < 0 || counts[q] > k) ? 0 : counts[q];
    for (int32_t j = 0; j < n; ++j) want_sel.push_back(ids[q * k + j]);
  }
  want_off.push_back(static_cast<int32_t>(want_sel.size()));
  Device dev(&r.error);
  int32_t* d_ids = dev.Upload(ids);
  int32_t* d_counts = dev.Upload(counts);
  int32_t* sel = dev.Poisoned<int32_t>(rows * k);
  int32_t* off = dev.Poisoned<int32_t>(rows + 1);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::CompactSelection(d_ids, d_counts, rows, k, sel, off));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<int32_t> got_sel = dev.Download(sel, rows * k), got_off = dev.Download(off, rows + 1);
  if (!r.error.empty()) return r;
  for (size_t i = 0; i < want_off.size(); ++i) r.mismatched += got_off[i] != want_off[i];
  for (size_t i = 0; i < want_sel.size(); ++i) r.mismatched += got_sel[i] != want_sel[i];
  return r;
}

Result MoeCombineCase(std::mt19937& rng, int64_t rows, int64_t top_k, int64_t dim, bool shared) {
  Result r;
  r.tolerance = 1e-6;  // the CPU's order of operations: rounding of expf-free sums only
  std::vector<uint16_t> sb, hb;
  std::vector<float> sf, hf;
  RandomBf16(rows * top_k * dim, 1.0f, 0.0f, rng, &sb, &sf);
  RandomBf16(shared ? rows * dim : 0, 1.0f, 0.0f, rng, &hb, &hf);
  std::vector<float> w = RandomF32(rows * top_k, 0.5f, 0.5f, rng);
  std::vector<float> x = RandomF32(rows * dim, 2.0f, 0.0f, rng);
  std::vector<float> want(x);
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<float> y(dim, 0.0f);
    for (int64_t j = 0; j < top_k; ++j) {
      for (int64_t i = 0; i < dim; ++i) y[i] += sf[(t * top_k + j) * dim + i] * w[t * top_k + j];
    }
    for (int64_t i = 0; i < dim; ++i) want[t * dim + i] += shared ? y[i] + hf[t * dim + i] : y[i];
  }
  Device dev(&r.error);
  uint16_t* s = dev.Upload(sb);
  uint16_t* h = shared ? dev.Upload(hb) : nullptr;
  float* dw = dev.Upload(w);
  float* dx = dev.Upload(x);
  if (!r.error.empty()) return r;
  // And with assign into a poisoned x: the combine alone (x + it, as above, minus x's part).
  std::vector<float> zeros(rows * dim, 0.0f), want_assign(rows * dim);
  for (size_t i = 0; i < want_assign.size(); ++i) want_assign[i] = want[i] - x[i];
  float* dz = dev.Upload(zeros);
  float* da = dev.Poisoned<float>(rows * dim);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::MoeCombineF32(s, dw, h, rows, top_k, dim, dx));
  HARNESS_CHECK_OK(cu::MoeCombineF32(s, dw, h, rows, top_k, dim, dz));
  HARNESS_CHECK_OK(cu::MoeCombineF32(s, dw, h, rows, top_k, dim, da, nullptr, /*assign=*/true));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got = dev.Download(dx, rows * dim), added = dev.Download(dz, rows * dim),
                     assigned = dev.Download(da, rows * dim);
  if (!r.error.empty()) return r;
  for (size_t i = 0; i < added.size(); ++i) r.mismatched += std::memcmp(&added[i], &assigned[i], sizeof(float)) != 0;
  r.rel_err = std::max(RelErr(got, want, &r.unwritten), RelErr(assigned, want_assign, &r.unwritten));
  r.note = "add into x; assign equals the add into zeros bit for bit";
  return r;
}

// ZeroWords on words [first, first + n) of a poisoned buffer: those become 0, every other word keeps
// the poison (mismatched counts both kinds of error).
Result ZeroWordsCase(int64_t total, int64_t first, int64_t n) {
  Result r;
  Device dev(&r.error);
  uint32_t* d = dev.Poisoned<uint32_t>(static_cast<size_t>(total));
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::ZeroWords(d + first, n));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint32_t> got = dev.Download(d, static_cast<size_t>(total));
  if (!r.error.empty()) return r;
  for (int64_t i = 0; i < total; ++i) {
    const bool inside = i >= first && i < first + n;
    r.mismatched += got[static_cast<size_t>(i)] != (inside ? 0u : 0xffffffffu);
  }
  return r;
}

// ---- The float32-activation twins (verification precision). ----

// RMSNorm in place, LayerNorm, and the float32 Linear with alpha, each against its CPU op.
Result NormsAndLinearF32Case(std::mt19937& rng, int64_t rows, int64_t dim, int64_t out) {
  Result r;
  r.tolerance = 1e-5;
  std::vector<float> x = RandomF32(rows * dim, 2.0f, 0.7f, rng), w = RandomF32(dim, 0.1f, 1.0f, rng),
                     b = RandomF32(dim, 0.3f, 0.0f, rng), lw = RandomF32(out * dim, 0.05f, 0.0f, rng);
  std::vector<float> want_rms(rows * dim), want_ln(rows * dim), want_lin(rows * out);
  cpu::RmsNorm(x.data(), rows, dim, w.data(), 1e-5f, want_rms.data());
  cpu::LayerNorm(x.data(), rows, dim, w.data(), b.data(), 1e-6f, want_ln.data());
  cpu::Linear(x.data(), rows, dim, lw.data(), out, want_lin.data());
  for (float& v : want_lin) v *= 0.5f;
  Device dev(&r.error);
  float* d_rms = dev.Upload(x);
  float* d_x = dev.Upload(x);
  float* d_w = dev.Upload(w);
  float* d_b = dev.Upload(b);
  float* d_lw = dev.Upload(lw);
  float* d_ln = dev.Poisoned<float>(rows * dim);
  float* d_lin = dev.Poisoned<float>(rows * out);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::RmsNormF32(d_rms, rows, dim, d_w, 1e-5f, d_rms));
  HARNESS_CHECK_OK(cu::LayerNormF32(d_x, rows, dim, d_w, d_b, 1e-6f, d_ln));
  HARNESS_CHECK_OK(cu::LinearF32(d_x, rows, dim, d_lw, out, 0.5f, d_lin));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got = dev.Download(d_rms, rows * dim), ln = dev.Download(d_ln, rows * dim),
                     lin = dev.Download(d_lin, rows * out);
  if (!r.error.empty()) return r;
  r.rel_err = std::max({RelErr(got, want_rms, &r.unwritten), RelErr(ln, want_ln, &r.unwritten),
                        RelErr(lin, want_lin, &r.unwritten)});
  r.note = "rms_norm (in place), layer_norm, linear (alpha 0.5): the worst";
  return r;
}

// RoPE (a strided slice, everything else untouched), SwiGLU with a clamp, the batched Linear.
Result RopeSwiGluBatchedF32Case(std::mt19937& rng, int64_t rows, int64_t heads, int64_t nope, int64_t rope,
                                int64_t out) {
  Result r;
  r.tolerance = 1e-5;
  const int64_t hs = nope + rope;
  std::vector<float> q = RandomF32(rows * heads * hs, 1.0f, 0.0f, rng);
  std::vector<int64_t> pos(rows);
  for (int64_t t = 0; t < rows; ++t) pos[t] = t * 37 + 5;
  const std::vector<float> inv = cpu::RopeInvFreq(rope, 10000.0);
  std::vector<float> want_q = q;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < heads; ++h) cpu::RopeInterleaved(&want_q[(t * heads + h) * hs + nope], rope, pos[t], inv.data());
  }
  std::vector<float> gu = RandomF32(rows * 2 * out, 6.0f, 0.0f, rng), want_sw(rows * out);
  for (int64_t t = 0; t < rows; ++t) cpu::SwiGlu(&gu[t * 2 * out], &gu[t * 2 * out + out], out, 7.0f, &want_sw[t * out]);
  std::vector<float> w = RandomF32(heads * out * nope, 0.1f, 0.0f, rng), want_b(rows * heads * out), xs(rows * nope),
                     ys(rows * out);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < rows; ++t) std::copy_n(&q[(t * heads + h) * hs], nope, &xs[t * nope]);
    cpu::Linear(xs.data(), rows, nope, w.data() + h * out * nope, out, ys.data());
    for (int64_t t = 0; t < rows; ++t) std::copy_n(&ys[t * out], out, &want_b[(t * heads + h) * out]);
  }
  Device dev(&r.error);
  float* d_q = dev.Upload(q);
  float* d_q2 = dev.Upload(q);
  int64_t* d_pos = dev.Upload(pos);
  float* d_inv = dev.Upload(inv);
  float* d_gu = dev.Upload(gu);
  float* d_sw = dev.Poisoned<float>(rows * out);
  float* d_w = dev.Upload(w);
  float* d_b = dev.Poisoned<float>(rows * heads * out);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::RopeInterleavedF32(d_q, rows, heads, heads * hs, hs, nope, rope, d_pos, d_inv));
  HARNESS_CHECK_OK(cu::SwiGluF32(d_gu, d_gu + out, rows, out, 2 * out, 7.0f, d_sw));
  HARNESS_CHECK_OK(cu::BatchedLinearF32(d_q2, hs, heads * hs, rows, nope, d_w, out * nope, out, d_b, out, heads * out, heads));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got_q = dev.Download(d_q, q.size()), sw = dev.Download(d_sw, rows * out),
                     bl = dev.Download(d_b, rows * heads * out);
  if (!r.error.empty()) return r;
  r.rel_err = std::max({RelErr(got_q, want_q, &r.unwritten), RelErr(sw, want_sw, &r.unwritten),
                        RelErr(bl, want_b, &r.unwritten)});
  for (int64_t t = 0; t < rows; ++t) {  // the nope parts keep their bits
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < nope; ++i) r.mismatched += got_q[(t * heads + h) * hs + i] != q[(t * heads + h) * hs + i];
    }
  }
  r.note = "rope, swiglu (limit 7), batched linear: the worst";
  return r;
}

// Row copies (gather + scatter), paged writes, residual add and the MoE combine, float32.
Result MovesF32Case(std::mt19937& rng, int64_t rows, int64_t dim, int64_t top_k) {
  Result r;
  r.tolerance = 1e-6;
  // Copy: dst[perm[j]] = src[idx[j]]; everything exact.
  std::vector<float> src = RandomF32(rows * dim, 1.0f, 0.0f, rng);
  std::vector<int32_t> idx(rows), perm(rows);
  for (auto& i : idx) i = static_cast<int32_t>(rng() % rows);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<float> want_copy(rows * dim);
  for (int64_t j = 0; j < rows; ++j) std::copy_n(&src[idx[j] * dim], dim, &want_copy[perm[j] * dim]);
  // Paged write: one conversation over pages 2, 0, 1 of 4-row pages, rows at positions 0..rows-1.
  const int64_t page_rows = 4, pages = (rows + page_rows - 1) / page_rows + 1, width = dim + 8;
  std::vector<float> arena = RandomF32(pages * page_rows * width, 1.0f, 0.0f, rng), want_arena = arena;
  std::vector<int32_t> ids(pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table;
  std::vector<int64_t> pos(rows);
  for (int64_t t = 0; t < rows; ++t) {
    table.insert(table.end(), ids.begin(), ids.end());
    pos[t] = t;
    std::copy_n(&src[t * dim], dim, &want_arena[(ids[t / page_rows] * page_rows + t % page_rows) * width + 8]);
  }
  // Combine.
  std::vector<float> slots = RandomF32(rows * top_k * dim, 1.0f, 0.0f, rng), wts = RandomF32(rows * top_k, 0.5f, 0.5f, rng),
                     shared = RandomF32(rows * dim, 1.0f, 0.0f, rng), x = RandomF32(rows * dim, 1.0f, 0.0f, rng);
  std::vector<float> want_x(x);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < dim; ++i) {
      float y = 0.0f;
      for (int64_t j = 0; j < top_k; ++j) y += slots[(t * top_k + j) * dim + i] * wts[t * top_k + j];
      want_x[t * dim + i] += y + shared[t * dim + i];
      want_x[t * dim + i] += src[t * dim + i];  // then AddF32(x, src)
    }
  }
  Device dev(&r.error);
  float* d_src = dev.Upload(src);
  int32_t* d_idx = dev.Upload(idx);
  int32_t* d_perm = dev.Upload(perm);
  float* d_copy = dev.Poisoned<float>(rows * dim);
  float* d_arena = dev.Upload(arena);
  int32_t* d_table = dev.Upload(table);
  int64_t* d_pos = dev.Upload(pos);
  float* d_slots = dev.Upload(slots);
  float* d_w = dev.Upload(wts);
  float* d_sh = dev.Upload(shared);
  float* d_x = dev.Upload(x);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::CopyRowsF32(d_src, dim, d_idx, d_copy, dim, d_perm, rows, dim));
  cu::PagedCacheF32 view{d_arena, pages, page_rows, page_rows * width, width, d_table, pages};
  HARNESS_CHECK_OK(cu::WritePagedRowsF32(d_src, rows, dim, dim, 8, d_pos, view));
  HARNESS_CHECK_OK(cu::MoeCombineF32Slots(d_slots, d_w, d_sh, rows, top_k, dim, d_x));
  HARNESS_CHECK_OK(cu::AddF32(d_x, d_src, rows * dim));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got_copy = dev.Download(d_copy, rows * dim), got_arena = dev.Download(d_arena, arena.size()),
                     got_x = dev.Download(d_x, rows * dim);
  if (!r.error.empty()) return r;
  r.mismatched = BitMismatch(got_copy, want_copy) + BitMismatch(got_arena, want_arena);
  r.rel_err = RelErr(got_x, want_x, &r.unwritten);
  r.note = "copy rows and paged write exact; combine + add by norm";
  return r;
}

// One slice of the tensor-parallel reduction summed in rank order on the device: the host's
// fixed-order loop bit for bit (signed zeros and non-multiples of the block included).
Result SumInRankOrderCase(std::mt19937& rng, int64_t ranks, int64_t n) {
  Result r;
  r.tolerance = 0;
  const int64_t stride = n + 3;
  std::vector<float> parts = RandomF32(ranks * stride, 1.0f, 0.0f, rng);
  for (int64_t q = 0; q < ranks; ++q) parts[q * stride] = -0.0f;  // -0 + -0 ... stays -0
  std::vector<float> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    want[i] = parts[i];
    for (int64_t q = 1; q < ranks; ++q) want[i] += parts[q * stride + i];
  }
  Device dev(&r.error);
  float* d_parts = dev.Upload(parts);
  float* d_out = dev.Poisoned<float>(n);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::SumInRankOrderF32(d_parts, ranks, n, stride, d_out));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got = dev.Download(d_out, n);
  if (!r.error.empty()) return r;
  r.mismatched = BitMismatch(got, want);
  r.note = "bit for bit";
  return r;
}

}  // namespace

void AddModelCases(std::vector<Case>* cases) {
  auto add = [&](std::string name, std::function<Result(std::mt19937&)> f) { cases->push_back({std::move(name), f}); };
  add("sum_in_rank_order_f32 ranks=2 n=6144", [](std::mt19937& g) { return SumInRankOrderCase(g, 2, 6144); });
  add("sum_in_rank_order_f32 ranks=5 n=100003", [](std::mt19937& g) { return SumInRankOrderCase(g, 5, 100003); });
  add("embedding_gather_f32 vocab=384 dim=128 rows=37", [](std::mt19937& g) { return EmbeddingCase(g, 384, 128, 37); });
  add("embedding_gather_f32 vocab=5000 dim=6144 rows=9", [](std::mt19937& g) { return EmbeddingCase(g, 5000, 6144, 9); });
  add("rms_norm_f32_to_bf16 rows=5 dim=128", [](std::mt19937& g) { return RmsNormF32Case(g, 5, 128); });
  add("rms_norm_f32_to_bf16 rows=33 dim=6144", [](std::mt19937& g) { return RmsNormF32Case(g, 33, 6144); });
  add("layer_norm_bf16 rows=7 dim=32", [](std::mt19937& g) { return LayerNormCase(g, 7, 32, false); });
  add("layer_norm_bf16 rows=40 dim=128 in_place", [](std::mt19937& g) { return LayerNormCase(g, 40, 128, true); });
  add("add_bf16_to_f32 + casts n=100003", [](std::mt19937& g) { return AddAndCastCase(g, 100003); });
  add("linear_bf16_f32 rows=37 in=128 out=16 alpha=0.25", [](std::mt19937& g) { return LinearF32Case(g, 37, 128, 16, 0.25f); });
  add("linear_bf16_f32 rows=5 in=6144 out=2048", [](std::mt19937& g) { return LinearF32Case(g, 5, 6144, 2048, 1.0f); });
  add("linear_bf16_f32 gemv rows=2 in=6144 out=256 alpha=0.125",
      [](std::mt19937& g) { return LinearF32Case(g, 2, 6144, 256, 0.125f); });
  add("batched_linear_bf16 q_abs rows=9 heads=8 in=32 gap=16 out=64",
      [](std::mt19937& g) { return BatchedLinearCase(g, 9, 8, 32, 16, 64); });
  add("batched_linear_bf16 w_uv rows=17 heads=64 in=512 out=256",
      [](std::mt19937& g) { return BatchedLinearCase(g, 17, 64, 512, 0, 256); });
  add("copy_rows_bf16 gather+scatter rows=50 cols=16 stride=48",
      [](std::mt19937& g) { return CopyRowsCase(g, 30, 50, 16, 48); });
  add("copy_rows_bf16 rows=200 cols=6144", [](std::mt19937& g) { return CopyRowsCase(g, 300, 200, 6144, 6144); });
  add("write_paged_rows_bf16 page=16 width=80 cols=64 offset=0",
      [](std::mt19937& g) { return WritePagedCase(g, 16, 80, 64, 0); });
  add("write_paged_rows_bf16 page=64 width=576 cols=64 offset=512",
      [](std::mt19937& g) { return WritePagedCase(g, 64, 576, 64, 512); });
  add("compact_selection rows=37 k=16", [](std::mt19937& g) { return CompactCase(g, 37, 16); });
  add("compact_selection rows=1000 k=2048", [](std::mt19937& g) { return CompactCase(g, 1000, 2048); });
  add("compact_selection rows=1 k=2048", [](std::mt19937& g) { return CompactCase(g, 1, 2048); });
  // More rows than blocks: a block takes several rows.
  add("compact_selection rows=3001 k=9", [](std::mt19937& g) { return CompactCase(g, 3001, 9); });
  add("moe_combine_f32 rows=37 k=4 dim=128 shared", [](std::mt19937& g) { return MoeCombineCase(g, 37, 4, 128, true); });
  add("moe_combine_f32 rows=5 k=8 dim=6144", [](std::mt19937& g) { return MoeCombineCase(g, 5, 8, 6144, false); });
  add("zero_words 70001 of 80000 from 3 (the rest untouched)",
      [](std::mt19937&) { return ZeroWordsCase(80000, 3, 70001); });
  add("zero_words 0 (nothing written)", [](std::mt19937&) { return ZeroWordsCase(64, 5, 0); });
  add("f32: rms_norm + layer_norm + linear rows=37 dim=128 out=96",
      [](std::mt19937& g) { return NormsAndLinearF32Case(g, 37, 128, 96); });
  add("f32: rms_norm + layer_norm + linear rows=5 dim=6144 out=2048",
      [](std::mt19937& g) { return NormsAndLinearF32Case(g, 5, 6144, 2048); });
  add("f32: rope + swiglu + batched_linear rows=9 heads=8 nope=32 rope=16 out=64",
      [](std::mt19937& g) { return RopeSwiGluBatchedF32Case(g, 9, 8, 32, 16, 64); });
  add("f32: copy_rows + write_paged + moe_combine + add rows=37 dim=128 k=4",
      [](std::mt19937& g) { return MovesF32Case(g, 37, 128, 4); });
}

}  // namespace ferry::harness
