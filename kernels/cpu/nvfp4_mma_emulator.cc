#include "kernels/cpu/nvfp4_mma_emulator.h"

#include "common/dtype.h"
#include "kernels/nvfp4_mma_layout.h"

namespace ferry::kernels::cpu {

namespace l = w4a4;

void EmulateMmaNvf4(const MmaNvf4Registers& r, float d[32][4]) {
  // The matrices the registers hold, through the fragment maps.
  uint8_t a[l::kMmaM][l::kMmaK] = {}, b[l::kMmaK][l::kMmaN] = {};
  uint8_t sfa[l::kMmaM][4] = {}, sfb[l::kMmaN][4] = {};
  float c[l::kMmaM][l::kMmaN] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 8; ++i) {
        const l::Pos p = l::AElement(lane, j, i);
        a[p.row][p.col] = static_cast<uint8_t>(r.a[lane][j] >> (4 * i) & 0x0f);
      }
      const l::Pos q = l::DElement(lane, j);
      c[q.row][q.col] = r.c[lane][j];
    }
    for (int j = 0; j < 2; ++j) {
      for (int i = 0; i < 8; ++i) {
        const l::Pos p = l::BElement(lane, j, i);
        b[p.row][p.col] = static_cast<uint8_t>(r.b[lane][j] >> (4 * i) & 0x0f);
      }
    }
    for (int q = 0; q < 4; ++q) {
      if (l::ScaleALaneRead(lane)) sfa[l::ScaleARow(lane)][q] = static_cast<uint8_t>(r.sfa[lane] >> (8 * q));
      if (l::ScaleBLaneRead(lane)) sfb[l::ScaleBCol(lane)][q] = static_cast<uint8_t>(r.sfb[lane] >> (8 * q));
    }
  }
  float out[l::kMmaM][l::kMmaN];
  for (int m = 0; m < l::kMmaM; ++m) {
    for (int n = 0; n < l::kMmaN; ++n) {
      float acc = c[m][n];
      for (int q = 0; q < 4; ++q) {
        int twice2 = 0;
        for (int k = l::kGroup * q; k < l::kGroup * (q + 1); ++k) twice2 += l::E2M1Twice(a[m][k]) * l::E2M1Twice(b[k][n]);
        acc += static_cast<float>(twice2) * 0.25f * (F8E4M3ToF32(sfa[m][q] & 0x7f) * F8E4M3ToF32(sfb[n][q] & 0x7f));
      }
      out[m][n] = acc;
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    for (int j = 0; j < 4; ++j) {
      const l::Pos q = l::DElement(lane, j);
      d[lane][j] = out[q.row][q.col];
    }
  }
}

}  // namespace ferry::kernels::cpu
