// ferry-kernel-check cases for the FP8 experts: PackFp8 (exactly, against a host packing) and
// GroupedLinearFp8 (the prefill experts over E4M3 weights) against cpu::Linear over the weights
// upcast as the loader does, with a batch-invariance check; the W8A8 product (GroupedLinearW8A8
// and its decode form GroupedLinearW8A8Moe) against cpu::LinearW8A8; the FP8 ops' host-side
// argument checks. The activation quantization's cases are harness_quantize.cc's.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/ops.h"
#include "tests/kernels/harness.h"
#include "tests/kernels/harness_moe.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

// Whether the FP8 kernels can run here (sm_90a code and a compute capability 9.0 device); if
// not, r's note says that `op` was skipped.
bool Fp8Runs(const char* op, Result* r) {
  if (cu::GroupedLinearFp8Available()) return true;
  r->note = absl::StrCat("skipped: ", op, " needs sm_90a code and a compute capability 9.0 device");
  return false;
}

struct Fp8Shape {
  int64_t in, out;
  std::vector<int64_t> rows;  // one problem each
};

// The packed layout of linear_fp8.h on the host: tiles of 128 x 64 (zero outside), each in the
// order of the kernel's A register fragments: for thread t (warpgroup t / 128, warp (t % 128) /
// 32, lane l), k16 step kk and register r = 0..3, the two bytes of mma.m16n8k16's A fragment
// register r.
std::vector<uint8_t> PackFp8Host(const std::vector<uint8_t>& w, int64_t out, int64_t in) {
  const int64_t kb_count = (in + cu::kFp8TileCols - 1) / cu::kFp8TileCols;
  const int64_t tile = cu::kFp8TileRows * cu::kFp8TileCols;
  std::vector<uint8_t> packed(static_cast<size_t>(cu::Fp8PackedBytes(out, in)), 0);
  for (int64_t t = 0; t < static_cast<int64_t>(packed.size()) / tile; ++t) {
    const int64_t ob = t / kb_count, kb = t % kb_count;
    for (int thread = 0; thread < 256; ++thread) {
      const int lane = thread % 32, row0 = 64 * (thread / 128) + 16 * ((thread % 128) / 32) + lane / 4;
      for (int kk = 0; kk < 4; ++kk) {
        for (int reg = 0; reg < 4; ++reg) {
          for (int half = 0; half < 2; ++half) {
            const int64_t row = ob * cu::kFp8TileRows + row0 + 8 * (reg % 2);
            const int64_t col = kb * cu::kFp8TileCols + 16 * kk + 2 * (lane % 4) + half + 8 * (reg / 2);
            const size_t at = static_cast<size_t>(t * tile + thread * 32 + kk * 8 + reg * 2 + half);
            packed[at] = row < out && col < in ? w[static_cast<size_t>(row * in + col)] : 0;
          }
        }
      }
    }
  }
  return packed;
}

// Random E4M3 bytes (never the NaN codes 0x7f / 0xff) and block scales; *upcast gets
// bf16_rn(float(e4m3) * scale) as float, the loader's weight.
void RandomFp8(int64_t out, int64_t in, std::mt19937& rng, std::vector<uint8_t>* w, std::vector<float>* scale,
               std::vector<float>* upcast) {
  const int64_t srows = (out + cu::kFp8BlockRows - 1) / cu::kFp8BlockRows;
  const int64_t scols = (in + cu::kFp8BlockCols - 1) / cu::kFp8BlockCols;
  std::uniform_int_distribution<int> byte(0, 253);
  std::uniform_real_distribution<float> sd(0.5e-3f, 2e-3f);
  w->resize(static_cast<size_t>(out * in));
  scale->resize(static_cast<size_t>(srows * scols));
  upcast->resize(w->size());
  for (float& v : *scale) v = sd(rng);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      int b = byte(rng);
      if (b >= 0x7f) ++b;  // skip 0x7f; 0xff is past the range
      const size_t k = static_cast<size_t>(o * in + i);
      (*w)[k] = static_cast<uint8_t>(b);
      const float s = (*scale)[static_cast<size_t>((o / cu::kFp8BlockRows) * scols + i / cu::kFp8BlockCols)];
      (*upcast)[k] = Bf16ToF32(F32ToBf16(F8E4M3ToF32(static_cast<uint8_t>(b)) * s));
    }
  }
}

