// The GB10's (sm_121a) block-scaled FP4 tensor-core product and the W4A4 decode layout built on
// it: which matrix element each lane's registers hold, the packed weight tiles the kernel
// (kernels/cuda/gemv_w4a4_sm121.cu) loads, and the activation-quantization arithmetic shared by
// the kernel and its CPU twin (kernels/cpu/nvfp4_w4a4.h). Plain C++ (constexpr; the CUDA build's
// --expt-relaxed-constexpr makes every function here callable from device code), so the host
// emulator (kernels/cpu/nvfp4_mma_emulator.h) and the kernel use the same maps.
//
// The instruction: mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X
// .f32.e2m1.e2m1.f32.ue4m3 d, a, b, c, sfa, {byte-id-a, thread-id-a}, sfb, {byte-id-b,
// thread-id-b}: D[16 x 8] = (A[16 x 64] * SF_A) (B[64 x 8] * SF_B) + C, A and B E2M1 codes, one
// UE4M3 scale per row of A and per column of B for each 16 consecutive K (scale_vec::4X: 4 a
// row). Fragments (lane l, group g = l / 4, thread-in-group t = l % 4; a register's 8 E2M1 codes
// are its nibbles, nibble i = bits [4i, 4i + 4), the lowest K first):
//   A (4 x b32): register j holds row g + 8 (j % 2), K = 32 (j / 2) + 8 t + i.
//   B (2 x b32): register j holds column g, K = 32 j + 8 t + i.
//   C, D (4 x f32): register j is row g + 8 (j / 2), column 2 t + j % 2 (as mma.m16n8k16's).
//   SF_A (b32): with byte-id-a 0 and thread-id-a 0, lanes with t < 2 supply it: lane l's byte q
//     is the scale of row g + 8 (l % 2), K [16 q, 16 q + 16). Lanes with t >= 2 are not read.
//   SF_B (b32): with byte-id-b 0 and thread-id-b 0, the lane with t == 0 supplies it: byte q is
//     the scale of column g, K [16 q, 16 q + 16).
// Read from: the PTX ISA's block-scaling section (scale_A is M x 4, scale_B 4 x N under
// scale_vec::4X; the selectors) and CUTLASS's SM120 16x8x64 block-scaled traits (ALayout,
// BLayout, SFALayout ((2,2,8):(8,0,1)) and SFBLayout ((4,8):(0,1)) read as maps above; its atoms
// pass 0 for all four selectors). Not checked on a GB10: no GB10 is lent here.
//
// Packed W4A4 weight W [out, in] (from ModelOpt NVFP4: codes [out, in / 2], E4M3 group scales
// [out, in / 16], float32 global scale): tiles of 16 rows x 256 columns, 2304 bytes each, row
// tile R then column tile K at byte (R * ceil(in / 256) + K) * kTileBytes, then one float32 a
// row tile (the global scale of its rows), the whole rounded up to 16 bytes. A tile is the 4 mma
// steps (64 columns each) one warp runs over its 256 columns:
//   bytes [0, 2048): step s at 512 s; lane l's 16 bytes at 512 s + 16 l are its A registers 0..3
//     of that step (CodeWordOffset), so a warp loads a step as one coalesced 512-byte piece.
//   bytes [2048, 2304): 16 scale slots of 16 bytes; slot p = 2 (l / 4) + l % 2 is read by lane l
//     (and by lane l + 2, whose copy the mma ignores); its word s is SF_A of step s.
// A negative group scale's sign moves into its codes (UE4M3 has none), a zero scale zeroes
// them; rows past `out` and columns past `in` are zero codes under scale 0.
//
// Quantized activations x [rows, in] (rows <= 8): codes [rows, PaddedCols(in) / 2] (element 2i in
// the low nibble, as ModelOpt packs) and E4M3 scales [rows, PaddedCols(in) / 16], padding zero.
// A B register is 4 consecutive code bytes of a row and SF_B 4 consecutive scale bytes, so lanes
// load them straight from that layout (ActCodeByte, ActScaleByte).
#pragma once

#include <cstdint>

#include "kernels/nvfp4_layout.h"

