// NVFP4 products over many rows (gemv_nvfp4.h's LinearNvfp4): the packed matrix dequantized into
// bf16 tiles (DequantizeNvfp4: a thread decodes one lane's chunk of a tile, two rows of one scale
// group, as the decode products do in registers) and multiplied by cuBLAS with the part's global
// scale as its alpha, so that a prefill reads the packed weights once instead of once per 32 rows.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemv_nvfp4.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/options.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/nvfp4_layout.h"

namespace ferry::kernels::cuda {
namespace {

namespace lay = ferry::kernels::nvfp4;

constexpr int64_t kScratchCap = int64_t{16} << 20;
constexpr uint32_t kBf16x2Of128 = 0x43004300u;  // 2^7 in both halves: undoes the decode's 2^-7

// Where DequantizeKernel puts slot `slot` of word `word` of a lane's chunk: the row (0: the lane's
// row r, 1: r + 8) and the pair of columns within the lane's group of 16; checked below against the
// layout's own map (lay::CodeSlotSource), which the packers use.
constexpr int SlotRow(int slot) { return slot % 2; }
constexpr int SlotPair(int word, int slot) { return 2 * word + slot / 2; }
constexpr bool SlotPlacesMatchLayout() {
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int word = 0; word < 4; ++word) {
        for (int slot = 0; slot < 4; ++slot) {
          for (int half = 0; half < 2; ++half) {
            const lay::CodeSource s = lay::CodeSlotSource(chunk, lane, word, slot, half);
            if (s.row != lane / 4 + 8 * SlotRow(slot) ||
                s.col != lay::kChunkCols * chunk + 16 * (lane % 4) + 2 * SlotPair(word, slot) + half) {
              return false;
            }
          }
        }
      }
    }
  }
  return true;
}
static_assert(SlotPlacesMatchLayout(), "DequantizeKernel places the codes where the layout took them from");

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One thread a (row tile, column tile, chunk, lane) of the row tiles [rt0, ...): the lane's 16 code
// bytes (its two rows' scale group in that chunk) decoded as the products decode them (e2m1 * s *
// 2^-7, exact in bf16), times 2^7 (exact), written as the group's 16 columns of each of its two
// rows, those of rows [row0, row0 + rows) only.
__global__ void DequantizeKernel(const uint8_t* __restrict__ packed, int in, int col_tiles, int rt0, int64_t threads,
                                 int row0, int rows, __nv_bfloat16* __restrict__ w) {
  PdlLaunchDependents();
  PdlWait();  // the product before may still read w
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= threads) return;
  const int lane = static_cast<int>(idx % 32), chunk = static_cast<int>((idx / 32) % 4);
  const int64_t tile = idx / 128;
  const int rt = rt0 + static_cast<int>(tile / col_tiles), kt = static_cast<int>(tile % col_tiles);
  const int col = kt * static_cast<int>(lay::kTileCols) + static_cast<int>(lay::kChunkCols) * chunk + 16 * (lane % 4);
  if (col >= in) return;  // padding: in % 16 == 0, so a group is all inside or all outside
  const uint8_t* base = packed + (static_cast<int64_t>(rt) * col_tiles + kt) * lay::kTileBytes;
  const uint4 code = __ldcs(reinterpret_cast<const uint4*>(base) + 32 * chunk + lane);
  const uint2 sc = __ldg(reinterpret_cast<const uint2*>(base + lay::kTileCodeBytes) + lane);
  const uint32_t s2 = lay::ScaleBf16(chunk < 2 ? sc.x : sc.y, (chunk & 1) != 0 ? -4 : 4);
  const uint32_t scale[2] = {__byte_perm(s2, 0, 0x1010), __byte_perm(s2, 0, 0x3232)};  // rows r, r + 8
  const uint32_t q[4] = {code.x, code.y, code.z, code.w};
  uint32_t v[2][8];  // [row][column pair]
#pragma unroll
  for (int word = 0; word < 4; ++word) {
#pragma unroll
    for (int slot = 0; slot < 4; ++slot) {
      const uint32_t operand = ptx::MulBf16x2(lay::DecodeSlot(q[word], slot), scale[SlotRow(slot)]);
      v[SlotRow(slot)][SlotPair(word, slot)] = ptx::MulBf16x2(operand, kBf16x2Of128);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = rt * static_cast<int>(lay::kTileRows) + lane / 4 + 8 * h - row0;
    if (r >= rows) continue;
    uint4* dst = reinterpret_cast<uint4*>(w + static_cast<int64_t>(r) * in + col);
    dst[0] = make_uint4(v[h][0], v[h][1], v[h][2], v[h][3]);
    dst[1] = make_uint4(v[h][4], v[h][5], v[h][6], v[h][7]);
  }
}

}  // namespace