// Counts the bytes of `got` that differ from `want` into r's mismatches (noting `what`).
void CountDiffering(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const char* what, Result* r) {
  long differ = 0;
  for (size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
  r->mismatched += differ;
  if (differ > 0) r->note += absl::StrCat(" ", differ, " ", what);
}

// Batch invariance of a grouped call: the largest problem's last row alone, as a problem of one
// row (`one_row(problem, row)` makes it, its y poisoned), gives the bits it had in the call (ys).
// run(&one) runs the op on it.
template <typename Group, typename OneRow, typename Run>
void CheckLastRowAlone(Device& dev, const Fp8Shape& s, const std::vector<Group>& g,
                       const std::vector<std::vector<uint16_t>>& ys, OneRow one_row, Run run, Result* r) {
  const size_t big = static_cast<size_t>(std::max_element(s.rows.begin(), s.rows.end()) - s.rows.begin());
  if (s.rows[big] == 0) return;
  Group one = one_row(g[big], s.rows[big] - 1);
  one.rows = 1;
  one.y = dev.Poisoned<uint16_t>(static_cast<size_t>(s.out));
  if (!r->error.empty()) return;
  absl::Status st = run(&one);
  if (st.ok()) st = cu::Synchronize();
  if (!st.ok()) {
    r->error = std::string(st.message());
    return;
  }
  const std::vector<uint16_t> a = dev.Download(one.y, static_cast<size_t>(s.out));
  long differ = 0;
  for (int64_t o = 0; o < s.out; ++o) differ += a[o] != ys[big][(s.rows[big] - 1) * s.out + o];
  r->mismatched += differ;
  if (differ > 0) r->note += absl::StrCat(" ", differ, " outputs of the last row differ from it alone");
}

Result GroupedFp8Case(std::mt19937& rng, const Fp8Shape& s) {
  Result r;
  r.tolerance = 1e-2;
  if (!Fp8Runs("GroupedLinearFp8", &r)) return r;
  Device dev(&r.error);
  const size_t n = s.rows.size();
  const size_t packed_bytes = static_cast<size_t>(cu::Fp8PackedBytes(s.out, s.in));
  std::vector<std::vector<float>> wf(n), xf(n);
  std::vector<std::vector<uint8_t>> want_packed(n);
  std::vector<cu::LinearGroupFp8> g(n);
  for (size_t p = 0; p < n; ++p) {
    std::vector<uint8_t> wb;
    std::vector<float> scale;
    RandomFp8(s.out, s.in, rng, &wb, &scale, &wf[p]);
    want_packed[p] = PackFp8Host(wb, s.out, s.in);
    std::vector<uint16_t> xb;
    RandomBf16(static_cast<size_t>(s.rows[p] * s.in), 1.0f, 0.0f, rng, &xb, &xf[p]);
    uint8_t* packed = dev.Poisoned<uint8_t>(packed_bytes);
    const uint8_t* row_major = dev.Upload(wb);
    if (!r.error.empty()) return r;
    HARNESS_CHECK_OK(cu::PackFp8(row_major, s.out, s.in, packed));
    g[p] = {dev.Upload(xb), s.rows[p], packed, dev.Upload(scale),
            dev.Poisoned<uint16_t>(static_cast<size_t>(s.rows[p] * s.out))};
  }
  if (!r.error.empty()) return r;
  // The packing, exactly (every byte: the tiles and their zero padding).
  for (size_t p = 0; p < n; ++p) {
    CountDiffering(dev.Download(g[p].w, packed_bytes), want_packed[p], "packed bytes differ from the host's packing",
                   &r);
  }
  HARNESS_CHECK_OK(cu::GroupedLinearFp8(g.data(), static_cast<int64_t>(n), s.in, s.out));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got, want;
  std::vector<std::vector<uint16_t>> ys(n);
  for (size_t p = 0; p < n; ++p) {
    ys[p] = dev.Download(g[p].y, static_cast<size_t>(s.rows[p] * s.out));
    std::vector<float> ref(static_cast<size_t>(s.rows[p] * s.out));
    if (s.rows[p] > 0) cpu::Linear(xf[p].data(), s.rows[p], s.in, wf[p].data(), s.out, ref.data());
    const std::vector<float> y = ToF32(ys[p]);
    got.insert(got.end(), y.begin(), y.end());
    want.insert(want.end(), ref.begin(), ref.end());
  }
  r.rel_err = RelErr(got, want, &r.unwritten);

  CheckLastRowAlone(
      dev, s, g, ys,
      [&](cu::LinearGroupFp8 one, int64_t row) {
        one.x += row * s.in;
        return one;
      },
      [&](const cu::LinearGroupFp8* one) { return cu::GroupedLinearFp8(one, 1, s.in, s.out); }, &r);
  // Bad shapes are refused with the numbers, nothing launched.
  if (cu::GroupedLinearFp8(g.data(), static_cast<int64_t>(n), s.in + 8, s.out).ok()) {
    ++r.mismatched;
    r.note += " in % 16 != 0 was accepted";
  }
  return r;
}


// PackFp8W8A8's tiles on the host: 128 x 128, row r's 16-byte chunk c at r * 128 + 16 (c ^ r % 8).
std::vector<uint8_t> PackW8A8Host(const std::vector<uint8_t>& w, int64_t out, int64_t in) {
  const int64_t kb_count = (in + 127) / 128;
  std::vector<uint8_t> packed(static_cast<size_t>(cu::Fp8W8A8PackedBytes(out, in)), 0);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      const int64_t tile = (o / 128) * kb_count + i / 128, r = o % 128, c = (i % 128) / 16;
      packed[static_cast<size_t>(tile * 16384 + r * 128 + ((c ^ (r % 8)) * 16) + i % 16)] =
          w[static_cast<size_t>(o * in + i)];
    }
  }
  return packed;
}

