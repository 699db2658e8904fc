// ferry-kernel-check cases for the NVFP4 products (kernels/cuda/gemv_nvfp4.h): PackNvfp4 byte for
// byte against cpu::PackNvfp4; GemvNvfp4 and MoeGemvNvfp4 against cpu::LinearNvfp4, by norm and
// element by element, and bit for bit against the same row run alone (batch invariance);
// DequantizeNvfp4 bit for bit against the host decode, LinearNvfp4's many-row form as GemvNvfp4;
// RoundActivationsW4A4 bit for bit against the W4A4 quantizer's twin; the ops' host-side argument
// checks.
//
// Tolerance: the device and the twin multiply the same exact weights (the decode is exact:
// tests/kernels/nvfp4_test.cc holds the layout to common/nvfp4 without a device) by the same bf16
// x, so they differ only by float32 summation order (the tensor cores' and the global scale applied
// to the sum instead of to each weight) and the device's one bf16 rounding of y. Element by
// element: |y - ref| <= 2^-8 |ref| (bf16 rounding: half an ulp is at most 2^-8 relative; the
// summation difference may cross a rounding boundary) + 2^-13 sum |w x| (far above float32's
// order differences over up to 384 mma accumulations, far below one misplaced weight's share,
// about sum |w x| / in). By norm: rel_err <= 4e-3 (bf16 rounding alone gives about 1.5e-3).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/nvfp4.h"
#include "kernels/cpu/nvfp4.h"
#include "kernels/cpu/nvfp4_w4a4.h"
#include "kernels/cuda/gemv_nvfp4.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/options.h"
#include "kernels/nvfp4_layout.h"
#include "kernels/nvfp4_mma_layout.h"
#include "tests/kernels/harness.h"
#include "tests/kernels/harness_moe.h"
#include "tests/kernels/nvfp4_random.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

constexpr double kRelTolerance = 4e-3;

// A weight [out, in] in ModelOpt's layout, its host packing and the float32 decode of its rows.
struct Weight {
  testing::RandomNvfp4 q;
  std::vector<uint8_t> packed;
  std::vector<float> decoded;  // [out, in]
};

// Random codes and scales (negative ones when asked), or (`realistic`) ModelOpt's quantization of
// Gaussian weights (std 0.02, a few outliers) through common/nvfp4.
Weight MakeWeight(int64_t out, int64_t in, std::mt19937& rng, bool realistic, bool negative_scales = false) {
  Weight w;
  if (realistic) {
    std::vector<float> f = RandomF32(static_cast<size_t>(out * in), 0.02f, 0.0f, rng);
    for (size_t i = 0; i < f.size(); i += 997) f[i] *= 20.0f;
    Nvfp4Weight n = QuantizeNvfp4(f, out, in);
    w.q.codes = std::move(n.packed);
    w.q.scales = std::move(n.scales);
    w.q.global_scale = n.global_scale;
  } else {
    w.q = testing::MakeRandomNvfp4(out, in, rng, negative_scales);
  }
  w.packed.assign(static_cast<size_t>(cu::Nvfp4PackedBytes(out, in)), 0);
  cpu::PackNvfp4(w.q.codes.data(), w.q.scales.data(), w.q.global_scale, out, in, w.packed.data(), out, 0);
  w.decoded.resize(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o) {
    DequantNvfp4Row(w.q.codes.data(), w.q.scales.data(), w.q.global_scale, in, o, 0, in, w.decoded.data() + o * in);
  }
  return w;
}

// cpu::LinearNvfp4 of one x row into *want and sum |w x| of each output into *mag.
void Reference(const Weight& w, const float* x, int64_t in, int64_t out, float* want, double* mag) {
  cpu::LinearNvfp4(x, 1, in, w.q.codes.data(), w.q.scales.data(), w.q.global_scale, out, want);
  for (int64_t o = 0; o < out; ++o) {
    double m = 0;
    for (int64_t i = 0; i < in; ++i) m += std::fabs(double(w.decoded[o * in + i]) * x[i]);
    mag[o] = m;
  }
}

// Counts outputs outside the element-wise bound above into r (noting the first).
void CheckElements(const std::vector<uint16_t>& got, const std::vector<float>& want, const std::vector<double>& mag,
                   Result* r) {
  long off = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = Bf16ToF32(got[i]), bound = std::ldexp(std::fabs(want[i]), -8) + std::ldexp(mag[i], -13);
    if (!(std::fabs(g - want[i]) <= bound) && !std::isnan(g)) {
      if (off++ == 0) r->note += absl::StrCat(" output ", i, ": ", g, " want ", want[i], " (bound ", bound, ")");
    }
  }
  r->mismatched += off;
}

