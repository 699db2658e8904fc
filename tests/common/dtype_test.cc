#include "common/dtype.h"

#include <cmath>

#include "tests/catch.h"

namespace ferry {
namespace {

TEST_CASE("dtype names round-trip", "[dtype]") {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kI32, DType::kBool}) {
    auto parsed = ParseDType(DTypeName(t));
    REQUIRE(parsed.has_value());
    CHECK(*parsed == t);
  }
  CHECK_FALSE(ParseDType("F8_E5M2").has_value());
  CHECK_FALSE(ParseDType("bf16").has_value());
  CHECK(DTypeSize(DType::kBF16) == 2);
  CHECK(DTypeSize(DType::kF8E4M3) == 1);
}

TEST_CASE("bf16 conversion", "[dtype]") {
  CHECK(Bf16ToF32(0x3f80) == 1.0f);
  CHECK(Bf16ToF32(0xc000) == -2.0f);
  CHECK(F32ToBf16(1.0f) == 0x3f80);
  // Round to nearest even: 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125 -> 1.0.
  CHECK(F32ToBf16(1.0f + 1.0f / 256) == 0x3f80);
  CHECK(F32ToBf16(1.0f + 3.0f / 256) == 0x3f82);
  CHECK(std::isnan(Bf16ToF32(F32ToBf16(NAN))));
}

TEST_CASE("f16 conversion", "[dtype]") {
  CHECK(F16ToF32(0x3c00) == 1.0f);
  CHECK(F16ToF32(0xc000) == -2.0f);
  CHECK(F16ToF32(0x7bff) == 65504.0f);
  CHECK(F16ToF32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(F16ToF32(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(F16ToF32(0x8000) == 0.0f);
  CHECK(std::signbit(F16ToF32(0x8000)));
  CHECK(std::isinf(F16ToF32(0x7c00)));
  CHECK(std::isnan(F16ToF32(0x7e00)));
}

TEST_CASE("fp8 e4m3 conversion", "[dtype]") {
  CHECK(F8E4M3ToF32(0x38) == 1.0f);
  CHECK(F8E4M3ToF32(0xb8) == -1.0f);
  CHECK(F8E4M3ToF32(0x7e) == 448.0f);           // largest finite
  CHECK(F8E4M3ToF32(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(F8E4M3ToF32(0x07) == 7.0f * std::ldexp(1.0f, -9));
  CHECK(F8E4M3ToF32(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(F8E4M3ToF32(0x3c) == 1.5f);
  CHECK(std::isnan(F8E4M3ToF32(0x7f)));
  CHECK(std::isnan(F8E4M3ToF32(0xff)));
  // Every non-NaN code is finite and the positive codes increase monotonically.
  float prev = -1.0f;
  for (int b = 0; b < 0x7f; ++b) {
    const float v = F8E4M3ToF32(static_cast<uint8_t>(b));
    REQUIRE(std::isfinite(v));
    REQUIRE(v > prev);
    prev = v;
  }
}

TEST_CASE("float32 -> fp8 e4m3: nearest even - saturating", "[dtype]") {
  // Every finite code comes back from its own value (both signs).
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    CHECK(F32ToF8E4M3(F8E4M3ToF32(static_cast<uint8_t>(b))) == b);
  }
  // Halfway between neighbours goes to the even code; just past it to the upper one.
  for (int b = 0; b < 0x7e; ++b) {
    const float lo = F8E4M3ToF32(static_cast<uint8_t>(b)), hi = F8E4M3ToF32(static_cast<uint8_t>(b + 1));
    const float mid = 0.5f * (lo + hi);
    CHECK(F32ToF8E4M3(mid) == ((b & 1) == 0 ? b : b + 1));
    CHECK(F32ToF8E4M3(std::nextafter(mid, hi)) == b + 1);
    CHECK(F32ToF8E4M3(-std::nextafter(mid, lo)) == (0x80 | b));
  }
  CHECK(F32ToF8E4M3(1000.0f) == 0x7e);   // past 448: saturates
  CHECK(F32ToF8E4M3(-1e30f) == 0xfe);
  CHECK(F32ToF8E4M3(std::ldexp(1.0f, -11)) == 0x00);  // a quarter of the smallest subnormal
  CHECK(F32ToF8E4M3(std::nanf("")) == 0x7f);
}

}  // namespace
}  // namespace ferry