// GroupedLinearW8A8Moe over a routing grouped on the device by MoeGroupPairs, each pair's product
// against cpu::LinearW8A8 of that pair's row: the gate_up form (two parts into one row's halves,
// x gathered from the quantized rows of a by src_row) and the down form (x the pairs' own rows,
// routed pairs scattered to order[j], the shared expert's to its row of y_shared). Columns past
// the parts and rows no pair names stay poisoned; the error word stays 0. With `twice` the row's
// top_k picks are all expert 0 (more pairs than the launch's 16 rows): the error word must be 2.
Result W8A8MoeCase(std::mt19937& rng, const MoeShape& s, bool twice = false) {
  Result r;
  r.tolerance = 1e-2;
  if (!Fp8Runs("GroupedLinearW8A8Moe", &r)) return r;
  const int64_t R = s.rows, K = s.top_k, E = s.n_experts, in = s.in, out = s.out, pairs = R * K + (s.shared ? R : 0);
  const int64_t groups = (in + 127) / 128;
  std::vector<int32_t> ids(static_cast<size_t>(R * K));
  for (int64_t t = 0; t < R; ++t) {  // K distinct experts a row, as MoeRoute picks them
    std::vector<int32_t> all(static_cast<size_t>(E));
    for (int32_t e = 0; e < E; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    if (twice) all.assign(static_cast<size_t>(K), 0);
    std::copy_n(all.begin(), K, ids.begin() + t * K);
  }
  const HostPairs h = SortPairs(ids, s);
  std::vector<int32_t> expert_of(h.order.size());
  for (size_t g = 0; g < h.group_expert.size(); ++g) {
    for (int32_t j = 0; j < h.group_count[g]; ++j) expert_of[h.group_start[g] + j] = h.group_expert[g];
  }
  Device dev(&r.error);
  const DevicePairs d = TakePairs(dev, s, R);
  const int32_t* d_ids = dev.Upload(ids);
  // Weights: [part][expert] (two parts; the shared expert at E), packed on the host.
  std::vector<std::vector<uint8_t>> wq(2 * (E + 1));
  std::vector<std::vector<float>> ws(wq.size());
  std::vector<const uint8_t*> packed(wq.size());
  std::vector<const float*> scales(wq.size());
  for (size_t i = 0; i < wq.size(); ++i) {
    std::vector<float> unused;
    RandomFp8(out, in, rng, &wq[i], &ws[i], &unused);
    packed[i] = dev.Upload(PackW8A8Host(wq[i], out, in));
    scales[i] = dev.Upload(ws[i]);
  }
  const cu::W8A8ExpertTable parts[2] = {
      {dev.Upload(std::vector<const uint8_t*>(packed.begin(), packed.begin() + E + 1)),
       dev.Upload(std::vector<const float*>(scales.begin(), scales.begin() + E + 1))},
      {dev.Upload(std::vector<const uint8_t*>(packed.begin() + E + 1, packed.end())),
       dev.Upload(std::vector<const float*>(scales.begin() + E + 1, scales.end()))}};
  // x: a's R rows (the gate_up form) and the pairs' own rows (the down form), quantized on the host.
  auto quantized = [&](int64_t rows, std::vector<uint8_t>* q, std::vector<float>* sc) {
    std::vector<uint16_t> xb;
    std::vector<float> xf;
    RandomBf16(static_cast<size_t>(rows * in), 1.0f, 0.0f, rng, &xb, &xf);
    q->resize(static_cast<size_t>(rows * in));
    sc->resize(static_cast<size_t>(groups * rows));
    cpu::QuantizeActFp8(xf.data(), rows, in, q->data(), sc->data(), rows);
  };
  std::vector<uint8_t> qa, qp;
  std::vector<float> sa, sp;
  quantized(R, &qa, &sa);
  quantized(pairs, &qp, &sp);
  const int64_t ldy = 2 * out + 8;
  uint16_t* y_gu = dev.Poisoned<uint16_t>(static_cast<size_t>(pairs * ldy));
  uint16_t* slots = dev.Poisoned<uint16_t>(static_cast<size_t>(R * K * (out + 8)));
  uint16_t* y_shared = dev.Poisoned<uint16_t>(static_cast<size_t>(R * (out + 8)));
  void* scratch = dev.Poisoned<uint8_t>(static_cast<size_t>(cu::kGroupedW8A8MoeScratchBytes));
  const uint8_t* d_qa = dev.Upload(qa);
  const uint8_t* d_qp = dev.Upload(qp);
  const float* d_sa = dev.Upload(sa);
  const float* d_sp = dev.Upload(sp);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::MoeGroupPairs(d_ids, R, K, E, s.shared, d.p, d.error));
  HARNESS_CHECK_OK(cu::GroupedLinearW8A8Moe(parts, 2, d.p, R, E, d_qa, d_sa, R, /*gather_x=*/true, in, out, y_gu,
                                            ldy, /*scatter_y=*/false, nullptr, scratch, d.error));
  HARNESS_CHECK_OK(cu::GroupedLinearW8A8Moe(parts, 1, d.p, R, E, d_qp, d_sp, pairs, /*gather_x=*/false, in, out,
                                            slots, out + 8, /*scatter_y=*/true, y_shared, scratch, d.error));
  HARNESS_CHECK_OK(cu::Synchronize());
  const int32_t error = dev.Download(d.error, 1)[0];
  if (twice) {  // the outputs of the pairs past the tile are unwritten: only the flag is checked
    r.mismatched += error != 2;
    r.note = absl::StrCat("error word ", error, " (want 2)");
    return r;
  }
  r.mismatched += error != 0;
  const std::vector<uint16_t> gu = dev.Download(y_gu, static_cast<size_t>(pairs * ldy));
  const std::vector<uint16_t> sl = dev.Download(slots, static_cast<size_t>(R * K * (out + 8)));
  const std::vector<uint16_t> sh = dev.Download(y_shared, static_cast<size_t>(R * (out + 8)));
  if (!r.error.empty()) return r;
  // cpu::LinearW8A8 of row t of (q, sc) (scale stride `stride`) and weights i.
  auto ref = [&](const std::vector<uint8_t>& q, const std::vector<float>& sc, int64_t stride, int64_t t, size_t i) {
    std::vector<float> s1(static_cast<size_t>(groups)), y(static_cast<size_t>(out));
    for (int64_t c = 0; c < groups; ++c) s1[c] = sc[c * stride + t];
    cpu::LinearW8A8(q.data() + t * in, s1.data(), 1, in, wq[i].data(), ws[i].data(), out, y.data());
    return y;
  };
  std::vector<float> got, want;
  auto take = [&](const uint16_t* row, const std::vector<float>& y) {
    for (int64_t o = 0; o < out; ++o) got.push_back(Bf16ToF32(row[o]));
    want.insert(want.end(), y.begin(), y.end());
  };
  std::vector<bool> slot_named(static_cast<size_t>(R * K), false);
  for (int64_t j = 0; j < pairs; ++j) {
    const size_t e = static_cast<size_t>(expert_of[j]);
    for (int k = 0; k < 2; ++k) take(gu.data() + j * ldy + k * out, ref(qa, sa, R, h.src_row[j], k * (E + 1) + e));
    for (int64_t o = 2 * out; o < ldy; ++o) r.mismatched += gu[j * ldy + o] != 0xffff;
    const uint16_t* row = h.order[j] >= 0 ? sl.data() + h.order[j] * (out + 8) : sh.data() + h.src_row[j] * (out + 8);
    if (h.order[j] >= 0) slot_named[h.order[j]] = true;
    take(row, ref(qp, sp, pairs, j, e));
    for (int64_t o = out; o < out + 8; ++o) r.mismatched += row[o] != 0xffff;
  }
  for (size_t i = 0; i < slot_named.size(); ++i) {
    if (!slot_named[i]) r.mismatched += sl[i * (out + 8)] != 0xffff;
  }
  r.rel_err = RelErr(got, want, &r.unwritten);
  return r;
}

