// The device layout of an NVFP4 weight for the decode products (kernels/cuda/gemv_nvfp4.h) and the
// bit-level pieces both sides share: the packing (kernels/cpu/nvfp4.cc on the host, PackNvfp4 on
// the device) and the kernels' in-register decode. Plain C++ (constexpr, callable from device code).
//
// Input: a ModelOpt NVFP4 weight W [out, in] (common/nvfp4.h): codes [out, in / 2] (element 2i in
// the low nibble), E4M3 group scales [out, in / 16], a float32 global scale G. Element (o, i) is
// e2m1(o, i) * e4m3(o, i / 16) * G.
//
// Packed: tiles of kTileRows x kTileCols (16 rows x 256 columns), row tile R then column tile K,
// tile (R, K) at byte (R * ceil(in / 256) + K) * kTileBytes; after the last tile, one float32 per
// row tile, the global scale of its rows (so a matrix may stack rows of weights with different
// global scales, such as an expert's gate and up projections). A tile is what one warp's
// mma.m16n8k16 steps consume over 256 columns, in the order its lanes load it:
//   bytes [0, 2048): 4 chunks of 64 columns, chunk c at 512 c; lane l's 16 bytes at 512 c + 16 l
//     hold the 16 columns [256 K + 64 c + 16 (l % 4), +16) (one scale group) of rows r = 16 R + l / 4
//     and r + 8: as 4 words, word w holding the 4 A registers of mma step w (CodeSlot below).
//   bytes [2048, 2304): lane l's 8 bytes at 2048 + 8 l: the scale codes (ScaleCode) of its group
//     in the 4 chunks, byte b: chunk 2 (b / 4) + (b % 2), row r + 8 ((b % 4) / 2).
// Rows past `out` and columns past `in` are zero codes with scale code 0 (they add nothing).
//
// Why: each lane's 16-byte load is one whole scale group of two rows, so a warp streams a tile as
// 512-byte coalesced pieces and each lane applies 2 scales a chunk (not 8); the columns inside an
// mma step are permuted (step w, lane l covers columns 16 (l % 4) + 4 w + {0, 1, 2, 3} of the chunk,
// and x is loaded with the same permutation), which leaves each dot product unchanged.
//
// Decode: a slot's 8 bits turn into a bf16 pair (its two columns) by one mask and up to three
// shifts (DecodeSlot), giving e2m1 * 2^-126 (bf16 subnormals for 0 and 0.5); multiplied (bf16,
// exact) by the row's scale code expanded to s * 2^119 (ScaleBf16), an A operand holds e2m1 * s *
// 2^-7 exactly, and the product's float32 sum times G * 2^7 is the output.
#pragma once

#include <cstdint>
#include <cstring>