// A weight [out, in] as the loaders pack an MLP's (when `stacked`, two weights with their own
// global scales, the first out / 2 rows rounded up to whole 16-row tiles, as the packing asks of
// every part but the last) and the twin's products with it.
struct Stacked {
  std::vector<Weight> parts;
  int64_t first = 0;  // rows of the first part
  std::vector<uint8_t> packed;  // the host packing of the whole matrix
};
Stacked MakeStacked(std::mt19937& rng, int64_t in, int64_t out, bool realistic, bool stacked) {
  Stacked m;
  m.first = stacked ? (out / 2 + 15) / 16 * 16 : out;
  m.parts.push_back(MakeWeight(m.first, in, rng, realistic, /*negative_scales=*/!realistic));
  if (stacked) m.parts.push_back(MakeWeight(out - m.first, in, rng, realistic));
  m.packed.assign(static_cast<size_t>(cu::Nvfp4PackedBytes(out, in)), 0);
  int64_t row0 = 0;
  for (const Weight& w : m.parts) {
    const int64_t n = static_cast<int64_t>(w.decoded.size()) / in;
    cpu::PackNvfp4(w.q.codes.data(), w.q.scales.data(), w.q.global_scale, n, in, m.packed.data(), out, row0);
    row0 += n;
  }
  return m;
}
// The twin's y [rows, out] for x [rows, in] and each output's sum |w x|.
void StackedReference(const Stacked& m, const std::vector<float>& x, int64_t rows, int64_t in, int64_t out,
                      std::vector<float>* want, std::vector<double>* mag) {
  want->assign(static_cast<size_t>(rows * out), 0.0f);
  mag->assign(want->size(), 0.0);
  int64_t row0 = 0;
  for (const Weight& w : m.parts) {
    const int64_t n = static_cast<int64_t>(w.decoded.size()) / in;
    std::vector<float> part(static_cast<size_t>(n));
    std::vector<double> part_mag(part.size());
    for (int64_t t = 0; t < rows; ++t) {
      Reference(w, x.data() + t * in, in, n, part.data(), part_mag.data());
      std::copy(part.begin(), part.end(), want->begin() + t * out + row0);
      std::copy(part_mag.begin(), part_mag.end(), mag->begin() + t * out + row0);
    }
    row0 += n;
  }
}

// A device product y [rows, out] of x against the twin's: by norm and element by element.
void CheckProduct(const Stacked& m, const std::vector<float>& x, int64_t rows, int64_t in, int64_t out,
                  const std::vector<uint16_t>& got, Result* r) {
  std::vector<float> want;
  std::vector<double> mag;
  StackedReference(m, x, rows, in, out, &want, &mag);
  r->rel_err = RelErr(ToF32(got), want, &r->unwritten);
  CheckElements(got, want, mag, r);
}