// GroupedLinearW8A8 against cpu::LinearW8A8 over the same quantized x (cpu::QuantizeActFp8 of a
// shared buffer, each problem a slice of its rows) and packed weights; PackFp8W8A8 exactly; the
// last row of the largest problem alone gives its bits.
Result GroupedW8A8Case(std::mt19937& rng, const Fp8Shape& s) {
  Result r;
  r.tolerance = 1e-2;
  if (!Fp8Runs("GroupedLinearW8A8", &r)) return r;
  Device dev(&r.error);
  const size_t n = s.rows.size();
  int64_t total = 0;
  for (int64_t rows : s.rows) total += rows;
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  RandomBf16(static_cast<size_t>(std::max<int64_t>(total, 1) * s.in), 1.0f, 0.0f, rng, &xb, &xf);
  const int64_t groups = (s.in + 127) / 128, stride = std::max<int64_t>(total, 1);
  std::vector<uint8_t> qx(static_cast<size_t>(stride * s.in));
  std::vector<float> sx(static_cast<size_t>(groups * stride));
  cpu::QuantizeActFp8(xf.data(), total, s.in, qx.data(), sx.data(), stride);
  const uint8_t* d_qx = dev.Upload(qx);
  const float* d_sx = dev.Upload(sx);
  std::vector<cu::LinearGroupW8A8> g(n);
  std::vector<std::vector<uint8_t>> wq(n);
  std::vector<std::vector<float>> ws(n);
  const size_t packed_bytes = static_cast<size_t>(cu::Fp8W8A8PackedBytes(s.out, s.in));
  const int64_t ldy = s.out + 8;  // y rows 8 columns wider than `out`: those must stay poisoned
  // Even problems scatter their rows into one shared matrix through a row map (a permutation of
  // all rows: row t of a problem starting at j0 lands on row perm[j0 + t]); odd ones store
  // contiguously into their own.
  std::vector<int32_t> perm(static_cast<size_t>(std::max<int64_t>(total, 1)));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  const int32_t* d_perm = dev.Upload(perm);
  uint16_t* y_all = dev.Poisoned<uint16_t>(perm.size() * static_cast<size_t>(ldy));
  int64_t j0 = 0;
  for (size_t p = 0; p < n; ++p) {
    std::vector<float> unused;
    RandomFp8(s.out, s.in, rng, &wq[p], &ws[p], &unused);
    uint8_t* packed = dev.Poisoned<uint8_t>(packed_bytes);
    const uint8_t* row_major = dev.Upload(wq[p]);
    if (!r.error.empty()) return r;
    HARNESS_CHECK_OK(cu::PackFp8W8A8(row_major, s.out, s.in, packed));
    CountDiffering(dev.Download(packed, packed_bytes), PackW8A8Host(wq[p], s.out, s.in),
                   "packed bytes differ from the host's packing", &r);
    const bool scatter = p % 2 == 0;
    g[p] = {d_qx + j0 * s.in, d_sx + j0, s.rows[p], packed, dev.Upload(ws[p]),
            scatter ? y_all : dev.Poisoned<uint16_t>(static_cast<size_t>(s.rows[p] * ldy)), scatter ? j0 : -1};
    j0 += s.rows[p];
  }
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::GroupedLinearW8A8(g.data(), static_cast<int64_t>(n), s.in, s.out, stride, ldy, d_perm));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got, want;
  std::vector<std::vector<uint16_t>> ys(n);
  const std::vector<uint16_t> all = dev.Download(y_all, perm.size() * static_cast<size_t>(ldy));
  std::vector<bool> mapped(perm.size(), false);
  j0 = 0;
  for (size_t p = 0; p < n; ++p) {
    const int64_t rows = s.rows[p];
    const bool scatter = g[p].y_row0 >= 0;
    const std::vector<uint16_t> own =
        scatter ? std::vector<uint16_t>() : dev.Download(g[p].y, static_cast<size_t>(rows * ldy));
    ys[p].resize(static_cast<size_t>(rows * s.out));
    for (int64_t t = 0; t < rows; ++t) {
      const uint16_t* row = scatter ? all.data() + perm[j0 + t] * ldy : own.data() + t * ldy;
      if (scatter) mapped[perm[j0 + t]] = true;
      std::copy_n(row, s.out, ys[p].begin() + t * s.out);
      for (int64_t o = s.out; o < ldy; ++o) r.mismatched += row[o] != 0xffff;
    }
    // The problem's own scales, stride = its rows (cpu::LinearW8A8's layout).
    std::vector<float> sxp(static_cast<size_t>(groups * std::max<int64_t>(rows, 1)));
    for (int64_t gi = 0; gi < groups; ++gi) {
      for (int64_t t = 0; t < rows; ++t) sxp[gi * rows + t] = sx[gi * stride + j0 + t];
    }
    std::vector<float> ref(static_cast<size_t>(rows * s.out));
    if (rows > 0) cpu::LinearW8A8(qx.data() + j0 * s.in, sxp.data(), rows, s.in, wq[p].data(), ws[p].data(), s.out,
                                  ref.data());
    const std::vector<float> y = ToF32(ys[p]);
    got.insert(got.end(), y.begin(), y.end());
    want.insert(want.end(), ref.begin(), ref.end());
    j0 += rows;
  }
  r.rel_err = RelErr(got, want, &r.unwritten);
  // Rows of the shared matrix that no mapped row names: untouched.
  for (size_t i = 0; i < mapped.size(); ++i) {
    if (mapped[i]) continue;
    for (int64_t o = 0; o < ldy; ++o) r.mismatched += all[i * ldy + o] != 0xffff;
  }
  CheckLastRowAlone(
      dev, s, g, ys,
      [&](cu::LinearGroupW8A8 one, int64_t row) {
        one.qx += row * s.in;
        one.sx += row;
        one.y_row0 = -1;
        return one;
      },
      [&](const cu::LinearGroupW8A8* one) { return cu::GroupedLinearW8A8(one, 1, s.in, s.out, stride, s.out); }, &r);
  return r;
}

}  // namespace

