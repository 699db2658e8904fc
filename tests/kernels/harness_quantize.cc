// ferry-kernel-check cases for the W8A8 activation quantization: QuantizeActFp8 (and its gathered
// form) against cpu::QuantizeActFp8, every byte and scale exactly, and SwiGluQuantizeActFp8
// against SwiGluBf16 + QuantizeActFp8 on the device (exactly) and the CPU twins.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/ops.h"
#include "tests/kernels/harness.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

// QuantizeActFp8 against cpu::QuantizeActFp8, every byte and scale exactly; a group of zeros and
// groups of very different sizes included.
Result QuantizeActCase(std::mt19937& rng, int64_t rows, int64_t in, bool gather) {
  Result r;
  Device dev(&r.error);
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  RandomBf16(static_cast<size_t>(rows * in), 1.0f, 0.0f, rng, &xb, &xf);
  for (int64_t row = 0; row < rows; ++row) {  // rows of different magnitudes
    const float m = std::ldexp(1.0f, static_cast<int>(row % 7) * 3 - 9);
    for (int64_t c = 0; c < in; ++c) xb[row * in + c] = F32ToBf16(xf[row * in + c] * m);
  }
  for (int64_t c = 0; c < std::min<int64_t>(in, 128); ++c) xb[c] = 0;  // row 0's first group: zeros
  xf = ToF32(xb);
  const int64_t groups = (in + 127) / 128, stride = rows + 3;
  // Gathered: row i quantizes x's row (3 i + 1) % rows (repeats, any order).
  std::vector<int32_t> src(static_cast<size_t>(rows));
  std::vector<float> xg = xf;
  for (int64_t i = 0; i < rows; ++i) {
    src[i] = static_cast<int32_t>(gather ? (3 * i + 1) % rows : i);
    std::copy_n(xf.begin() + src[i] * in, in, xg.begin() + i * in);
  }
  std::vector<uint8_t> want_q(static_cast<size_t>(rows * in));
  std::vector<float> want_s(static_cast<size_t>(groups * stride), 0.0f);
  cpu::QuantizeActFp8(xg.data(), rows, in, want_q.data(), want_s.data(), stride);
  const uint16_t* d_x = dev.Upload(xb);
  const int32_t* d_src = dev.Upload(src);
  uint8_t* d_q = dev.Poisoned<uint8_t>(want_q.size());
  float* d_s = dev.Upload(std::vector<float>(want_s.size(), 0.0f));
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(gather ? cu::QuantizeActFp8Rows(d_x, d_src, rows, in, d_q, d_s, stride)
                          : cu::QuantizeActFp8(d_x, rows, in, d_q, d_s, stride));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint8_t> q = dev.Download(d_q, want_q.size());
  const std::vector<float> sc = dev.Download(d_s, want_s.size());
  for (size_t i = 0; i < q.size(); ++i) r.mismatched += q[i] != want_q[i];
  for (size_t i = 0; i < sc.size(); ++i) r.mismatched += sc[i] != want_s[i];
  if (!gather && want_s[0] != 0.0f) r.note = "the zero group's scale is not 0";
  return r;
}

