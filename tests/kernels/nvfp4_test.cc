// The NVFP4 decode products' CPU side (kernels/cpu/nvfp4.h, kernels/nvfp4_layout.h): the CPU twin
// against common/nvfp4's decode and a plain product, and the device layout checked without a
// device: every code and scale placed by the packing decodes, through the kernels' own bit
// formulas and the column permutation they load x with, to the weight common/nvfp4 defines.
#include "kernels/cpu/nvfp4.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/nvfp4.h"
#include "kernels/cpu/ops.h"
#include "kernels/nvfp4_layout.h"
#include "tests/catch.h"
#include "tests/kernels/nvfp4_random.h"

namespace ferry::kernels {
namespace {

namespace lay = nvfp4;

float Half(uint32_t pair, int half) { return Bf16ToF32(static_cast<uint16_t>(pair >> (16 * half))); }

TEST_CASE("nvfp4 layout: a code in any slot decodes to its E2M1 value times 2^-126", "[nvfp4]") {
  uint32_t all = 0;
  for (int slot = 0; slot < 4; ++slot) {
    for (int half = 0; half < 2; ++half) {
      for (int code = 0; code < 16; ++code) {
        INFO("slot " << slot << " half " << half << " code " << code);
        const uint32_t q = lay::PlaceCode(static_cast<uint8_t>(code), slot, half);
        // Every slot's decode of this word: only its own slot sees the code.
        for (int other = 0; other < 4; ++other) {
          const uint32_t d = lay::DecodeSlot(q, other);
          if (other != slot) {
            CHECK(d == 0);
            continue;
          }
          CHECK(Half(d, half) == std::ldexp(E2M1ToF32(static_cast<uint8_t>(code)), -126));
          CHECK(std::signbit(Half(d, half)) == ((code & 8) != 0));
          CHECK(static_cast<uint16_t>(d >> (16 * (1 - half))) == 0);
        }
      }
      all |= lay::PlaceCode(0x0f, slot, half);
    }
  }
  CHECK(all == 0xffffffffu);  // the 8 codes of a word fill it
}

TEST_CASE("nvfp4 layout: a scale code expands to the E4M3 magnitude times 2^119", "[nvfp4]") {
  for (int b = 0; b < 256; ++b) {
    INFO("scale byte " << b);
    const uint8_t code = lay::ScaleCode(static_cast<uint8_t>(b));
    const uint32_t at02 = code | static_cast<uint32_t>(code) << 16, at13 = at02 << 8;
    for (int half = 0; half < 2; ++half) {
      const float lo = Half(lay::ScaleBf16(at02, 4), half), hi = Half(lay::ScaleBf16(at13, -4), half);
      CHECK(std::memcmp(&lo, &hi, 4) == 0);
      if ((b & 0x7f) == 0x7f) {
        CHECK(std::isnan(lo));
      } else if ((b & 0x7f) == 0) {
        CHECK(code == 0);  // the packing zeroes the group's codes
      } else {
        CHECK(lo == std::ldexp(std::fabs(F8E4M3ToF32(static_cast<uint8_t>(b))), 119));
      }
    }
  }
}

// The weight at (row, col) of a packed matrix as the kernels compute it: each lane's chunk decoded
// slot by slot, times its scale (bf16, exact), times 2^7 and the row tile's global scale. Filled
// for every (row, col) of the padded matrix; *visits counts how often each was produced.
std::vector<float> DecodePacked(const std::vector<uint8_t>& packed, int64_t out, int64_t in, std::vector<int>* visits) {
  const int64_t rt_n = lay::RowTiles(out), kt_n = lay::ColTiles(in), rows = rt_n * 16, cols = kt_n * 256;
  std::vector<float> w(static_cast<size_t>(rows * cols), NAN);
  visits->assign(w.size(), 0);
  for (int64_t rt = 0; rt < rt_n; ++rt) {
    float g = 0;
    std::memcpy(&g, packed.data() + lay::RowScaleOffset(out, in) + 4 * rt, 4);
    for (int64_t kt = 0; kt < kt_n; ++kt) {
      const uint8_t* tile = packed.data() + (rt * kt_n + kt) * lay::kTileBytes;
      for (int lane = 0; lane < 32; ++lane) {
        uint32_t sw[2];
        std::memcpy(sw, tile + lay::kTileCodeBytes + 8 * lane, 8);
        for (int c = 0; c < 4; ++c) {
          const uint32_t s2 = lay::ScaleBf16(sw[c / 2], c % 2 != 0 ? -4 : 4);
          for (int word = 0; word < 4; ++word) {
            uint32_t q = 0;
            std::memcpy(&q, tile + 512 * c + 16 * lane + 4 * word, 4);
            for (int slot = 0; slot < 4; ++slot) {
              const uint32_t d = lay::DecodeSlot(q, slot);
              // mma A register `slot` of step `word`: row lane / 4 + 8 (slot % 2), the lane's
              // columns 2 (lane % 4) + {0, 1} (+ 8 for slot >= 2), which the kernel pairs with x at
              // chunk column 16 (lane % 4) + 4 word + 2 (slot / 2) + half (its B registers).
              const int r = lane / 4 + 8 * (slot % 2);
              for (int half = 0; half < 2; ++half) {
                const int col = 64 * c + 16 * (lane % 4) + 4 * word + 2 * (slot / 2) + half;
                const double a = double(Half(d, half)) * double(Half(s2, slot % 2)) * 128.0;  // exact
                const size_t at = static_cast<size_t>((rt * 16 + r) * cols + kt * 256 + col);
                w[at] = static_cast<float>(a) * g;
                ++(*visits)[at];
              }
            }
          }
        }
      }
    }
  }
  return w;
}

TEST_CASE("nvfp4 layout: packed weights decode to what common nvfp4 defines", "[nvfp4]") {
  std::mt19937 rng(7);
  // Two weights stacked (an expert's gate and up: own global scales), ragged rows and columns.
  const int64_t in = 272, first = 48, second = 37, out = first + second;
  const testing::RandomNvfp4 a = testing::MakeRandomNvfp4(first, in, rng, /*negative_scales=*/true);
  const testing::RandomNvfp4 b = testing::MakeRandomNvfp4(second, in, rng);
  std::vector<uint8_t> packed(static_cast<size_t>(lay::PackedBytes(out, in)), 0xa5);
  cpu::PackNvfp4(a.codes.data(), a.scales.data(), a.global_scale, first, in, packed.data(), out, 0);
  cpu::PackNvfp4(b.codes.data(), b.scales.data(), b.global_scale, second, in, packed.data(), out, first);
  std::vector<int> visits;
  const std::vector<float> got = DecodePacked(packed, out, in, &visits);
  const int64_t cols = lay::ColTiles(in) * 256;
  std::vector<float> want(static_cast<size_t>(in));
  long wrong = 0, not_once = 0, nonzero_pad = 0;
  for (int64_t r = 0; r < lay::RowTiles(out) * 16; ++r) {
    if (r < out) {
      const testing::RandomNvfp4& w = r < first ? a : b;
      DequantNvfp4Row(w.codes.data(), w.scales.data(), w.global_scale, in, r < first ? r : r - first, 0, in,
                      want.data());
    }
    for (int64_t c = 0; c < cols; ++c) {
      const size_t at = static_cast<size_t>(r * cols + c);
      not_once += visits[at] != 1;
      if (r < out && c < in) {
        wrong += !(got[at] == want[static_cast<size_t>(c)]);
      } else {
        nonzero_pad += got[at] != 0.0f;
      }
    }
  }
  CHECK(not_once == 0);
  CHECK(wrong == 0);
  CHECK(nonzero_pad == 0);
}

TEST_CASE("nvfp4 twin: LinearNvfp4 is cpu Linear over the weights common nvfp4 decodes", "[nvfp4]") {
  std::mt19937 rng(3);
  const int64_t rows = 3, in = 96, out = 21;
  const testing::RandomNvfp4 w = testing::MakeRandomNvfp4(out, in, rng, /*negative_scales=*/true);
  std::normal_distribution<float> d;
  std::vector<float> x(static_cast<size_t>(rows * in)), wf(static_cast<size_t>(out * in));
  for (float& v : x) v = d(rng);
  for (int64_t o = 0; o < out; ++o) {
    DequantNvfp4Row(w.codes.data(), w.scales.data(), w.global_scale, in, o, 0, in, wf.data() + o * in);
  }
  std::vector<float> got(static_cast<size_t>(rows * out)), want(got.size());
  cpu::LinearNvfp4(x.data(), rows, in, w.codes.data(), w.scales.data(), w.global_scale, out, got.data());
  cpu::Linear(x.data(), rows, in, wf.data(), out, want.data());
  CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
  // And a plain product by hand: e2m1 * e4m3 * global from the bytes, summed in float64.
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0, mag = 0;
      for (int64_t i = 0; i < in; ++i) {
        const uint8_t code = (w.codes[static_cast<size_t>((o * in + i) / 2)] >> (4 * (i % 2))) & 0x0f;
        const double wv = double(E2M1ToF32(code)) * F8E4M3ToF32(w.scales[static_cast<size_t>(o * in / 16 + i / 16)]) *
                          w.global_scale;
        sum += wv * x[static_cast<size_t>(t * in + i)];
        mag += std::fabs(wv * x[static_cast<size_t>(t * in + i)]);
      }
      INFO("row " << t << " out " << o);
      CHECK(std::fabs(got[static_cast<size_t>(t * out + o)] - sum) <= 1e-6 * mag + 1e-30);
    }
  }
}

}  // namespace
}  // namespace ferry::kernels