// The FP8 ops' argument checks and layout sizes: host-side, so they run without a device too.
int RunFp8HostChecks() {
  HostChecks checks;
  checks.Expect(cu::Fp8PackedBytes(200, 272) == 256 * 320, "Fp8PackedBytes(200, 272)");
  checks.Expect(cu::Fp8W8A8PackedBytes(200, 272) == 256 * 384, "Fp8W8A8PackedBytes(200, 272)");
  alignas(16) static uint16_t x[64];
  alignas(16) static uint8_t w[64];
  alignas(16) static float scale[4];
  alignas(16) static uint16_t y[64];
  cu::LinearGroupFp8 g{x, 1, w, scale, y};
  checks.Refused(cu::GroupedLinearFp8(&g, 1, 24, 8), "in 24", "GroupedLinearFp8 in % 16 != 0");
  checks.Refused(cu::GroupedLinearFp8(&g, 1, 16, 12), "out 12", "GroupedLinearFp8 out % 8 != 0");
  cu::LinearGroupFp8 bad = g;
  bad.y = y + 1;  // 2-byte aligned
  checks.Refused(cu::GroupedLinearFp8(&bad, 1, 16, 8), "problem 0", "GroupedLinearFp8 misaligned y");
  bad = g;
  bad.rows = -3;
  checks.Refused(cu::GroupedLinearFp8(&bad, 1, 16, 8), "-3 rows", "GroupedLinearFp8 negative rows");
  bad.rows = 0;
  checks.Expect(cu::GroupedLinearFp8(&bad, 1, 16, 8).ok(), "GroupedLinearFp8 with no rows does nothing");
  alignas(16) static uint8_t qx[64];
  cu::LinearGroupW8A8 q{qx, scale, 5, w, scale, y};
  checks.Refused(cu::GroupedLinearW8A8(&q, 1, 16, 8, 4, 8), "past the scale stride 4", "GroupedLinearW8A8 rows > stride");
  checks.Refused(cu::GroupedLinearW8A8(&q, 1, 16, 16, 8, 12), "a y row stride of 12 for 16 columns",
          "GroupedLinearW8A8 y stride < out");
  cu::LinearGroupW8A8 mapped = q;
  mapped.rows = 2;
  mapped.y_row0 = 3;
  checks.Refused(cu::GroupedLinearW8A8(&mapped, 1, 16, 8, 8, 8), "a row-map start of 3 but no row map",
          "GroupedLinearW8A8 row-map start without a map");
  mapped.y_row0 = -2;
  checks.Refused(cu::GroupedLinearW8A8(&mapped, 1, 16, 8, 8, 8), "a row-map start of -2",
          "GroupedLinearW8A8 row-map start below -1");
  checks.Refused(cu::QuantizeActFp8(x, 6, 32, qx, scale, 5), "scale stride of 5", "QuantizeActFp8 stride < rows");
  checks.Refused(cu::PackFp8(w, 0, 16, qx), "0 x 16", "PackFp8 of no rows");
  checks.Refused(cu::PackFp8W8A8(w, 8, 0, qx), "8 x 0", "PackFp8W8A8 of no columns");
  {  // GroupedLinearW8A8Moe's checks run before anything reads the (host) tables or pairs
    static const uint8_t* const packed_t[2] = {w, w};
    static const float* const scale_t[2] = {scale, scale};
    const cu::W8A8ExpertTable t[3] = {{packed_t, scale_t}, {packed_t, scale_t}, {packed_t, scale_t}};
    alignas(16) static uint8_t scratch[64];
    const cu::MoePairs none;
    auto moe = [&](int parts, int64_t rows, int64_t in, int64_t out, int64_t ys) {
      return cu::GroupedLinearW8A8Moe(t, parts, none, rows, 1, qx, scale, 4, true, in, out, y, ys, false, nullptr,
                                      scratch, nullptr);
    };
    checks.Refused(moe(3, 4, 16, 8, 16), "3 parts", "GroupedLinearW8A8Moe three parts");
    checks.Refused(moe(1, 129, 16, 8, 8), "129 rows a group", "GroupedLinearW8A8Moe groups past 128 rows");
    checks.Refused(moe(2, 4, 24, 8, 16), "in 24", "GroupedLinearW8A8Moe in % 16 != 0");
    checks.Refused(moe(2, 4, 16, 8, 8), "a y row stride of 8 for 2 x 8", "GroupedLinearW8A8Moe y stride < parts x out");
    checks.Refused(cu::GroupedLinearW8A8Moe(t, 1, none, 4, 1, qx, scale, 4, false, 16, 8, y, 8, true, nullptr, scratch,
                                     nullptr),
            "y_shared (with scatter_y)", "GroupedLinearW8A8Moe scattered without y_shared");
  }
  return checks.Finish("fp8");
}