// rows x [rows, in] times a stacked or single weight [out, in]: the device packing exactly,
// GemvNvfp4 against the twin, and the last row alone.
Result GemvCase(std::mt19937& rng, int64_t rows, int64_t in, int64_t out, bool realistic, bool stacked) {
  Result r;
  r.tolerance = kRelTolerance;
  Device dev(&r.error);
  const Stacked m = MakeStacked(rng, in, out, realistic, stacked);
  // The device's packing of the whole matrix, each part at its rows.
  const size_t bytes = m.packed.size();
  uint8_t* packed = dev.Poisoned<uint8_t>(bytes);
  int64_t row0 = 0;
  for (const Weight& w : m.parts) {
    const int64_t n = static_cast<int64_t>(w.q.scales.size()) / (in / 16);
    const uint8_t* d_codes = dev.Upload(w.q.codes);
    const uint8_t* d_scales = dev.Upload(w.q.scales);
    if (!r.error.empty()) return r;
    HARNESS_CHECK_OK(cu::PackNvfp4(d_codes, d_scales, w.q.global_scale, n, in, packed, out, row0));
    row0 += n;
  }
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  RandomBf16(static_cast<size_t>(rows * in), 1.0f, 0.0f, rng, &xb, &xf);
  const uint16_t* d_x = dev.Upload(xb);
  uint16_t* y = dev.Poisoned<uint16_t>(static_cast<size_t>(rows * out));
  uint16_t* y1 = dev.Poisoned<uint16_t>(static_cast<size_t>(out));
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::GemvNvfp4(d_x, rows, in, packed, out, y));
  HARNESS_CHECK_OK(cu::GemvNvfp4(d_x + (rows - 1) * in, 1, in, packed, out, y1));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint8_t> got_packed = dev.Download(packed, bytes);
  const std::vector<uint16_t> got = dev.Download(y, static_cast<size_t>(rows * out));
  const std::vector<uint16_t> alone = dev.Download(y1, static_cast<size_t>(out));
  if (!r.error.empty()) return r;
  // The tiles and the global scales; the alignment bytes after them are no part of the layout.
  const size_t defined = static_cast<size_t>(kernels::nvfp4::RowScaleOffset(out, in) + 4 * kernels::nvfp4::RowTiles(out));
  long differ = 0;
  for (size_t i = 0; i < defined; ++i) differ += got_packed[i] != m.packed[i];
  if (differ > 0) r.note += absl::StrCat(" ", differ, " packed bytes differ from cpu::PackNvfp4's");
  r.mismatched += differ;
  CheckProduct(m, xf, rows, in, out, got, &r);
  long changed = 0;
  for (int64_t o = 0; o < out; ++o) changed += alone[o] != got[(rows - 1) * out + o];
  if (changed > 0) r.note += absl::StrCat(" ", changed, " outputs of the last row differ from it alone");
  r.mismatched += changed;
  return r;
}

// The many-row form: DequantizeNvfp4 of the whole matrix bit for bit against the host decode
// without the global scale, then LinearNvfp4 through dequantized tiles (the threshold set to
// `rows` for the case) in pieces of `scratch_tiles` row tiles (a piece may straddle no part: the
// first part's last piece is short), against the twin with GemvCase's bounds.
Result LinearCase(std::mt19937& rng, int64_t rows, int64_t in, int64_t out, int64_t scratch_tiles) {
  Result r;
  r.tolerance = kRelTolerance;
  Device dev(&r.error);
  const Stacked m = MakeStacked(rng, in, out, /*realistic=*/true, /*stacked=*/true);
  std::vector<uint16_t> want_w(static_cast<size_t>(out * in));
  int64_t row0 = 0;
  for (const Weight& w : m.parts) {
    const int64_t n = static_cast<int64_t>(w.decoded.size()) / in;
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t o = 0; o < n; ++o) {
      DequantNvfp4Row(w.q.codes.data(), w.q.scales.data(), 1.0f, in, o, 0, in, row.data());
      for (int64_t i = 0; i < in; ++i) want_w[static_cast<size_t>((row0 + o) * in + i)] = F32ToBf16(row[i]);
    }
    row0 += n;
  }
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  RandomBf16(static_cast<size_t>(rows * in), 1.0f, 0.0f, rng, &xb, &xf);
  const uint8_t* packed = dev.Upload(m.packed);
  const uint16_t* d_x = dev.Upload(xb);
  uint16_t* w = dev.Poisoned<uint16_t>(want_w.size());
  const int64_t scratch_bytes = scratch_tiles * 16 * in * 2;
  uint16_t* scratch = dev.Poisoned<uint16_t>(static_cast<size_t>(scratch_bytes / 2));
  uint16_t* y = dev.Poisoned<uint16_t>(static_cast<size_t>(rows * out));
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::DequantizeNvfp4(packed, out, in, 0, out, w));
  cu::KernelOptions o = cu::GetKernelOptions();
  const cu::KernelOptions before = o;
  o.nvfp4_gemm_min_rows = rows;
  cu::SetKernelOptions(o);
  const absl::Status st = cu::LinearNvfp4(d_x, rows, in, packed, out, m.first, scratch, scratch_bytes, y);
  cu::SetKernelOptions(before);
  HARNESS_CHECK_OK(st);
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint16_t> got_w = dev.Download(w, want_w.size());
  const std::vector<uint16_t> got = dev.Download(y, static_cast<size_t>(rows * out));
  if (!r.error.empty()) return r;
  long differ = 0;
  for (size_t i = 0; i < want_w.size(); ++i) differ += got_w[i] != want_w[i] && ((got_w[i] | want_w[i]) & 0x7fff) != 0;
  if (differ > 0) r.note += absl::StrCat(" ", differ, " dequantized weights differ from the host decode");
  r.mismatched += differ;
  CheckProduct(m, xf, rows, in, out, got, &r);
  return r;
}

