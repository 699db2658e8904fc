#include "kernels/cpu/nvfp4.h"

#include <cstring>
#include <vector>

#include "common/nvfp4.h"
#include "kernels/cpu/ops.h"
#include "kernels/nvfp4_layout.h"

namespace ferry::kernels::cpu {

void LinearNvfp4(const float* x, int64_t rows, int64_t in, const uint8_t* codes, const uint8_t* scales,
                 float global_scale, int64_t out, float* y) {
  std::vector<float> w(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    DequantNvfp4Row(codes, scales, global_scale, in, o, 0, in, w.data());
    for (int64_t t = 0; t < rows; ++t) y[t * out + o] = Dot(x + t * in, w.data(), in);
  }
}

void PackNvfp4(const uint8_t* codes, const uint8_t* scales, float global_scale, int64_t rows, int64_t in,
               uint8_t* packed, int64_t out, int64_t row0) {
  namespace l = nvfp4;
  l::PackTiles(global_scale, rows, in, packed, out, row0, [&](uint8_t* tile, int64_t r_base, int64_t c_base) {
    for (int chunk = 0; chunk < 4; ++chunk) {
      for (int lane = 0; lane < 32; ++lane) {
        for (int word = 0; word < 4; ++word) {
          uint32_t q = 0;
          for (int slot = 0; slot < 4; ++slot) {
            for (int half = 0; half < 2; ++half) {
              const l::CodeSource src = l::CodeSlotSource(chunk, lane, word, slot, half);
              const uint8_t code = l::InputCode(codes, scales, rows, in, r_base + src.row, c_base + src.col);
              q |= l::PlaceCode(code, slot, half);
            }
          }
          std::memcpy(tile + 512 * chunk + 16 * lane + 4 * word, &q, 4);
        }
      }
    }
    for (int lane = 0; lane < 32; ++lane) {
      for (int b = 0; b < 8; ++b) {
        const l::CodeSource src = l::ScaleByteSource(lane, b);
        const uint8_t scale = l::InputScale(scales, rows, in, r_base + src.row, c_base + src.col);
        tile[l::kTileCodeBytes + 8 * lane + b] = l::ScaleCode(scale);
      }
    }
  });
}

}  // namespace ferry::kernels::cpu
