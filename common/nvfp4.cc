#include "common/nvfp4.h"

#include <algorithm>
#include <cmath>

#include "common/dtype.h"

namespace ferry {
namespace {

constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
// Midpoints between neighbouring magnitudes; at a midpoint the even code wins, so the code
// rounds up at the midpoints that lie below an even code (0.75, 1.75, 3.5).
constexpr float kBounds[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};

}  // namespace

float E2M1ToF32(uint8_t code) {
  const float m = kMagnitudes[code & 7];
  return (code & 8) != 0 ? -m : m;
}

uint8_t F32ToE2M1(float x) {
  const float a = std::fabs(x);
  uint8_t code = 0;
  while (code < 7 && a > kBounds[code]) ++code;
  if (code < 7 && a == kBounds[code] && (code % 2) == 1) ++code;  // a tie goes to the even code
  return static_cast<uint8_t>((std::signbit(x) ? 8 : 0) | code);
}

Nvfp4Weight QuantizeNvfp4(std::span<const float> w, int64_t rows, int64_t cols, float amax) {
  Nvfp4Weight q;
  if (amax < 0.0f) {
    amax = 0.0f;
    for (float v : w) amax = std::max(amax, std::fabs(v));
  }
  q.global_scale = Nvfp4GlobalScale(amax);
  if (q.global_scale == 0.0f) q.global_scale = 1.0f;  // an all-zero tensor: any scale decodes it
  const int64_t groups = cols / kNvfp4Group;
  q.packed.assign(static_cast<size_t>(rows * cols / 2), 0);
  q.scales.assign(static_cast<size_t>(rows * groups), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = w.data() + r * cols + g * kNvfp4Group;
      float gmax = 0.0f;
      for (int64_t i = 0; i < kNvfp4Group; ++i) gmax = std::max(gmax, std::fabs(x[i]));
      const float want = gmax / kE2M1Max / q.global_scale;
      const uint8_t scale = F32ToF8E4M3(gmax == 0.0f ? 1.0f : want);
      q.scales[static_cast<size_t>(r * groups + g)] = scale;
      const float step = F8E4M3ToF32(scale) * q.global_scale;
      for (int64_t i = 0; i < kNvfp4Group; ++i) {
        const uint8_t code = step > 0.0f ? F32ToE2M1(x[i] / step) : 0;
        const int64_t at = r * cols + g * kNvfp4Group + i;
        q.packed[static_cast<size_t>(at / 2)] |= static_cast<uint8_t>(at % 2 == 0 ? code : code << 4);
      }
    }
  }
  return q;
}

void DequantNvfp4Row(const uint8_t* packed, const uint8_t* scales, float global_scale, int64_t cols, int64_t r,
                     int64_t c0, int64_t c1, float* out) {
  const uint8_t* prow = packed + r * (cols / 2);
  const uint8_t* srow = scales + r * (cols / kNvfp4Group);
  for (int64_t c = c0; c < c1; ++c) {
    const uint8_t byte = prow[c / 2];
    const uint8_t code = c % 2 == 0 ? (byte & 0x0f) : (byte >> 4);
    out[c - c0] = E2M1ToF32(code) * F8E4M3ToF32(srow[c / kNvfp4Group]) * global_scale;
  }
}

}  // namespace ferry