// MoeGemvNvfp4 over a routing grouped by MoeGroupPairs (harness_moe.cc's shape of case): the list
// layout (gathered x) against the twin per pair, the scattered run equal to it bit for bit, the
// last row dispatched alone equal to its pairs' bits.
Result MoeCase(std::mt19937& rng, const MoeShape& s) {
  Result r;
  r.tolerance = kRelTolerance;
  Device dev(&r.error);
  const int64_t R = s.rows, K = s.top_k, E = s.n_experts, nw = E + (s.shared ? 1 : 0);
  std::vector<int32_t> ids(static_cast<size_t>(R * K));
  const int32_t pool = static_cast<int32_t>(std::min<int64_t>(E, std::max<int64_t>(K, 3 * K / 2)));
  for (int64_t row = 0; row < R; ++row) {  // K distinct experts a row from a small pool: repeats across rows
    std::vector<int32_t> cand(static_cast<size_t>(pool));
    for (int32_t i = 0; i < pool; ++i) cand[i] = static_cast<int32_t>((i * 7 + row % 3) % E);
    std::shuffle(cand.begin(), cand.end(), rng);
    std::sort(cand.begin(), cand.begin() + K);
    std::copy(cand.begin(), cand.begin() + K, ids.begin() + row * K);
  }
  if (s.bad_id) ids[ids.size() / 2] = static_cast<int32_t>(E);
  std::vector<Weight> w(static_cast<size_t>(nw));
  std::vector<const uint8_t*> table(static_cast<size_t>(nw), nullptr);
  for (int64_t e = 0; e < nw; ++e) {
    const bool named = e == E || std::find(ids.begin(), ids.end(), static_cast<int32_t>(e)) != ids.end();
    if (!named) continue;  // its table entry stays null: the kernel reads only its groups' experts
    w[e] = MakeWeight(s.out, s.in, rng, /*realistic=*/e % 3 == 0, /*negative_scales=*/e % 3 == 1);
    table[e] = dev.Upload(w[e].packed);
  }
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  RandomBf16(static_cast<size_t>(R * s.in), 1.0f, 0.0f, rng, &xb, &xf);
  const auto* d_table = reinterpret_cast<const uint8_t* const*>(dev.Upload(std::vector<uint64_t>(
      reinterpret_cast<const uint64_t*>(table.data()), reinterpret_cast<const uint64_t*>(table.data()) + nw)));
  const int32_t* d_ids = dev.Upload(ids);
  const uint16_t* d_x = dev.Upload(xb);
  const int64_t n_pairs = R * K + (s.shared ? R : 0);
  uint16_t* y_list = dev.Poisoned<uint16_t>(static_cast<size_t>(n_pairs * s.out));
  uint16_t* y_slots = dev.Poisoned<uint16_t>(static_cast<size_t>(R * K * s.out));
  uint16_t* y_shared = dev.Poisoned<uint16_t>(static_cast<size_t>(R * s.out));
  DevicePairs d = TakePairs(dev, s, R);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::MoeGroupPairs(d_ids, R, K, E, s.shared, d.p, d.error));
  // The list run takes wide passes where a group may hold more than 8 pairs, the scattered one
  // passes of 8 always: their bits must agree.
  HARNESS_CHECK_OK(
      cu::MoeGemvNvfp4(d_table, d.p, d.max_groups, R, d_x, true, s.in, s.out, y_list, false, y_shared));
  HARNESS_CHECK_OK(
      cu::MoeGemvNvfp4(d_table, d.p, d.max_groups, 1, d_x, true, s.in, s.out, y_slots, true, y_shared));
  HARNESS_CHECK_OK(cu::Synchronize());
  const HostPairs h = SortPairs(ids, s);
  const int64_t listed = static_cast<int64_t>(h.order.size());
  const std::vector<uint16_t> list = dev.Download(y_list, static_cast<size_t>(listed * s.out));
  const std::vector<uint16_t> slots = dev.Download(y_slots, static_cast<size_t>(R * K * s.out));
  const std::vector<uint16_t> shared = dev.Download(y_shared, static_cast<size_t>(R * s.out));
  r.mismatched += dev.Download(d.error, 1)[0] != (s.bad_id ? 1 : 0);
  if (!r.error.empty()) return r;
  std::vector<float> want(static_cast<size_t>(listed * s.out));
  std::vector<double> mag(want.size());
  long scatter_differs = 0;
  for (size_t g = 0; g < h.group_expert.size(); ++g) {
    for (int32_t j = h.group_start[g]; j < h.group_start[g] + h.group_count[g]; ++j) {
      Reference(w[h.group_expert[g]], xf.data() + h.src_row[j] * s.in, s.in, s.out, want.data() + j * s.out,
                mag.data() + j * s.out);
      const uint16_t* scattered = h.order[j] >= 0 ? slots.data() + h.order[j] * s.out
                                                   : shared.data() + h.src_row[j] * s.out;
      for (int64_t o = 0; o < s.out; ++o) scatter_differs += scattered[o] != list[j * s.out + o];
    }
  }
  if (scatter_differs > 0) r.note += absl::StrCat(" ", scatter_differs, " scattered outputs differ from the list's");
  r.mismatched += scatter_differs;
  r.rel_err = RelErr(ToF32(list), want, &r.unwritten);
  CheckElements(list, want, mag, &r);

  // Batch invariance: row R - 1 dispatched alone gives its pairs' bits.
  const std::vector<int32_t> one(ids.begin() + (R - 1) * K, ids.end());
  DevicePairs d1 = TakePairs(dev, s, 1);
  const int32_t* d_one = dev.Upload(one);
  uint16_t* y1 = dev.Poisoned<uint16_t>(static_cast<size_t>(K * s.out));
  uint16_t* y1_shared = dev.Poisoned<uint16_t>(static_cast<size_t>(s.out));
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::MoeGroupPairs(d_one, 1, K, E, s.shared, d1.p, d1.error));
  HARNESS_CHECK_OK(cu::MoeGemvNvfp4(d_table, d1.p, d1.max_groups, 1, d_x + (R - 1) * s.in, true, s.in, s.out, y1,
                                    true, y1_shared));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint16_t> a = dev.Download(y1, static_cast<size_t>(K * s.out));
  const std::vector<uint16_t> b = dev.Download(y1_shared, static_cast<size_t>(s.out));
  long differ = 0;
  for (int64_t k = 0; k < K; ++k) {
    if (one[k] < 0 || one[k] >= E) continue;  // the bad pair is written by neither
    for (int64_t o = 0; o < s.out; ++o) differ += a[k * s.out + o] != slots[((R - 1) * K + k) * s.out + o];
  }
  for (int64_t o = 0; s.shared && o < s.out; ++o) differ += b[o] != shared[(R - 1) * s.out + o];
  if (differ > 0) r.note += absl::StrCat(" ", differ, " outputs of the last row differ from it dispatched alone");
  r.mismatched += differ;
  return r;
}

}  // namespace