void AddFp8Cases(std::vector<Case>* cases) {
  // The W8A8 decode dispatch: batch 1 and 8 at GLM-5.3-Flash's gate width with the shared expert,
  // batch 64 over few experts (groups up to 64 pairs, the widest launch), in / out past the blocks.
  for (const MoeShape& s : {MoeShape{1, 8, 288, 4096, 256, true, false}, MoeShape{8, 8, 288, 512, 2048, true, false},
                            MoeShape{64, 4, 12, 256, 136, false, false}, MoeShape{5, 2, 7, 272, 200, true, false}}) {
    cases->push_back({absl::StrCat("grouped_linear_w8a8_moe rows=", s.rows, " k=", s.top_k, " experts=", s.n_experts,
                                   " in=", s.in, " out=", s.out, s.shared ? " shared" : ""),
                      [s](std::mt19937& rng) { return W8A8MoeCase(rng, s); }});
  }
  cases->push_back({"grouped_linear_w8a8_moe rows=1 k=17 experts=20 one expert 17 times (flagged)",
                    [](std::mt19937& rng) {
                      return W8A8MoeCase(rng, MoeShape{1, 17, 20, 256, 64, false, false}, /*twice=*/true);
                    }});
  std::vector<Fp8Shape> fp8 = {
      {2048, 1024, {70, 0, 1, 130, 17, 64}},  // ragged experts: empty, one row, two row tiles
      {272, 200, {5, 128, 129}},              // in and out past the blocks (in % 64 = 16, out % 128 = 72)
      {16, 8, {3}},                           // the smallest widths
      {6144, 4096, {84, 23}},                 // GLM-5.2 gate_up
      {256, 64, {}},                          // 700 problems of 0-3 rows (175 empty, 525 with rows):
                                              // three launches of W8A16 (256 a launch), one of W8A8
      {256, 64, {}},                          // 700 problems of 1-3 rows: two launches of W8A8 (580)
      {256, 64, {600}},                       // one of 600 rows among 20 of 40: tiles of 128 rows,
                                              // the 40-row problems at width 64
  };
  for (int i = 0; i < 700; ++i) fp8[4].rows.push_back(i % 4);
  for (int i = 0; i < 700; ++i) fp8[5].rows.push_back(1 + i % 3);
  for (int i = 0; i < 20; ++i) fp8[6].rows.push_back(40);
  for (const Fp8Shape& s : fp8) {
    cases->push_back({absl::StrCat("grouped_linear_fp8 in=", s.in, " out=", s.out, " problems=", s.rows.size()),
                      [s](std::mt19937& rng) { return GroupedFp8Case(rng, s); }});
    cases->push_back({absl::StrCat("grouped_linear_w8a8 in=", s.in, " out=", s.out, " problems=", s.rows.size()),
                      [s](std::mt19937& rng) { return GroupedW8A8Case(rng, s); }});
  }
}

}  // namespace ferry::harness