namespace ferry::kernels::nvfp4 {

inline constexpr int64_t kGroup = 16;      // values a scale (ModelOpt's group size)
inline constexpr int64_t kTileRows = 16;   // one mma's M
inline constexpr int64_t kTileCols = 256;  // four chunks of 64 columns
inline constexpr int64_t kChunkCols = 64;
inline constexpr int64_t kTileCodeBytes = 2048;
inline constexpr int64_t kTileBytes = 2304;  // codes + 256 bytes of scale codes
// A operand value = e2m1 * s * 2^kOperandExp; the output multiplies the sum by G * 2^-kOperandExp.
inline constexpr int kOperandExp = -7;
static_assert(kTileBytes == kTileCodeBytes + 32 * 8, "8 scale-code bytes a lane");
static_assert(kTileBytes % 16 == 0, "tiles start 16-byte aligned");

constexpr int64_t RowTiles(int64_t out) { return (out + kTileRows - 1) / kTileRows; }
constexpr int64_t ColTiles(int64_t in) { return (in + kTileCols - 1) / kTileCols; }
// Bytes of the packed matrix: the tiles, then a float32 a row tile, rounded up to 16.
constexpr int64_t PackedBytes(int64_t out, int64_t in) {
  return (RowTiles(out) * ColTiles(in) * kTileBytes + RowTiles(out) * 4 + 15) / 16 * 16;
}
constexpr int64_t RowScaleOffset(int64_t out, int64_t in) { return RowTiles(out) * ColTiles(in) * kTileBytes; }

// Where a code of the packed tile comes from. Word w (0..3) of lane l in chunk c holds four slots
// j (0..3), each two values h (0: the lower column) of one row: slot j is mma A register j of step
// w (row r + 8 (j % 2), columns 2 (2 w + j / 2) + h of the lane's group).
struct CodeSource {
  int row;  // within the tile
  int col;  // within the tile
};
constexpr CodeSource CodeSlotSource(int chunk, int lane, int word, int slot, int half) {
  const int p = 2 * word + slot / 2;
  return {lane / 4 + 8 * (slot % 2), static_cast<int>(kChunkCols) * chunk + 16 * (lane % 4) + 2 * p + half};
}
// The scale code byte b (0..7) of lane l: chunk and row within the tile.
constexpr CodeSource ScaleByteSource(int lane, int b) {
  const int chunk = 2 * (b / 4) + (b % 2);
  return {lane / 4 + 8 * ((b % 4) / 2), static_cast<int>(kChunkCols) * chunk + 16 * (lane % 4)};
}

// The bit of a word that holds bit `bit` (0: m, 1: e0, 2: e1, 3: sign) of the E2M1 code in slot j,
// half h. Slots 0-2 sit at the decoded positions shifted right by 3 j (sign 15, e1 e0 m at 8..6 in
// each 16-bit half); slot 3 fills the remaining bits (sign 14, e1 13, e0 11, m 10).
constexpr int CodeBit(int slot, int half, int bit) {
  constexpr int kSlot3[4] = {10, 11, 13, 14};
  const int pos = slot < 3 ? (bit == 3 ? 15 : 6 + bit) - 3 * slot : kSlot3[bit];
  return pos + 16 * half;
}
// Places a 4-bit E2M1 code in slot j, half h of a word.
constexpr uint32_t PlaceCode(uint8_t code, int slot, int half) {
  uint32_t bits = 0;
  for (int b = 0; b < 4; ++b) bits |= static_cast<uint32_t>((code >> b) & 1) << CodeBit(slot, half, b);
  return bits;
}
// Slot j of word q as a bf16 pair (low half: the lower column): sign at bit 15, e1 e0 m at 8..6,
// i.e. e2m1 * 2^-126 (a bf16 subnormal for the codes of 0 and 0.5).
constexpr uint32_t DecodeSlot(uint32_t q, int slot) {
  constexpr uint32_t kMask = 0x81C081C0u;
  if (slot == 0) return q & kMask;
  if (slot == 1) return (q << 3) & kMask;
  if (slot == 2) return (q << 6) & kMask;
  return ((q << 1) & 0x80008000u) | ((q >> 4) & 0x00C000C0u) | ((q >> 5) & 0x01000100u);
}

// The scale code of an E4M3 scale magnitude (its byte's low 7 bits; the packing folds a negative
// scale's sign into the codes and zeroes a zero scale's codes): s = 1.mmm * 2^E as (E + 22) << 3 |
// mmm, E in [-9, 8] (subnormal scales normalized); 0 for zero; 0xff for NaN (0x7f).
constexpr uint8_t ScaleCode(uint8_t e4m3) {
  const int mag = e4m3 & 0x7f;
  if (mag == 0x7f) return 0xff;
  if (mag == 0) return 0;
  int exp = mag >> 3, mant = mag & 7;
  int e = exp - 7;
  if (exp == 0) {  // m * 2^-9: normalize
    int top = 2;
    while (((mant >> top) & 1) == 0) --top;
    e = top - 9;
    mant = (mant << (3 - top)) & 7;
  }
  return static_cast<uint8_t>(((e + 22) << 3) | mant);
}
// The input's code at (r, c) of a ModelOpt weight of `rows` rows (codes [rows, in / 2], scales
// [rows, in / 16]), 0 outside it, with its group scale's sign folded in and zeroed under a zero
// scale (the packed value equals e2m1 * e4m3 either way); and the scale byte at (r, c), 0 outside.
constexpr uint8_t InputScale(const uint8_t* scales, int64_t rows, int64_t in, int64_t r, int64_t c) {
  return r >= 0 && r < rows && c < in ? scales[r * (in / kGroup) + c / kGroup] : 0;
}
constexpr uint8_t InputCode(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t in, int64_t r,
                            int64_t c) {
  const uint8_t s = InputScale(scales, rows, in, r, c);
  if ((s & 0x7f) == 0) return 0;  // a zero scale, or outside the input
  const uint8_t code = (codes[r * (in / 2) + c / 2] >> (4 * (c % 2))) & 0x0f;
  return (s & 0x80) != 0 ? code ^ 0x08 : code;
}

// Two scale codes at bytes 0 and 2 of `w` (`shift` 4), or 1 and 3 (`shift` -4), as a bf16 pair of
// s * 2^119 each: exponent field 224 + (E + 22) = E + 246, mantissa mmm. A code of 0xff is NaN;
// a code of 0 decodes to 2^97 (its group's codes are zero).
constexpr uint32_t ScaleBf16(uint32_t w, int shift) {
  const uint32_t moved = shift > 0 ? w << 4 : w >> 4;
  return (moved & 0x0FF00FF0u) | 0x70007000u;
}

// The walk every host packing into this tile geometry shares (cpu::PackNvfp4, cpu::PackW4A4):
// for each row tile holding rows [row0, row0 + rows) of the packed [out, in] matrix and each of
// its column tiles, fill(tile, r_base, c_base) writes the tile's kTileBytes (r_base: the input row
// of the tile's row 0, c_base: its first column); then the row tile's float32 global scale.
template <class Fill>
void PackTiles(float global_scale, int64_t rows, int64_t in, uint8_t* packed, int64_t out, int64_t row0, Fill fill) {
  const int64_t col_tiles = ColTiles(in);
  for (int64_t rt = row0 / kTileRows, rt1 = RowTiles(row0 + rows); rt < rt1; ++rt) {
    for (int64_t kt = 0; kt < col_tiles; ++kt) {
      fill(packed + (rt * col_tiles + kt) * kTileBytes, rt * kTileRows - row0, kt * kTileCols);
    }
    std::memcpy(packed + RowScaleOffset(out, in) + 4 * rt, &global_scale, 4);
  }
}

}  // namespace ferry::kernels::nvfp4