// RoundActivationsW4A4 against the CPU twin (cpu::QuantizeActivationsNvfp4, each code times its
// group's E4M3 scale, exact in bf16): bit for bit, into a new buffer and in place. `scale_of_amax`
// places the activation scale against the rows' largest magnitude (1: as calibration sets it;
// below 1 clips the largest groups at 448 scales, above it pushes small groups into subnormal
// scales).
Result RoundCase(std::mt19937& rng, int64_t rows, int64_t in, float scale_of_amax) {
  Result r;
  Device dev(&r.error);
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  RandomBf16(static_cast<size_t>(rows * in), 1.0f, 0.0f, rng, &xb, &xf);
  for (size_t i = 0; i < xb.size(); i += 53) {  // groups of many magnitudes
    xf[i] *= static_cast<float>(1 << (i % 11));
    xb[i] = F32ToBf16(xf[i]);
    xf[i] = Bf16ToF32(xb[i]);
  }
  if (in >= 32) {  // a group of zeros (scale 0) and one of bf16 subnormals (the bottom of E4M3)
    for (int64_t j = 0; j < 16; ++j) {
      xb[j] = F32ToBf16(j % 2 ? -0.0f : 0.0f);
      xb[16 + j] = F32ToBf16(std::ldexp(static_cast<float>(j - 8), -130));
      xf[j] = Bf16ToF32(xb[j]);
      xf[16 + j] = Bf16ToF32(xb[16 + j]);
    }
  }
  float amax = 0.0f;
  for (float v : xf) amax = std::max(amax, std::fabs(v));
  const float input_scale = Nvfp4GlobalScale(amax) * scale_of_amax;
  std::vector<uint8_t> codes(static_cast<size_t>(rows * in / 2)), scales(static_cast<size_t>(rows * in / 16));
  cpu::QuantizeActivationsNvfp4(xf.data(), rows, in, input_scale, codes.data(), scales.data(), in);
  std::vector<uint16_t> want(xb.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const int code = codes[i / 2] >> (4 * (i % 2)) & 0x0f;
    want[i] = F32ToBf16(static_cast<float>(kernels::w4a4::E2M1Twice(static_cast<uint8_t>(code))) * 0.5f *
                        F8E4M3ToF32(scales[i / 16]));
  }
  uint16_t* d_x = dev.Upload(xb);
  uint16_t* y = dev.Poisoned<uint16_t>(xb.size());
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::RoundActivationsW4A4(d_x, rows, in, input_scale, y));
  HARNESS_CHECK_OK(cu::RoundActivationsW4A4(d_x, rows, in, input_scale, d_x));  // in place
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint16_t> got = dev.Download(y, xb.size()), in_place = dev.Download(d_x, xb.size());
  if (!r.error.empty()) return r;
  long differ = 0, differ_in_place = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    differ += got[i] != want[i] && !(Bf16ToF32(got[i]) == 0.0f && Bf16ToF32(want[i]) == 0.0f);
    differ_in_place += in_place[i] != got[i];
  }
  if (differ > 0) r.note += absl::StrCat(" ", differ, " values differ from the twin's rounding");
  if (differ_in_place > 0) r.note += absl::StrCat(" ", differ_in_place, " differ rounded in place");
  r.mismatched = differ + differ_in_place;
  r.rel_err = RelErr(ToF32(got), ToF32(want), &r.unwritten);
  return r;
}