namespace ferry::kernels::w4a4 {

inline constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 64;
inline constexpr int kGroup = 16;  // K values a scale
// The tile geometry is the bf16-operand layout's (nvfp4_layout.h): 16 x 256, 2304 bytes, a
// float32 global scale a row tile after the tiles; only the bytes' order inside a tile differs.
using nvfp4::kTileBytes;
using nvfp4::kTileCodeBytes;
using nvfp4::kTileCols;
using nvfp4::kTileRows;
using nvfp4::ColTiles;
using nvfp4::PackedBytes;
using nvfp4::RowScaleOffset;
using nvfp4::RowTiles;
inline constexpr int kTileSteps = 4;  // mma steps a tile
inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kE4M3Max = 448.0f;
static_assert(kTileCodeBytes == kTileSteps * 32 * 16, "16 code bytes a lane a step");
static_assert(kTileBytes == kTileCodeBytes + 16 * 16, "16 scale slots of 16 bytes");
static_assert(kTileCols == kTileSteps * kMmaK, "4 steps of 64 columns");

constexpr int64_t PaddedCols(int64_t in) { return ColTiles(in) * kTileCols; }

// Fragment maps of the instruction (see the top of the file). Pos: row and column of the matrix
// (A: row, K; B: K, column; D: row, column).
struct Pos {
  int row;
  int col;
};
constexpr Pos AElement(int lane, int reg, int nibble) {
  return {lane / 4 + 8 * (reg % 2), 32 * (reg / 2) + 8 * (lane % 4) + nibble};
}
constexpr Pos BElement(int lane, int reg, int nibble) { return {32 * reg + 8 * (lane % 4) + nibble, lane / 4}; }
constexpr Pos DElement(int lane, int reg) { return {lane / 4 + 8 * (reg / 2), 2 * (lane % 4) + reg % 2}; }
// Scale registers under selectors 0: whether lane's register is read, and the row (A) or column
// (B) its 4 bytes (K groups 0..3 of the step) belong to.
constexpr bool ScaleALaneRead(int lane) { return lane % 4 < 2; }
constexpr int ScaleARow(int lane) { return lane / 4 + 8 * (lane % 2); }
constexpr bool ScaleBLaneRead(int lane) { return lane % 4 == 0; }
constexpr int ScaleBCol(int lane) { return lane / 4; }

// The packed weight tile as lanes load it. Byte offset of lane's A register `reg` in step s.
constexpr int64_t CodeWordOffset(int step, int lane, int reg) { return 512 * step + 16 * lane + 4 * reg; }
// The scale slot lane reads and the byte offset of its word for step s.
constexpr int ScaleSlot(int lane) { return 2 * (lane / 4) + lane % 2; }
constexpr int64_t ScaleWordOffset(int lane, int step) { return kTileCodeBytes + 16 * ScaleSlot(lane) + 4 * step; }
// Which weight element (row and column within the tile) nibble i of a code word holds, and which
// (row, column of the group's first value) byte q of a scale word holds.
constexpr Pos TileCodeSource(int step, int lane, int reg, int nibble) {
  const Pos p = AElement(lane, reg, nibble);
  return {p.row, kMmaK * step + p.col};
}
constexpr Pos TileScaleSource(int slot, int step, int byte) {
  return {slot / 2 + 8 * (slot % 2), kMmaK * step + kGroup * byte};
}

// Quantized activations as lanes load them: the byte offset within a row of codes of B register
// `reg` at column `col0` (a multiple of 64: the step's first column), and of the SF_B word.
constexpr int64_t ActCodeByte(int lane, int reg, int64_t col0) { return (col0 + BElement(lane, reg, 0).row) / 2; }
constexpr int64_t ActScaleByte(int64_t col0) { return col0 / kGroup; }

// Activation quantization (NVFP4 W4A4 as vLLM and TensorRT-LLM run ModelOpt checkpoints): the
// quantizer's global scale is g = 1 / input_scale (input_scale: the checkpoint's float32
// activation scale, amax / (6 * 448) at calibration); a group of 16 with largest magnitude amax
// gets the E4M3 scale s = e4m3(g * (amax * (1 / 6))), rounded to nearest even and saturated at
// 448; each value is multiplied by r = 1 / (s * (1 / g)) (0 when s is 0) and rounded to the
// nearest E2M1 value, ties to even, saturating at 6. A value then stands for e2m1 * s / g, and
// the product's sum is multiplied by input_scale * weight global scale. All float32, IEEE.
constexpr float ScaleTarget(float amax, float g) { return g * (amax * (1.0f / kE2M1Max)); }
constexpr float ValueMultiplier(float s, float g) { return s == 0.0f ? 0.0f : 1.0f / (s * (1.0f / g)); }
// The E2M1 code nearest x (ties to the even code, beyond +-6: +-6); a negative x that rounds to
// zero keeps its sign (code 8), -0 itself gives code 0 (either decodes to a zero product).
// REQUIRES: x is not NaN.
constexpr uint8_t E2M1Code(float x) {
  const bool neg = x < 0.0f;
  const float a = neg ? -x : x;
  // Between neighbouring magnitudes the midpoint goes to the even code: <= where the lower
  // neighbour's code is even (0.25, 1.25, 2.5, 5), < where the upper one's is (0.75, 1.75, 3.5).
  const uint8_t code = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3
                     : a <= 2.5f ? 4 : a < 3.5f ? 5 : a <= 5.0f ? 6 : 7;
  return static_cast<uint8_t>((neg ? 8 : 0) | code);
}
// The value of an E2M1 code times 2 (an integer: 0, 1, 2, 3, 4, 6, 8, 12, signed).
constexpr int E2M1Twice(uint8_t code) {
  constexpr int kTwice[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  return (code & 8) != 0 ? -kTwice[code & 7] : kTwice[code & 7];
}

// One lane's operands for step `step` of a packed tile: A registers and SF_A from the tile, B and
// SF_B from the quantized activations of the lane's column (input row ScaleBCol(lane)), whose
// code and scale rows start at `act_codes` and `act_scales` (nullptr: a column past the input
// rows, zero codes and scales). col0: the step's first column in the whole matrix. load32(p)
// reads the 4 bytes at p as a little-endian word (p is 4-byte aligned when the buffers are 16-byte
// aligned and the row strides PaddedCols(in) / 2 and / 16). The kernel and the host form of the
// harness both assemble lanes through this function.
struct LaneOperands {
  uint32_t a[4];
  uint32_t b[2];
  uint32_t sfa;
  uint32_t sfb;
};
template <class Load32>
constexpr LaneOperands LoadLaneOperands(const uint8_t* tile, const uint8_t* act_codes, const uint8_t* act_scales,
                                        int lane, int step, int64_t col0, Load32 load32) {
  LaneOperands op{};
  for (int j = 0; j < 4; ++j) op.a[j] = load32(tile + CodeWordOffset(step, lane, j));
  op.sfa = load32(tile + ScaleWordOffset(lane, step));
  if (act_codes != nullptr) {
    for (int j = 0; j < 2; ++j) op.b[j] = load32(act_codes + ActCodeByte(lane, j, col0));
    op.sfb = load32(act_scales + ActScaleByte(col0));
  }
  return op;
}

}  // namespace ferry::kernels::w4a4
