#include "kernels/cpu/nvfp4_w4a4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "kernels/nvfp4_layout.h"
#include "kernels/nvfp4_mma_layout.h"

namespace ferry::kernels::cpu {

namespace l = w4a4;

void QuantizeActivationsNvfp4(const float* x, int64_t rows, int64_t in, float input_scale, uint8_t* codes,
                              uint8_t* scales, int64_t stride) {
  const float g = 1.0f / input_scale;
  std::memset(codes, 0, static_cast<size_t>(rows * stride / 2));
  std::memset(scales, 0, static_cast<size_t>(rows * stride / l::kGroup));
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t c0 = 0; c0 < in; c0 += l::kGroup) {
      const float* v = x + t * in + c0;
      float amax = 0.0f;
      for (int i = 0; i < l::kGroup; ++i) amax = std::max(amax, std::fabs(v[i]));
      const uint8_t s = F32ToF8E4M3(l::ScaleTarget(amax, g));  // nearest even, saturating at 448
      scales[t * (stride / l::kGroup) + c0 / l::kGroup] = s;
      const float r = l::ValueMultiplier(F8E4M3ToF32(s), g);
      for (int i = 0; i < l::kGroup; ++i) {
        const uint8_t code = l::E2M1Code(v[i] * r);
        codes[t * (stride / 2) + (c0 + i) / 2] |= static_cast<uint8_t>(i % 2 == 0 ? code : code << 4);
      }
    }
  }
}

float GroupTerm(const uint8_t* a, uint8_t sa, const uint8_t* w, uint8_t sw) {
  int twice2 = 0;  // the sum of 4 e2m1(a) e2m1(w): integers, exact
  for (int i = 0; i < l::kGroup; ++i) {
    const int shift = 4 * (i % 2);
    twice2 += l::E2M1Twice(static_cast<uint8_t>(a[i / 2] >> shift & 0x0f)) *
              l::E2M1Twice(static_cast<uint8_t>(w[i / 2] >> shift & 0x0f));
  }
  return static_cast<float>(twice2) * 0.25f * (F8E4M3ToF32(sa) * F8E4M3ToF32(sw));
}

void LinearW4A4Quantized(const uint8_t* act_codes, const uint8_t* act_scales, int64_t act_stride, int64_t rows,
                         int64_t in, float input_scale, const uint8_t* codes, const uint8_t* scales,
                         float global_scale, int64_t out, float* y) {
  const float alpha = input_scale * global_scale;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      float acc = 0.0f;
      for (int64_t c0 = 0; c0 < in; c0 += l::kGroup) {
        acc += GroupTerm(act_codes + t * (act_stride / 2) + c0 / 2, act_scales[t * (act_stride / l::kGroup) + c0 / l::kGroup],
                         codes + o * (in / 2) + c0 / 2, scales[o * (in / l::kGroup) + c0 / l::kGroup]);
      }
      y[t * out + o] = acc * alpha;
    }
  }
}

void LinearW4A4(const float* x, int64_t rows, int64_t in, float input_scale, const uint8_t* codes,
                const uint8_t* scales, float global_scale, int64_t out, float* y) {
  std::vector<uint8_t> a_codes(static_cast<size_t>(rows * in / 2)), a_scales(static_cast<size_t>(rows * in / 16));
  QuantizeActivationsNvfp4(x, rows, in, input_scale, a_codes.data(), a_scales.data(), in);
  LinearW4A4Quantized(a_codes.data(), a_scales.data(), in, rows, in, input_scale, codes, scales, global_scale, out,
                      y);
}

void PackW4A4(const uint8_t* codes, const uint8_t* scales, float global_scale, int64_t rows, int64_t in,
              uint8_t* packed, int64_t out, int64_t row0) {
  nvfp4::PackTiles(global_scale, rows, in, packed, out, row0, [&](uint8_t* tile, int64_t r_base, int64_t c_base) {
    for (int step = 0; step < l::kTileSteps; ++step) {
      for (int lane = 0; lane < 32; ++lane) {
        for (int reg = 0; reg < 4; ++reg) {
          uint32_t word = 0;
          for (int i = 0; i < 8; ++i) {
            const l::Pos p = l::TileCodeSource(step, lane, reg, i);
            word |= static_cast<uint32_t>(nvfp4::InputCode(codes, scales, rows, in, r_base + p.row, c_base + p.col))
                    << (4 * i);
          }
          std::memcpy(tile + l::CodeWordOffset(step, lane, reg), &word, 4);
        }
      }
      for (int slot = 0; slot < 16; ++slot) {
        for (int b = 0; b < 4; ++b) {
          const l::Pos p = l::TileScaleSource(slot, step, b);
          const uint8_t s = nvfp4::InputScale(scales, rows, in, r_base + p.row, c_base + p.col) & 0x7f;  // UE4M3
          tile[l::kTileCodeBytes + 16 * slot + 4 * step + b] = s;
        }
      }
    }
  });
}

}  // namespace ferry::kernels::cpu
