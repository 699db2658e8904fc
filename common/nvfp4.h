// NVFP4 as NVIDIA's ModelOpt writes it (quant_algo "NVFP4", group size 16): a weight [rows, cols]
// is stored as
//   X.weight          U8       [rows, cols / 2]   two E2M1 values a byte, element 2i in the low
//                                                  nibble, 2i+1 in the high one
//   X.weight_scale    F8_E4M3  [rows, cols / 16]  a scale for each group of 16 along a row
//   X.weight_scale_2  F32      [] (or [1])        the tensor's global scale
//   X.input_scale     F32      [] (or [1])        the activations' global scale (W4A4 kernels)
// and element (r, c) is e2m1(r, c) * float(weight_scale[r][c / 16]) * weight_scale_2.
//
// E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6
// (no infinity, no NaN). Quantizing follows ModelOpt: global = amax / (6 * 448); a group's scale is
// its amax / 6 / global as E4M3 (1 where the group is all zero); each value divided by its
// group's scale times the global is rounded to the nearest E2M1 magnitude, ties to the even code,
// and saturates at 6.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ferry {

inline constexpr int64_t kNvfp4Group = 16;
inline constexpr float kE2M1Max = 6.0f;

// A tensor's global scale from its largest magnitude, as ModelOpt sets weight_scale_2 and
// input_scale: amax / (6 * 448) (the largest E2M1 value times the largest E4M3 one).
inline float Nvfp4GlobalScale(float amax) { return amax / (kE2M1Max * 448.0f); }

// The value of a 4-bit E2M1 code (its low nibble).
float E2M1ToF32(uint8_t code);
// The E2M1 code nearest `x` (ties to the even code; beyond +-6: +-6).
uint8_t F32ToE2M1(float x);

// One weight quantized: packed codes [rows, cols / 2], group scales [rows, cols / 16] (E4M3
// bytes) and the global scale, Nvfp4GlobalScale of `amax` (< 0: the weight's own largest
// magnitude; ModelOpt gives the gate and up projections of one MLP the larger of their two).
// REQUIRES: cols % 16 == 0, every value finite, amax < 0 or >= every |value|.
struct Nvfp4Weight {
  std::vector<uint8_t> packed;
  std::vector<uint8_t> scales;
  float global_scale = 1.0f;
};
Nvfp4Weight QuantizeNvfp4(std::span<const float> w, int64_t rows, int64_t cols, float amax = -1.0f);

// Decodes columns [c0, c1) of row r of an NVFP4 weight with `cols` columns into out[0, c1 - c0).
void DequantNvfp4Row(const uint8_t* packed, const uint8_t* scales, float global_scale, int64_t cols, int64_t r,
                     int64_t c0, int64_t c1, float* out);

}  // namespace ferry
