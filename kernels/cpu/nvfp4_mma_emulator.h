// A host emulator of the GB10's block-scaled FP4 mma (kernels/nvfp4_mma_layout.h):
// mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32
// .ue4m3 with all four selectors 0, given all 32 lanes' registers. Plain C++.
//
// Numerics: the PTX ISA defines D = (A * SF_A)(B * SF_B) + C, not the order of the sums. Here, as
// in the CPU twin (kernels/cpu/nvfp4_w4a4.h), each 16-value group's term (its products summed,
// times its two scales) is exact in float32 and D = (((C + T0) + T1) + T2) + T3, T_q the term of
// K group q, each addition rounded to nearest even. Whether the GB10 rounds the same way is not
// known here (no GB10 is lent): the harness on a GB10 must compare with a tolerance until measured.
#pragma once

#include <cstdint>

namespace ferry::kernels::cpu {

// The registers of one mma, lane by lane, as the instruction takes them.
struct MmaNvf4Registers {
  uint32_t a[32][4];
  uint32_t b[32][2];
  float c[32][4];
  uint32_t sfa[32];  // 4 UE4M3 bytes (bit 7 of each must be 0)
  uint32_t sfb[32];
};

// d[lane][j]: lane's D registers. Registers the instruction does not read (SF_A of lanes with
// lane % 4 >= 2, SF_B of lanes with lane % 4 != 0) do not matter.
void EmulateMmaNvf4(const MmaNvf4Registers& r, float d[32][4]);

}  // namespace ferry::kernels::cpu