int RunNvfp4HostChecks() {
  HostChecks checks;
  // 7 row tiles x 2 column tiles of 2304 bytes, then 7 floats, rounded up to 16.
  checks.Expect(cu::Nvfp4PackedBytes(100, 272) == (7 * 2 * 2304 + 28 + 15) / 16 * 16, "Nvfp4PackedBytes(100, 272)");
  checks.Expect(cu::Nvfp4PackedBytes(4096, 4096) == 256 * 16 * 2304 + 1024, "Nvfp4PackedBytes(4096, 4096)");
  alignas(16) static uint8_t bytes[64];
  alignas(16) static uint16_t x[64], y[64];
  checks.Refused(cu::PackNvfp4(bytes, bytes, 1.0f, 8, 24, bytes, 8, 0), "8 x 24", "PackNvfp4 in % 16 != 0");
  checks.Refused(cu::PackNvfp4(bytes, bytes, 1.0f, 8, 16, bytes, 32, 8), "rows [8, 16) of 32 x 16",
          "PackNvfp4 row0 not a multiple of 16");
  checks.Refused(cu::PackNvfp4(bytes, bytes, 1.0f, 8, 16, bytes, 32, 0), "rows [0, 8) of 32",
          "PackNvfp4 a partial row tile short of out");
  checks.Refused(cu::PackNvfp4(bytes, bytes, 1.0f, 20, 16, bytes, 32, 16), "rows [16, 36) of 32", "PackNvfp4 past out");
  checks.Refused(cu::PackNvfp4(bytes, bytes, 1.0f, 16, 16, bytes + 1, 16, 0), "16-byte", "PackNvfp4 misaligned packed");
  checks.Refused(cu::GemvNvfp4(x, 0, 16, bytes, 8, y), "rows 0", "GemvNvfp4 no rows");
  checks.Refused(cu::GemvNvfp4(x, 2, 40, bytes, 8, y), "in 40", "GemvNvfp4 in % 16 != 0");
  checks.Refused(cu::GemvNvfp4(x, 2, 16, bytes, 0, y), "out 0", "GemvNvfp4 no outputs");
  checks.Refused(cu::GemvNvfp4(x + 1, 2, 16, bytes, 8, y), "16-byte", "GemvNvfp4 misaligned x");
  checks.Refused(cu::DequantizeNvfp4(bytes, 32, 16, 8, 8, y), "rows [8, 16) of 32", "DequantizeNvfp4 row0 off a tile");
  checks.Refused(cu::DequantizeNvfp4(bytes, 32, 16, 16, 20, y), "rows [16, 36) of 32", "DequantizeNvfp4 past out");
  checks.Refused(cu::LinearNvfp4(x, 2, 16, bytes, 64, 20, y, 64, y), "parts of 20 rows",
                 "LinearNvfp4 a part off the row tiles");
  static const float alpha = 1.0f;
  checks.Refused(cu::LinearBf16Scaled(x, 2, 16, x, 8, &alpha, y, 4), "y_row 4", "LinearBf16Scaled y_row < out");
  checks.Refused(cu::LinearBf16Scaled(x, 2, 16, x, 8, nullptr, y, 8), "null x, w, y or alpha",
                 "LinearBf16Scaled without alpha");
  checks.Expect(cu::Nvfp4GemmScratchBytes(100, 272) == 7 * 16 * 272 * 2, "Nvfp4GemmScratchBytes: the whole matrix");
  checks.Expect(cu::Nvfp4GemmScratchBytes(8192, 6144) == (16 << 20) / (16 * 6144 * 2) * 16 * 6144 * 2,
                "Nvfp4GemmScratchBytes: whole tiles within 16 MiB");
  checks.Expect(cu::Nvfp4GemmScratchBytes(64, 1 << 20) == 16 * (1 << 20) * 2, "Nvfp4GemmScratchBytes: one tile");
  const cu::MoePairs none;
  static const uint8_t* const table[1] = {bytes};
  checks.Refused(cu::MoeGemvNvfp4(table, none, 4, 1, x, true, 24, 8, y, false, nullptr), "in 24",
          "MoeGemvNvfp4 in % 16 != 0");
  checks.Refused(cu::MoeGemvNvfp4(table, none, 70000, 1, x, true, 16, 8, y, false, nullptr), "max_groups 70000",
          "MoeGemvNvfp4 too many groups");
  static int32_t groups_word = 0;
  cu::MoePairs some;
  some.n_groups = &groups_word;  // never read on the host
  checks.Refused(cu::MoeGemvNvfp4(table, some, 4, 1, x, true, 16, 8, y, true, nullptr), "y_shared",
          "MoeGemvNvfp4 scattered without y_shared");
  checks.Expect(cu::MoeGemvNvfp4(table, none, 0, 1, x, true, 16, 8, y, false, nullptr).ok(), "MoeGemvNvfp4 of no groups");
  checks.Refused(cu::RoundActivationsW4A4(x, 0, 16, 1.0f, y), "rows 0", "RoundActivationsW4A4 no rows");
  checks.Refused(cu::RoundActivationsW4A4(x, 2, 24, 1.0f, y), "in 24", "RoundActivationsW4A4 in % 16 != 0");
  checks.Refused(cu::RoundActivationsW4A4(x, 2, 16, 0.0f, y), "finite and > 0", "RoundActivationsW4A4 scale 0");
  checks.Refused(cu::RoundActivationsW4A4(x, 2, 16, NAN, y), "finite and > 0", "RoundActivationsW4A4 scale NaN");
  cu::Nvfp4GemvShape unbuilt;
  unbuilt.depth = 5;
  checks.Refused(cu::SetNvfp4GemvShape(unbuilt), "depth 5", "SetNvfp4GemvShape a form not built");
  cu::Nvfp4GemvShape no_warps;
  no_warps.moe_warp_target = 0;
  checks.Refused(cu::SetNvfp4GemvShape(no_warps), "targets >= 1", "SetNvfp4GemvShape a target of 0");
  checks.Expect(cu::Nvfp4GemvForms().size() >= 2 && cu::SetNvfp4GemvShape(cu::Nvfp4GemvForms()[0]).ok(),
                "SetNvfp4GemvShape the default form");
  return checks.Finish("nvfp4");
}

