// The CPU twin of the W4A4 NVFP4 product (kernels/cpu/nvfp4_w4a4.h): the activation quantizer on
// hand-computed groups (the grid, ties, scale rounding, saturation, zero and underflowing groups)
// and the product on hand-computed cases and against an independent double-precision sum.
#include "kernels/cpu/nvfp4_w4a4.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/nvfp4.h"
#include "kernels/nvfp4_mma_layout.h"
#include "tests/catch.h"
#include "tests/kernels/nvfp4_random.h"

namespace ferry::kernels {
namespace {

struct Quantized {
  std::vector<uint8_t> codes, scales;
  uint8_t Code(int64_t row, int64_t col, int64_t stride) const {
    return static_cast<uint8_t>(codes[row * stride / 2 + col / 2] >> (4 * (col % 2)) & 0x0f);
  }
};
Quantized Quantize(const std::vector<float>& x, int64_t rows, int64_t in, float input_scale, int64_t stride) {
  Quantized q{std::vector<uint8_t>(static_cast<size_t>(rows * stride / 2), 0xaa),
              std::vector<uint8_t>(static_cast<size_t>(rows * stride / 16), 0xaa)};
  cpu::QuantizeActivationsNvfp4(x.data(), rows, in, input_scale, q.codes.data(), q.scales.data(), stride);
  return q;
}

// ModelOpt code bytes of a row of E2M1 values (each exactly on the grid).
std::vector<uint8_t> PackRow(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() / 2, 0);
  for (size_t i = 0; i < v.size(); ++i) b[i / 2] |= static_cast<uint8_t>(F32ToE2M1(v[i]) << (4 * (i % 2)));
  return b;
}

constexpr float kGrid[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.5f, -1, -1.5f, -2, -3, -4, -6, 0};

TEST_CASE("w4a4 quantize: the shared E2M1 rounding is common nvfp4's", "[nvfp4][w4a4]") {
  // Every multiple of 1/64 in [-8, 8] (the midpoints 0.25 ... 5 among them) except -0, whose code
  // the device formula leaves positive (either decodes to a zero product).
  for (int i = -512; i <= 512; ++i) {
    const float v = static_cast<float>(i) / 64.0f;
    INFO("value " << v);
    CHECK(w4a4::E2M1Code(v) == F32ToE2M1(v));
  }
}

TEST_CASE("w4a4 quantize: grid values times the block scale come back exactly", "[nvfp4][w4a4]") {
  // input_scale 0.25: global 4; amax 3 gives the scale 4 * 3 / 6 = 2 (E4M3 0x40), each value
  // times 1 / (2 / 4) = 2 lands on the grid.
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[i] = kGrid[i] * 0.5f;
  const Quantized q = Quantize(x, 1, 16, 0.25f, 16);
  CHECK(q.scales[0] == 0x40);
  for (int i = 0; i < 16; ++i) {
    INFO("value " << i);
    CHECK(q.Code(0, i, 16) == F32ToE2M1(kGrid[i]));
    // The value it stands for: e2m1 * scale * input_scale.
    CHECK(E2M1ToF32(q.Code(0, i, 16)) * F8E4M3ToF32(q.scales[0]) * 0.25f == x[i]);
  }
}

TEST_CASE("w4a4 quantize: ties go to the even code and the block scale rounds to nearest even", "[nvfp4][w4a4]") {
  // Row 0: amax 6 under input_scale 1: scale 1 (0x38), values unscaled.
  // Row 1: amax 6.375: scale 1.0625 is a tie between E4M3 1 and 1.125: 1 (mantissa 0); 6.375
  //        then saturates to 6.
  // Row 2: amax 6.75: scale 1.125 (0x39) exactly; 6.75 / 1.125 = 6.
  const std::vector<float> row0 = {6, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5, -0.25f, -0.75f, -5, 0.1f, 0.3f, 5.1f, 4.9f, 0};
  const std::vector<uint8_t> want0 = {7, 0, 2, 2, 4, 4, 6, 6, 8, 0xa, 0xe, 0, 1, 7, 6, 0};
  std::vector<float> x = row0;
  for (int r = 1; r <= 2; ++r) {
    for (int i = 0; i < 16; ++i) x.push_back(i == 0 ? (r == 1 ? 6.375f : 6.75f) : 0.0f);
  }
  const Quantized q = Quantize(x, 3, 16, 1.0f, 16);
  CHECK(q.scales[0] == 0x38);
  for (int i = 0; i < 16; ++i) {
    INFO("value " << row0[i]);
    CHECK(q.Code(0, i, 16) == want0[i]);
  }
  CHECK(q.scales[1] == 0x38);
  CHECK(q.Code(1, 0, 16) == 7);
  CHECK(q.scales[2] == 0x39);
  CHECK(q.Code(2, 0, 16) == 7);
}

TEST_CASE("w4a4 quantize: a group past the calibrated range saturates at 6 times 448", "[nvfp4][w4a4]") {
  // amax 6000 under input_scale 1 wants the scale 1000: E4M3 saturates at 448 (0x7e), and 6000 /
  // 448 = 13.4 saturates at the code of 6, standing for 6 * 448 = 2688.
  std::vector<float> x(16, 0.0f);
  x[0] = 6000, x[1] = 1344, x[2] = -1000, x[3] = -6000;
  const Quantized q = Quantize(x, 1, 16, 1.0f, 16);
  CHECK(q.scales[0] == 0x7e);
  CHECK(q.Code(0, 0, 16) == 7);
  CHECK(E2M1ToF32(q.Code(0, 0, 16)) * F8E4M3ToF32(q.scales[0]) == 2688.0f);
  CHECK(q.Code(0, 1, 16) == 5);    // 1344 / 448 = 3
  CHECK(q.Code(0, 2, 16) == 0xc);  // -1000 / 448 = -2.23: -2
  CHECK(q.Code(0, 3, 16) == 0xf);  // -6
}

TEST_CASE("w4a4 quantize: zero and underflowing groups and the padding get scale 0 and zero codes", "[nvfp4][w4a4]") {
  // Group 0 all zero; group 1's amax 1e-6 wants the scale 1.7e-7, below half the smallest E4M3
  // (2^-10): scale 0, so every code is 0. Columns [32, 64) are the stride's padding.
  std::vector<float> x(32, 0.0f);
  for (int i = 16; i < 32; ++i) x[i] = (i % 2 == 0 ? 1e-6f : -1e-6f);
  const Quantized q = Quantize(x, 1, 32, 1.0f, 64);
  for (int g = 0; g < 4; ++g) CHECK(q.scales[g] == 0);
  for (int b = 0; b < 32; ++b) CHECK(q.codes[b] == 0);
}

TEST_CASE("w4a4 twin: hand-computed products", "[nvfp4][w4a4]") {
  SECTION("all ones: the activation scale rounds up and the codes to 6") {
    // x = 1 (16 values), input_scale 1: scale e4m3(1 / 6) = 0.171875 (0x23); 1 / 0.171875 = 5.82
    // rounds to 6. W: 16 ones under scale 1, global 2. y = 16 * 6 * 0.171875 * 1 * (1 * 2) = 33.
    const std::vector<float> x(16, 1.0f);
    const std::vector<uint8_t> codes = PackRow(std::vector<float>(16, 1.0f)), scales = {0x38};
    float y = 0;
    cpu::LinearW4A4(x.data(), 1, 16, 1.0f, codes.data(), scales.data(), 2.0f, 1, &y);
    CHECK(y == 33.0f);
    CHECK(Quantize(x, 1, 16, 1.0f, 16).scales[0] == 0x23);
  }
  SECTION("grid values: exact, with the weight's group scale and global") {
    // x row 0 = {6, -3, 2, 0.5, 0...} then a zero group (scale 1 under input_scale 1); row 1 zero.
    // W row 0 = {1, 1, -2, 4, 0...} under scale 2, then ones under scale 1; global 0.5. W row 1 =
    // 3 in every column under scale 0.5. y[0][0] = (6 - 3 - 4 + 2) * 1 * 2 * (1 * 0.5) = 1;
    // y[0][1] = (6 - 3 + 2 + 0.5) * 3 * 0.5 * 0.5 = 4.125; row 1 zero.
    std::vector<float> x(64, 0.0f);
    x[0] = 6, x[1] = -3, x[2] = 2, x[3] = 0.5f;
    std::vector<float> w0(32, 0.0f);
    w0[0] = 1, w0[1] = 1, w0[2] = -2, w0[3] = 4;
    for (int i = 16; i < 32; ++i) w0[i] = 1;
    std::vector<uint8_t> codes = PackRow(w0);
    const std::vector<uint8_t> row1 = PackRow(std::vector<float>(32, 3.0f));
    codes.insert(codes.end(), row1.begin(), row1.end());
    const std::vector<uint8_t> scales = {0x40, 0x38, 0x30, 0x30};
    float y[4];
    cpu::LinearW4A4(x.data(), 2, 32, 1.0f, codes.data(), scales.data(), 0.5f, 2, y);
    CHECK(y[0] == 1.0f);
    CHECK(y[1] == 4.125f);
    CHECK(y[2] == 0.0f);
    CHECK(y[3] == 0.0f);
  }
}

TEST_CASE("w4a4 twin: random products agree with a double sum of the dequantized operands", "[nvfp4][w4a4]") {
  std::mt19937 rng(29);
  const int64_t rows = 5, in = 320, out = 24;
  for (bool negative : {false, true}) {
    const testing::RandomNvfp4 w = testing::MakeRandomNvfp4(out, in, rng, negative);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(rows * in));
    float amax = 0;
    for (float& v : x) v = normal(rng), amax = std::max(amax, std::fabs(v));
    const float input_scale = amax / (6.0f * 448.0f) * 0.7f;  // some groups saturate
    std::vector<float> y(static_cast<size_t>(rows * out));
    cpu::LinearW4A4(x.data(), rows, in, input_scale, w.codes.data(), w.scales.data(), w.global_scale, out, y.data());
    const Quantized q = Quantize(x, rows, in, input_scale, in);
    std::vector<float> a(static_cast<size_t>(in)), wr(static_cast<size_t>(in));
    for (int64_t t = 0; t < rows; ++t) {
      DequantNvfp4Row(q.codes.data(), q.scales.data(), 1.0f, in, t, 0, in, a.data());
      for (int64_t o = 0; o < out; ++o) {
        DequantNvfp4Row(w.codes.data(), w.scales.data(), 1.0f, in, o, 0, in, wr.data());
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < in; ++k) sum += double(a[k]) * wr[k], mag += std::fabs(double(a[k]) * wr[k]);
        const double want = sum * input_scale * w.global_scale, scale = mag * input_scale * w.global_scale;
        INFO("negative scales " << negative << " row " << t << " out " << o);
        CHECK(std::fabs(y[t * out + o] - want) <= 1e-5 * scale + 1e-30);
      }
    }
  }
}

}  // namespace
}  // namespace ferry::kernels