// SwiGluQuantizeActFp8 over a fused gate_up [rows, 2 cols]: its bytes and scales must equal
// SwiGluBf16 then QuantizeActFp8 on the device (mismatched counts any difference), and its
// dequantized values the CPU twins' (cpu::SwiGlu rounded to bf16, cpu::QuantizeActFp8; rel_err:
// only expf against std::exp may move a value across a rounding boundary).
Result SwiGluQuantizeCase(std::mt19937& rng, int64_t rows, int64_t cols, float limit) {
  Result r;
  r.tolerance = 1e-2;
  const int64_t stride = 2 * cols, groups = (cols + 127) / 128, sstride = rows + 2;
  std::vector<uint16_t> gub;
  std::vector<float> guf;
  RandomBf16(static_cast<size_t>(rows * stride), 6.0f, 0.0f, rng, &gub, &guf);
  std::vector<float> want(static_cast<size_t>(rows * cols));
  for (int64_t t = 0; t < rows; ++t) {
    cpu::SwiGlu(guf.data() + t * stride, guf.data() + t * stride + cols, cols, limit, want.data() + t * cols);
  }
  for (float& v : want) v = Bf16ToF32(F32ToBf16(v));
  {
    std::vector<uint8_t> wq(want.size());
    std::vector<float> ws(static_cast<size_t>(groups * sstride));
    cpu::QuantizeActFp8(want.data(), rows, cols, wq.data(), ws.data(), sstride);
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t c = 0; c < cols; ++c) {
        want[t * cols + c] = F8E4M3ToF32(wq[t * cols + c]) * ws[(c / 128) * sstride + t];
      }
    }
  }
  Device dev(&r.error);
  const uint16_t* d_gu = dev.Upload(gub);
  uint16_t* d_h = dev.Poisoned<uint16_t>(static_cast<size_t>(rows * cols));
  uint8_t* d_q1 = dev.Poisoned<uint8_t>(static_cast<size_t>(rows * cols));
  uint8_t* d_q2 = dev.Poisoned<uint8_t>(static_cast<size_t>(rows * cols));
  float* d_s1 = dev.Upload(std::vector<float>(static_cast<size_t>(groups * sstride), -1.0f));
  float* d_s2 = dev.Upload(std::vector<float>(static_cast<size_t>(groups * sstride), -1.0f));
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::SwiGluBf16(d_gu, d_gu + cols, rows, cols, stride, limit, d_h));
  HARNESS_CHECK_OK(cu::QuantizeActFp8(d_h, rows, cols, d_q1, d_s1, sstride));
  HARNESS_CHECK_OK(cu::SwiGluQuantizeActFp8(d_gu, d_gu + cols, rows, cols, stride, limit, d_q2, d_s2, sstride));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint8_t> q1 = dev.Download(d_q1, rows * cols), q2 = dev.Download(d_q2, rows * cols);
  const std::vector<float> s1 = dev.Download(d_s1, groups * sstride), s2 = dev.Download(d_s2, groups * sstride);
  if (!r.error.empty()) return r;
  for (size_t i = 0; i < q1.size(); ++i) r.mismatched += q1[i] != q2[i];
  for (size_t i = 0; i < s1.size(); ++i) r.mismatched += std::memcmp(&s1[i], &s2[i], sizeof(float)) != 0;
  std::vector<float> got(want.size());
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t c = 0; c < cols; ++c) {
      got[t * cols + c] = F8E4M3ToF32(q2[t * cols + c]) * s2[(c / 128) * sstride + t];
    }
  }
  r.rel_err = RelErr(got, want, &r.unwritten);
  return r;
}

}  // namespace

void AddQuantizeCases(std::vector<Case>* cases) {
  // 2048 columns: GLM-5.x's moe_intermediate (vector loads); 200: a partial group, an odd row stride
  // for 4-column loads (400 bytes: every other lane's gate is 8-byte aligned).
  for (const auto& [rows, cols, limit] : std::vector<std::tuple<int64_t, int64_t, float>>{
           {37, 2048, 0.0f}, {37, 2048, 7.0f}, {5, 200, 7.0f}, {3, 36, 0.0f}}) {
    cases->push_back({absl::StrCat("swiglu_quantize_act_fp8 rows=", rows, " cols=", cols, " limit=", limit),
                      [rows, cols, limit](std::mt19937& rng) { return SwiGluQuantizeCase(rng, rows, cols, limit); }});
  }
  // 16-byte loads a lane where in % 8 == 0 (a partial group at 200, two lanes at 16); 100: four
  // columns a lane.
  for (const auto& [rows, in] : std::vector<std::pair<int64_t, int64_t>>{{9, 6144}, {3, 200}, {2, 16}, {4, 100}}) {
    for (bool gather : {false, true}) {
      cases->push_back({absl::StrCat("quantize_act_fp8", gather ? "_rows" : "", " rows=", rows, " in=", in),
                        [rows, in, gather](std::mt19937& rng) { return QuantizeActCase(rng, rows, in, gather); }});
    }
  }
}

}  // namespace ferry::harness