void AddNvfp4Cases(std::vector<Case>* cases) {
  struct GemvShape {
    int64_t rows, in, out;
    bool realistic, stacked;
    const char* what;
  };
  const GemvShape gemv[] = {
      {1, 4096, 4096, true, true, "GLM-5.3-Flash expert gate_up (gate and up stacked), batch 1"},
      {3, 2048, 4096, false, false, "GLM-5.3-Flash expert down, 3 rows"},
      {4, 6144, 4096, true, true, "GLM-5.2 expert gate_up, 4 rows"},
      {8, 2048, 6144, false, false, "GLM-5.2 expert down, a full pass of 8"},
      {13, 4096, 4100, false, false, "a wide pass, out past the row tiles"},
      {40, 2048, 512, false, false, "two wide passes, the second partial"},
      {7, 272, 33, false, false, "in past the column tiles, odd rows"},
      {2, 16, 1, false, false, "the smallest widths"},
  };
  for (const GemvShape& s : gemv) {
    cases->push_back({absl::StrCat("gemv_nvfp4 rows=", s.rows, " in=", s.in, " out=", s.out, " (", s.what, ")"),
                      [s](std::mt19937& rng) { return GemvCase(rng, s.rows, s.in, s.out, s.realistic, s.stacked); }});
  }
  struct LinearShape {
    int64_t rows, in, out, scratch_tiles;
    const char* what;
  };
  const LinearShape linear[] = {
      {300, 1024, 1040, 1000, "gate and up stacked, each part in one piece"},
      {257, 528, 200, 3, "pieces of 3 row tiles, the parts' last ones short"},
      {512, 2048, 88, 1, "one row tile a piece, the second part ending in a partial tile"},
  };
  for (const LinearShape& s : linear) {
    cases->push_back({absl::StrCat("linear_nvfp4 rows=", s.rows, " in=", s.in, " out=", s.out, " scratch ",
                                   s.scratch_tiles, " tiles (", s.what, ")"),
                      [s](std::mt19937& rng) { return LinearCase(rng, s.rows, s.in, s.out, s.scratch_tiles); }});
  }
  const MoeShape moe[] = {
      {1, 8, 288, 4096, 4096, true, false},  // GLM-5.3-Flash gate_up at batch 1, shared expert fused
      {8, 8, 288, 2048, 4096, true, false},  // GLM-5.3-Flash down at batch 8
      {1, 8, 256, 6144, 4096, true, false},  // GLM-5.2 gate_up at batch 1
      {4, 8, 256, 2048, 6144, true, false},  // GLM-5.2 down at batch 4
      {64, 8, 256, 512, 200, false, false},  // batch 64 over 12 experts: ~43 pairs a group (2 wide passes or 6)
      {5, 4, 16, 272, 33, true, true},       // an out-of-range id: flagged, left out; ragged in and out
      {3, 1, 1024, 16, 1, false, false},     // the smallest widths, most experts
  };
  for (const MoeShape& s : moe) {
    cases->push_back({absl::StrCat("moe_gemv_nvfp4 rows=", s.rows, " k=", s.top_k, " experts=", s.n_experts,
                                   " in=", s.in, " out=", s.out, s.shared ? " shared" : "", s.bad_id ? " bad-id" : ""),
                      [s](std::mt19937& rng) { return MoeCase(rng, s); }});
  }
  struct RoundShape {
    int64_t rows, in;
    float scale_of_amax;
  };
  for (const RoundShape& s : {RoundShape{1, 6144, 1.0f}, RoundShape{8, 2048, 1.0f}, RoundShape{5, 272, 0.25f},
                              RoundShape{3, 4096, 64.0f}}) {
    cases->push_back({absl::StrCat("round_activations_w4a4 rows=", s.rows, " in=", s.in, " scale x", s.scale_of_amax),
                      [s](std::mt19937& rng) { return RoundCase(rng, s.rows, s.in, s.scale_of_amax); }});
  }
  // Every other launch form the benchmarks may pick (depths, blocks an SM, both kernels' splits)
  // on decode-sized products: the same contract, the same checks.
  const std::vector<cu::Nvfp4GemvShape> forms = cu::Nvfp4GemvForms();
  for (size_t i = 1; i < forms.size(); ++i) {
    cu::Nvfp4GemvShape f = forms[i];
    f.gemv_warp_target = f.moe_warp_target = 1 << (3 + 2 * i);  // 32, 128, 512: other splits too
    const std::string form = absl::StrCat(" form ", f.depth, ":", f.min_blocks, " target ", f.moe_warp_target);
    auto shaped = [f](const std::function<Result()>& run) -> Result {
      Result r;
      if (const absl::Status set = cu::SetNvfp4GemvShape(f); !set.ok()) {
        r.error = std::string(set.message());
        return r;
      }
      r = run();
      if (const absl::Status back = cu::SetNvfp4GemvShape(cu::Nvfp4GemvShape{}); !back.ok()) {
        r.error = std::string(back.message());
      }
      return r;
    };
    cases->push_back({absl::StrCat("gemv_nvfp4 rows=3 in=2048 out=1040", form), [shaped](std::mt19937& rng) {
                        return shaped([&] { return GemvCase(rng, 3, 2048, 1040, true, true); });
                      }});
    const MoeShape m{8, 8, 64, 1024, 512, true, true};
    cases->push_back({absl::StrCat("moe_gemv_nvfp4 rows=8 k=8 experts=64 in=1024 out=512 shared bad-id", form),
                      [shaped, m](std::mt19937& rng) { return shaped([&] { return MoeCase(rng, m); }); }});
  }
}

}  // namespace ferry::harness
