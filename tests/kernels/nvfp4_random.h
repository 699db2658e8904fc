// Random NVFP4 weights in ModelOpt's layout for the NVFP4 tests (tests/kernels/nvfp4_test.cc, the
// kernel harness): uniform codes (every E2M1 value, -0 included) and group scales spread as real
// ones are (mostly 0.125 to 448), with the rare cases the decode must get right too: subnormal
// E4M3 scales, zero scales and, when asked, negative ones.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace ferry::testing {

struct RandomNvfp4 {
  std::vector<uint8_t> codes;   // [rows, cols / 2]
  std::vector<uint8_t> scales;  // [rows, cols / 16]
  float global_scale = 1.0f;
};

// REQUIRES: cols % 16 == 0.
inline RandomNvfp4 MakeRandomNvfp4(int64_t rows, int64_t cols, std::mt19937& rng, bool negative_scales = false) {
  RandomNvfp4 w;
  std::uniform_int_distribution<int> byte(0, 255), pick(0, 127), normal(0x20, 0x7e), sub(0x01, 0x07);
  w.codes.resize(static_cast<size_t>(rows * cols / 2));
  for (uint8_t& b : w.codes) b = static_cast<uint8_t>(byte(rng));
  w.scales.resize(static_cast<size_t>(rows * cols / 16));
  for (uint8_t& s : w.scales) {
    const int p = pick(rng);
    s = static_cast<uint8_t>(p == 0 ? 0 : p < 3 ? sub(rng) : normal(rng));
    if (negative_scales && p % 8 == 1) s |= 0x80;
  }
  w.global_scale = std::uniform_real_distribution<float>(1.0f, 2.0f)(rng) / 4096.0f;
  return w;
}

}  // namespace ferry::testing