absl::Status DequantizeNvfp4(const uint8_t* packed, int64_t out, int64_t in, int64_t row0, int64_t rows, uint16_t* w,
                             void* stream) {
  if (in < 16 || in % 16 != 0 || in > INT32_MAX || row0 < 0 || row0 % 16 != 0 || rows < 1 || row0 + rows > out ||
      out > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("DequantizeNvfp4: rows [", row0, ", ", row0 + rows, ") of ", out,
                                                   " x ", in, " (need in a positive multiple of 16, row0 a multiple "
                                                   "of 16, rows >= 1, the rows inside out)"));
  }
  if (packed == nullptr || w == nullptr || !Aligned16(packed) || !Aligned16(w)) {
    return absl::InvalidArgumentError("DequantizeNvfp4: null packed or w, or either not 16-byte aligned");
  }
  const int64_t col_tiles = lay::ColTiles(in), rt0 = row0 / lay::kTileRows;
  const int64_t threads = (lay::RowTiles(row0 + rows) - rt0) * col_tiles * 128, blocks = (threads + 255) / 256;
  if (blocks > INT32_MAX) return absl::InvalidArgumentError(absl::StrCat("DequantizeNvfp4: ", threads, " threads"));
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(DequantizeKernel, dim3(static_cast<unsigned>(blocks)), 256, 0,
                                             static_cast<cudaStream_t>(stream), packed, static_cast<int>(in),
                                             static_cast<int>(col_tiles), static_cast<int>(rt0), threads,
                                             static_cast<int>(row0), static_cast<int>(rows),
                                             reinterpret_cast<__nv_bfloat16*>(w)));
  return absl::OkStatus();
}

int64_t Nvfp4GemmScratchBytes(int64_t out, int64_t in) {
  const int64_t tile = lay::kTileRows * in * 2;
  return std::max(tile, std::min(lay::RowTiles(out) * tile, kScratchCap / tile * tile));
}

absl::Status LinearNvfp4(const uint16_t* x, int64_t rows, int64_t in, const uint8_t* packed, int64_t out,
                         int64_t part_rows, uint16_t* scratch, int64_t scratch_bytes, uint16_t* y, void* stream) {
  if (part_rows < 1 || (part_rows < out && part_rows % lay::kTileRows != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("LinearNvfp4: parts of ", part_rows, " rows in ", out,
                                                   " (need whole 16-row tiles unless one part)"));
  }
  const int64_t tile_bytes = lay::kTileRows * in * 2;
  if (rows < GetKernelOptions().nvfp4_gemm_min_rows || scratch == nullptr || scratch_bytes < tile_bytes) {
    return GemvNvfp4(x, rows, in, packed, out, y, stream);
  }
  if (rows < 1 || rows > INT32_MAX || in < 16 || in % 16 != 0 || in > INT32_MAX || out < 1 || out > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("LinearNvfp4: rows ", rows, ", in ", in, ", out ", out,
                                                   " (need rows >= 1, in a positive multiple of 16, out >= 1)"));
  }
  if (x == nullptr || packed == nullptr || y == nullptr || !Aligned16(packed) || !Aligned16(scratch)) {
    return absl::InvalidArgumentError("LinearNvfp4: null x, packed or y, or packed / scratch not 16-byte aligned");
  }
  // Each part's global scale is that of its first row tile (all of its tiles hold the same).
  const float* global = reinterpret_cast<const float*>(packed + lay::RowScaleOffset(out, in));
  const int64_t piece = scratch_bytes / tile_bytes * lay::kTileRows;
  for (int64_t p0 = 0; p0 < out; p0 += part_rows) {
    const int64_t p1 = std::min(out, p0 + part_rows);
    for (int64_t r0 = p0; r0 < p1; r0 += piece) {
      const int64_t n = std::min(piece, p1 - r0);
      FERRY_RETURN_IF_ERROR(DequantizeNvfp4(packed, out, in, r0, n, scratch, stream));
      FERRY_RETURN_IF_ERROR(
          LinearBf16Scaled(x, rows, in, scratch, n, global + p0 / lay::kTileRows, y + r0, out, stream));
    }
  }
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
