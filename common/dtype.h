// Element types of checkpoint tensors and their conversion to float32.
// Byte layouts are little-endian, as safetensors stores them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include "absl/strings/string_view.h"

namespace ferry {

enum class DType : uint8_t { kF32, kF16, kBF16, kF8E4M3, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

// Bytes per element.
constexpr int64_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 2;
    case DType::kF8E4M3: case DType::kI8: case DType::kU8: case DType::kBool: return 1;
  }
  return 0;
}

// The safetensors spelling ("BF16", "F8_E4M3", ...).
absl::string_view DTypeName(DType t);
// Parses the safetensors spelling; nullopt for an unknown one.
std::optional<DType> ParseDType(absl::string_view name);

// True for the types the CPU backend upcasts to float32 as weights.
constexpr bool IsFloatWeightType(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF8E4M3;
}

inline float Bf16ToF32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Round-to-nearest-even float32 -> bf16 (NaN stays NaN).
inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// IEEE half -> float32, subnormals, inf and NaN included.
inline float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | (exp + 127 - 15) << 23 | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// OCP FP8 E4M3 ("e4m3fn": bias 7, no infinities, S.1111.111 is NaN, max 448) -> float32.
inline float F8E4M3ToF32(uint8_t b) {
  uint32_t sign = (b & 0x80u) ? 1u : 0u;
  uint32_t exp = (b >> 3) & 0xfu;
  uint32_t mant = b & 0x7u;
  float v;
  if (exp == 0xfu && mant == 0x7u) {
    v = __builtin_nanf("");
  } else if (exp == 0) {
    v = static_cast<float>(mant) * (1.0f / 512.0f);  // mant/8 * 2^-6
  } else {
    uint32_t u = (exp + 127 - 7) << 23 | mant << 20;
    std::memcpy(&v, &u, sizeof(v));
  }
  return sign ? -v : v;
}

// float32 -> OCP FP8 E4M3, rounded to nearest even, saturating to +-448 (the GPU's
// cvt.rn.satfinite.e4m3x2.f32); NaN -> 0x7f.
inline uint8_t F32ToF8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0.015625f) {  // below 2^-6: subnormal steps of 2^-9 (8 steps round up to 2^-6, code 8)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  int exponent = e - 1;               // a = (2 m) 2^exponent, 2 m in [1, 2)
  int mant = static_cast<int>(std::nearbyint((2.0f * m - 1.0f) * 8.0f));
  if (mant == 8) mant = 0, ++exponent;
  if (exponent > 8 || (exponent == 8 && mant > 6)) return sign | 0x7e;
  return sign | static_cast<uint8_t>((exponent + 7) << 3 | mant);
}

}  // namespace ferry
