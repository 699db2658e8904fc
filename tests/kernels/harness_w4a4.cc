// ferry-kernel-check cases for the GB10's W4A4 NVFP4 decode product (kernels/cuda/
// gemv_w4a4_sm121.h), built only when FERRY_CUDA_ARCHS holds 121a (tests/CMakeLists.txt):
// QuantizeActivationsW4A4 byte for byte against cpu::QuantizeActivationsNvfp4, and GemvW4A4 over
// weights packed by cpu::PackW4A4 against cpu::LinearW4A4Quantized of the device's own
// activations, element by element and by norm. Without a GB10 the host form in
// tests/kernels/nvfp4_mma_test.cc checks the same kernel's lane assembly through an emulator.
//
// Tolerance: the twin sums exact 16-value group terms in float32 in K order, as the host emulator
// does; the tensor cores' internal rounding of those additions is not documented and not yet
// measured, so element by element |y - ref| <= 2^-8 |ref| (the one bf16 rounding) + 2^-13 sum of
// |terms| (as gemv_nvfp4's bound: far above float32 order effects, far below one misplaced
// group's share). By norm: rel_err <= 4e-3. The note counts outputs equal to bf16(ref), which
// tells whether the hardware sums as the twin does.
#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "kernels/cpu/nvfp4_w4a4.h"
#include "kernels/cuda/gemv_w4a4_sm121.h"
#include "kernels/nvfp4_mma_layout.h"
#include "tests/kernels/harness.h"
#include "tests/kernels/nvfp4_random.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;
namespace l = kernels::w4a4;

Result W4A4Case(std::mt19937& rng, int64_t rows, int64_t in, int64_t out) {
  Result r;
  r.tolerance = 4e-3;
  Device dev(&r.error);
  const testing::RandomNvfp4 w = testing::MakeRandomNvfp4(out, in, rng, /*negative_scales=*/true);
  std::vector<uint8_t> packed(static_cast<size_t>(l::PackedBytes(out, in)), 0);
  cpu::PackW4A4(w.codes.data(), w.scales.data(), w.global_scale, out, in, packed.data(), out, 0);
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  RandomBf16(static_cast<size_t>(rows * in), 1.0f, 0.0f, rng, &xb, &xf);
  float amax = 0;
  for (float v : xf) amax = std::max(amax, std::fabs(v));
  const float input_scale = amax / (6.0f * 448.0f) * 0.8f;  // the largest groups saturate
  const int64_t stride = l::PaddedCols(in);
  const size_t n_codes = static_cast<size_t>(rows * stride / 2), n_scales = static_cast<size_t>(rows * stride / 16);
  const uint16_t* d_x = dev.Upload(xb);
  const uint8_t* d_packed = dev.Upload(packed);
  uint8_t* codes = dev.Poisoned<uint8_t>(n_codes);
  uint8_t* scales = dev.Poisoned<uint8_t>(n_scales);
  uint16_t* y = dev.Poisoned<uint16_t>(static_cast<size_t>(rows * out));
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::QuantizeActivationsW4A4(d_x, rows, in, input_scale, codes, scales));
  HARNESS_CHECK_OK(cu::GemvW4A4(codes, scales, rows, in, d_packed, out, input_scale, y));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint8_t> got_codes = dev.Download(codes, n_codes), got_scales = dev.Download(scales, n_scales);
  const std::vector<uint16_t> got = dev.Download(y, static_cast<size_t>(rows * out));
  if (!r.error.empty()) return r;
  std::vector<uint8_t> want_codes(n_codes), want_scales(n_scales);
  cpu::QuantizeActivationsNvfp4(xf.data(), rows, in, input_scale, want_codes.data(), want_scales.data(), stride);
  long differ = 0;
  for (size_t i = 0; i < n_codes; ++i) differ += got_codes[i] != want_codes[i];
  for (size_t i = 0; i < n_scales; ++i) differ += got_scales[i] != want_scales[i];
  if (differ > 0) r.note += absl::StrCat(" ", differ, " quantized bytes differ from the twin's");
  r.mismatched += differ;
  // The twin over the device's activations (so a quantizer difference is not counted twice).
  std::vector<float> want(static_cast<size_t>(rows * out));
  cpu::LinearW4A4Quantized(got_codes.data(), got_scales.data(), stride, rows, in, input_scale, w.codes.data(),
                           w.scales.data(), w.global_scale, out, want.data());
  r.rel_err = RelErr(ToF32(got), want, &r.unwritten);
  long off = 0, exact = 0;
  const float alpha = input_scale * w.global_scale;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double mag = 0;
      for (int64_t c0 = 0; c0 < in; c0 += 16) {
        mag += std::fabs(cpu::GroupTerm(got_codes.data() + t * stride / 2 + c0 / 2, got_scales[t * stride / 16 + c0 / 16],
                                        w.codes.data() + o * in / 2 + c0 / 2, w.scales[o * in / 16 + c0 / 16]));
      }
      const size_t i = static_cast<size_t>(t * out + o);
      const double g = Bf16ToF32(got[i]), bound = std::ldexp(std::fabs(want[i]), -8) + std::ldexp(mag * alpha, -13);
      exact += got[i] == F32ToBf16(want[i]);
      if (!(std::fabs(g - want[i]) <= bound) && !std::isnan(g) && off++ == 0) {
        r.note += absl::StrCat(" output ", i, ": ", g, " want ", want[i], " (bound ", bound, ")");
      }
    }
  }
  r.mismatched += off;
  r.note += absl::StrCat(" ", exact, " of ", want.size(), " outputs equal bf16(twin)");
  return r;
}

}  // namespace

void AddW4A4Cases(std::vector<Case>* cases) {
  struct Shape {
    int64_t rows, in, out;
    const char* what;
  };
  const Shape shapes[] = {
      {1, 4096, 4096, "GLM-5.3-Flash expert gate_up width, batch 1"},
      {8, 2048, 4096, "a full pass of 8"},
      {5, 272, 33, "in past the column tiles, out past the row tiles"},
      {2, 16, 1, "the smallest widths"},
  };
  for (const Shape& s : shapes) {
    cases->push_back({absl::StrCat("gemv_w4a4_sm121 rows=", s.rows, " in=", s.in, " out=", s.out, " (", s.what, ")"),
                      [s](std::mt19937& rng) { return W4A4Case(rng, s.rows, s.in, s.out); }});
  }
}

}  // namespace ferry::harness
