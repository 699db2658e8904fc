// NVFP4 decode products (gemv_nvfp4.h): a warp streams one row tile (16 rows) of the packed matrix
// over its slice of the column tiles, decodes each lane's 16-byte chunk in registers into the bf16
// A operands of four mma.m16n8k16 steps (kernels/nvfp4_layout.h: a mask and up to three shifts a
// pair, one bf16 multiply by the row's scale), and accumulates 8 input rows (one mma's N; four such
// sub-passes share a decode in the wide form) in float32 on the tensor cores: the work a weight
// costs does not grow with the rows of a pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemv_nvfp4.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_pairs.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/nvfp4_layout.h"
#include "kernels/nvfp4_mma_layout.h"

namespace ferry::kernels::cuda {
namespace {

namespace lay = ferry::kernels::nvfp4;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxSplit = 8;
constexpr int kPassRows = static_cast<int>(kNvfp4PassRows);
constexpr int kTileBytes = static_cast<int>(lay::kTileBytes);
constexpr int kAccs = 128;  // a warp's m16n8 float32 accumulators
static_assert(kPassRows == 8, "one mma's N");

// How many warps share a row tile's columns (1, 2, 4 or 8), from the shape alone (so an output's
// summation order never depends on the batch): the fewest that give `target` warps over the
// matrix, each slice keeping at least two column tiles (one in flight while the other is decoded).
int KSplit(int64_t in, int64_t out, int64_t target) {
  const int64_t col_tiles = lay::ColTiles(in), row_tiles = lay::RowTiles(out);
  int ks = 1;
  while (ks < kMaxSplit && row_tiles * ks < target && col_tiles / (2 * ks) >= 2) ks *= 2;
  return ks;
}
// The launch shape (gemv_nvfp4.h's Nvfp4GemvShape): warps wanted over one matrix (KSplit's
// target; a shape-only split keeps each kernel batch invariant), tiles in flight a warp, blocks an
// SM. Defaults from the H200 sweeps (bench/results/h200-nvfp4-experts.md): a MoE launch 512 warps
// a matrix (an expert's gate_up of 256 row tiles splits 2 ways, half its column tiles a warp; the
// step's experts fill the device), a lone GEMV 4096 (a dense MLP's 1536 row tiles split 4 ways:
// 768 blocks, about two waves); 2 tiles in flight, 3 blocks an SM: more blocks an SM beat deeper
// prefetch, in registers or in shared memory.
Nvfp4GemvShape g_shape;

struct Tile {
  uint4 code[4];  // chunk c: the lane's two rows' scale group
  uint2 scale;    // the scale codes of the 4 chunks (nvfp4_layout.h)
};

__device__ __forceinline__ Tile LoadTile(const uint8_t* tile, int lane) {
  Tile t;
  const uint4* c = reinterpret_cast<const uint4*>(tile) + lane;
#pragma unroll
  for (int i = 0; i < 4; ++i) t.code[i] = __ldcs(c + 32 * i);  // streamed once: evict first
  t.scale = __ldcs(reinterpret_cast<const uint2*>(tile + lay::kTileCodeBytes) + lane);
  return t;
}

// acc[p] += the tile's 16 rows times the lane's vector of sub-pass p over the tile's 256 columns
// (col0 = its first), for P sub-passes of 8 vectors sharing one decode of the weights. xrow[p]:
// the lane's vector (lane / 4) of sub-pass p, null past the pass's rows (zeros). An output's mma
// sequence (chunk, step) is the same whatever P or its sub-pass: P changes no bit.
template <int P>
__device__ __forceinline__ void MmaTile(const Tile& t, const __nv_bfloat16* const (&xrow)[P], int col0, int in,
                                        int lane, float (&acc)[P][4]) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const uint32_t s2 = lay::ScaleBf16(c < 2 ? t.scale.x : t.scale.y, (c & 1) != 0 ? -4 : 4);
    const uint32_t s_lo = __byte_perm(s2, 0, 0x1010), s_hi = __byte_perm(s2, 0, 0x3232);  // rows r, r + 8
    const uint32_t q[4] = {t.code[c].x, t.code[c].y, t.code[c].z, t.code[c].w};
    uint32_t a[4][4];  // step w's A registers
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      a[w][0] = ptx::MulBf16x2(lay::DecodeSlot(q[w], 0), s_lo);
      a[w][1] = ptx::MulBf16x2(lay::DecodeSlot(q[w], 1), s_hi);
      a[w][2] = ptx::MulBf16x2(lay::DecodeSlot(q[w], 2), s_lo);
      a[w][3] = ptx::MulBf16x2(lay::DecodeSlot(q[w], 3), s_hi);
    }
    // The lane's B fragments: x at its group's 16 columns (the layout's column permutation),
    // zero past `in` (a whole group is in or out: in % 16 == 0).
    const int k = col0 + static_cast<int>(lay::kChunkCols) * c + 16 * (lane & 3);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      uint4 xa = make_uint4(0, 0, 0, 0), xb = xa;
      if (xrow[p] != nullptr && k < in) {
        const uint4* xp = reinterpret_cast<const uint4*>(xrow[p] + k);
        xa = __ldg(xp);
        xb = __ldg(xp + 1);
      }
      const uint32_t xs[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) ptx::Mma(acc[p], a[w], xs[2 * w], xs[2 * w + 1]);
    }
  }
}

// acc += row tile `base` over column tiles [kt0, kt1) with D tiles in flight: a ring of D tiles in
// registers, tile kt + D loaded as tile kt is decoded.
template <int P, int D>
__device__ __forceinline__ void WarpTiles(const uint8_t* base, int kt0, int kt1,
                                          const __nv_bfloat16* const (&xrow)[P], int in, int lane, float (&acc)[P][4]) {
  Tile ring[D];
#pragma unroll
  for (int i = 0; i < D; ++i) {
    if (kt0 + i < kt1) ring[i] = LoadTile(base + static_cast<int64_t>(kt0 + i) * kTileBytes, lane);
  }
  for (int kt = kt0; kt < kt1; kt += D) {
#pragma unroll
    for (int i = 0; i < D; ++i) {
      if (kt + i < kt1) {
        const Tile cur = ring[i];
        if (kt + i + D < kt1) ring[i] = LoadTile(base + static_cast<int64_t>(kt + i + D) * kTileBytes, lane);
        MmaTile<P>(cur, xrow, (kt + i) * static_cast<int>(lay::kTileCols), in, lane, acc);
      }
    }
  }
}

// One block's product of the packed [out, in] matrix with `vectors` vectors, in passes of 8 P
// (the weights read once a pass): warp w takes row tile row_tile0 + w / ks and column slice w % ks
// (contiguous, in order); the ks slices' sums are added in slice order, so an output's value
// depends on its row, its vector and the shape (ks) only, not on P. xrow_of(v) is vector v's x
// row; store(row, v, value) is called once for each row < out and v < vectors with the output's
// value (the global scale applied). The block calls this uniformly.
template <int P, int D, typename XRow, typename Store>
__device__ __forceinline__ void BlockProduct(const uint8_t* packed, int in, int out, int ks, int vectors,
                                             XRow xrow_of, Store store) {
  __shared__ float partial[P][kWarps * kAccs];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row_tiles = static_cast<int>(lay::RowTiles(out)), col_tiles = static_cast<int>(lay::ColTiles(in));
  const int row_tile0 = static_cast<int>(blockIdx.x) * (kWarps / ks);
  const int rt = row_tile0 + warp / ks, slice = warp % ks;
  const int per = (col_tiles + ks - 1) / ks, kt0 = min(col_tiles, slice * per), kt1 = min(col_tiles, kt0 + per);
  const bool active = rt < row_tiles && kt0 < kt1;
  const uint8_t* base = packed + static_cast<int64_t>(rt) * col_tiles * kTileBytes;
  const float* row_scale = reinterpret_cast<const float*>(packed + lay::RowScaleOffset(out, in));
  for (int pass = 0; pass < vectors; pass += kPassRows * P) {
    const int v = lane >> 2;
    float acc[P][4];
    const __nv_bfloat16* xrow[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int vec = pass + kPassRows * p + v;
      xrow[p] = vec < vectors ? xrow_of(vec) : nullptr;
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[p][i] = 0.0f;
    }
    if (active) WarpTiles<P, D>(base, kt0, kt1, xrow, in, lane, acc);
#pragma unroll
    for (int p = 0; p < P; ++p) {
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[p][warp * kAccs + lane * 4 + i] = acc[p][i];
    }
    __syncthreads();
    const int sets = kWarps / ks;
    for (int idx = threadIdx.x; idx < P * sets * kAccs; idx += kThreads) {
      const int p = idx / (sets * kAccs), set = idx / kAccs % sets, e = idx % kAccs, t = row_tile0 + set;
      float total = 0.0f;
      for (int i = 0; i < ks; ++i) total += partial[p][(set * ks + i) * kAccs + e];
      // Accumulator e = 4 lane + i of the m16n8 fragment: row lane / 4 (+ 8 for i >= 2), column
      // (vector) 2 (lane % 4) + i % 2.
      const int el = e / 4, ci = e % 4;
      const int row = t * 16 + el / 4 + 8 * (ci >> 1), vec = pass + kPassRows * p + 2 * (el % 4) + (ci & 1);
      if (t < row_tiles && row < out && vec < vectors) {
        store(row, vec, total * (row_scale[t] * 128.0f));  // 2^-kOperandExp
      }
    }
    __syncthreads();  // partial is reused by the next pass
  }
}
static_assert(lay::kOperandExp == -7, "BlockProduct scales by 2^7");

// Passes a weight read: kWide of 8 vectors for many rows (more registers, fewer blocks an SM),
// one for a decode step's few.
constexpr int kWide = 4;
static_assert(kWide * kPassRows == kNvfp4WidePassRows, "gemv_nvfp4.h's wide pass");

// Block x: kWarps / ks row tiles; all rows of x in passes of 8 P. Waits for the kernels before it
// first: the weights may have been packed just before (a load, or the harness).
template <int P, int D, int MB>
__global__ void __launch_bounds__(kThreads, MB)
    GemvNvfp4Kernel(const __nv_bfloat16* __restrict__ x, int rows, int in, const uint8_t* __restrict__ packed,
                    int out, int ks, __nv_bfloat16* __restrict__ y) {
  PdlLaunchDependents();
  PdlWait();
  BlockProduct<P, D>(
      packed, in, out, ks, rows, [&](int v) { return x + static_cast<int64_t>(v) * in; },
      [&](int row, int v, float value) { y[static_cast<int64_t>(v) * out + row] = __float2bfloat16(value); });
}

// Block (x = kWarps / ks row tiles, y = a group): the group's pairs in passes of 8 P.
template <int P, int D, int MB>
__global__ void __launch_bounds__(kThreads, MB)
    MoeGemvNvfp4Kernel(const uint8_t* const* __restrict__ weights, MoePairs p, const __nv_bfloat16* __restrict__ x,
                       bool gather_x, int in, int out, int ks, __nv_bfloat16* __restrict__ y, bool scatter_y,
                       __nv_bfloat16* __restrict__ y_shared) {
  PdlLaunchDependents();
  PdlWait();
  const int g = blockIdx.y;
  if (g >= *p.n_groups) return;
  const int start = p.group_start[g], count = p.group_count[g];
  const uint8_t* packed = weights[p.group_expert[g]];
  BlockProduct<P, D>(
      packed, in, out, ks, count,
      [&](int v) {
        const int j = start + v;
        return x + static_cast<int64_t>(gather_x ? p.src_row[j] : j) * in;
      },
      [&](int row, int v, float value) {
        MoePairOutRow(p, start + v, scatter_y, y, y_shared, out)[row] = __float2bfloat16(value);
      });
}

// The forms built for one pass of 8 rows (Nvfp4GemvShape's depth and min_blocks); the first is
// the default. The wide pass has one (2 tiles in flight, 2 blocks an SM).
struct Form {
  int depth, min_blocks;
};
constexpr Form kForms[] = {{2, 3}, {2, 2}, {3, 2}, {4, 2}};
constexpr int kNumForms = sizeof(kForms) / sizeof(kForms[0]);
#define FERRY_NVFP4_FORMS(K) {K<1, 2, 3>, K<1, 2, 2>, K<1, 3, 2>, K<1, 4, 2>}

int FormIndex(const Nvfp4GemvShape& s) {
  for (int i = 0; i < kNumForms; ++i) {
    if (kForms[i].depth == s.depth && kForms[i].min_blocks == s.min_blocks) return i;
  }
  return -1;
}
int g_form = 0;  // kForms[g_form] is g_shape's
static_assert(kForms[0].depth == 2 && kForms[0].min_blocks == 3, "Nvfp4GemvShape's default");

// One thread a word of the packed tiles of row tiles [rt0, rt0 + n_row_tiles): the 512 code words
// of a tile, then its 64 scale-code words; word 0 of column tile 0 also writes the row tile's
// global scale. The same placement as cpu::PackNvfp4 (nvfp4_layout.h's helpers).
constexpr int kTileWords = lay::kTileBytes / 4;
__global__ void PackNvfp4Kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                                float global_scale, int rows, int in, uint8_t* __restrict__ packed, int out, int row0,
                                int rt0, int n_row_tiles) {
  const int col_tiles = static_cast<int>(lay::ColTiles(in));
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n_row_tiles) * col_tiles * kTileWords) return;
  const int64_t tile_idx = idx / kTileWords;
  const int wi = static_cast<int>(idx % kTileWords);
  const int rt = rt0 + static_cast<int>(tile_idx / col_tiles), kt = static_cast<int>(tile_idx % col_tiles);
  const int64_t r_base = static_cast<int64_t>(rt) * lay::kTileRows - row0, c_base = kt * lay::kTileCols;
  uint32_t* tile = reinterpret_cast<uint32_t*>(packed + (static_cast<int64_t>(rt) * col_tiles + kt) * kTileBytes);
  uint32_t q = 0;
  if (wi < lay::kTileCodeBytes / 4) {  // byte 4 wi = 512 chunk + 16 lane + 4 word
    const int chunk = wi / 128, lane = (wi % 128) / 4, word = wi % 4;
#pragma unroll
    for (int slot = 0; slot < 4; ++slot) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const lay::CodeSource s = lay::CodeSlotSource(chunk, lane, word, slot, half);
        q |= lay::PlaceCode(lay::InputCode(codes, scales, rows, in, r_base + s.row, c_base + s.col), slot, half);
      }
    }
  } else {  // byte 2048 + 4 sw = 2048 + 8 lane + 4 (b / 4)
    const int sw = wi - lay::kTileCodeBytes / 4, lane = sw / 2;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const lay::CodeSource s = lay::ScaleByteSource(lane, 4 * (sw % 2) + i);
      q |= static_cast<uint32_t>(lay::ScaleCode(lay::InputScale(scales, rows, in, r_base + s.row, c_base + s.col)))
           << (8 * i);
    }
  }
  tile[wi] = q;
  if (kt == 0 && wi == 0) {
    reinterpret_cast<float*>(packed + lay::RowScaleOffset(out, in))[rt] = global_scale;
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One thread a group of 16 (RoundActivationsW4A4): the scale and codes as the W4A4 quantizer
// (gemv_w4a4_sm121.cu's QuantizeKernel, the CPU twin) makes them, written back decoded. No
// fast-math: the divisions are IEEE and nothing contracts into an FMA.
__global__ void RoundActivationsW4A4Kernel(const __nv_bfloat16* x, int64_t groups, float input_scale,
                                           __nv_bfloat16* y) {
  PdlLaunchDependents();  // the product after it waits for all of this grid in its PdlWait
  PdlWait();              // x comes from the kernel before
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= groups) return;
  const __nv_bfloat16* v = x + idx * lay::kGroup;
  float f[lay::kGroup];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < lay::kGroup; ++i) {
    f[i] = __bfloat162float(v[i]);
    amax = fmaxf(amax, fabsf(f[i]));
  }
  const float g = 1.0f / input_scale;
  const __nv_fp8_storage_t sc = __nv_cvt_float_to_fp8(w4a4::ScaleTarget(amax, g), __NV_SATFINITE, __NV_E4M3);
  const float sf = __half2float(__half(__nv_cvt_fp8_to_halfraw(sc, __NV_E4M3)));
  const float r = w4a4::ValueMultiplier(sf, g);
  __nv_bfloat16* out = y + idx * lay::kGroup;
#pragma unroll
  for (int i = 0; i < lay::kGroup; ++i) {
    out[i] = __float2bfloat16_rn(static_cast<float>(w4a4::E2M1Twice(w4a4::E2M1Code(f[i] * r))) * 0.5f * sf);
  }
}

using GemvKernel = void (*)(const __nv_bfloat16*, int, int, const uint8_t*, int, int, __nv_bfloat16*);
using MoeKernel = void (*)(const uint8_t* const*, MoePairs, const __nv_bfloat16*, bool, int, int, int,
                           __nv_bfloat16*, bool, __nv_bfloat16*);
const GemvKernel kGemvForms[kNumForms] = FERRY_NVFP4_FORMS(GemvNvfp4Kernel);
const MoeKernel kMoeForms[kNumForms] = FERRY_NVFP4_FORMS(MoeGemvNvfp4Kernel);

}  // namespace

int64_t Nvfp4PackedBytes(int64_t out, int64_t in) { return lay::PackedBytes(out, in); }

std::vector<Nvfp4GemvShape> Nvfp4GemvForms() {
  std::vector<Nvfp4GemvShape> forms;
  const Nvfp4GemvShape base;
  for (const Form& f : kForms) forms.push_back({base.gemv_warp_target, base.moe_warp_target, f.depth, f.min_blocks});
  return forms;
}

absl::Status SetNvfp4GemvShape(const Nvfp4GemvShape& shape) {
  const int i = FormIndex(shape);
  if (i < 0 || shape.gemv_warp_target < 1 || shape.moe_warp_target < 1) {
    std::string built;
    for (const Form& f : kForms) absl::StrAppend(&built, built.empty() ? "" : ", ", f.depth, ":", f.min_blocks);
    return absl::InvalidArgumentError(absl::StrCat("SetNvfp4GemvShape: depth ", shape.depth, ", min_blocks ",
                                                   shape.min_blocks, ", warp targets ", shape.gemv_warp_target, " / ",
                                                   shape.moe_warp_target, " (built, depth:blocks: ", built,
                                                   "; targets >= 1)"));
  }
  g_shape = shape;
  g_form = i;
  return absl::OkStatus();
}

absl::Status PackNvfp4(const uint8_t* codes, const uint8_t* scales, float global_scale, int64_t rows, int64_t in,
                       uint8_t* packed, int64_t out, int64_t row0, void* stream) {
  if (in < 16 || in % 16 != 0 || in > INT32_MAX || rows < 1 || row0 < 0 || row0 % 16 != 0 || row0 + rows > out ||
      out > INT32_MAX || (rows % 16 != 0 && row0 + rows != out)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PackNvfp4: rows [", row0, ", ", row0 + rows, ") of ", out, " x ", in,
        " (need in a positive multiple of 16, rows >= 1, row0 a multiple of 16, the rows inside out, and a "
        "multiple of 16 rows unless they end at out)"));
  }
  if (codes == nullptr || scales == nullptr || packed == nullptr || !Aligned16(packed)) {
    return absl::InvalidArgumentError("PackNvfp4: null codes, scales or packed, or packed not 16-byte aligned");
  }
  const int64_t rt0 = row0 / lay::kTileRows, n_row_tiles = lay::RowTiles(row0 + rows) - rt0;
  const int64_t words = n_row_tiles * lay::ColTiles(in) * kTileWords, blocks = (words + 255) / 256;
  if (blocks > INT32_MAX) return absl::InvalidArgumentError(absl::StrCat("PackNvfp4: ", words, " words"));
  PackNvfp4Kernel<<<static_cast<unsigned>(blocks), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      codes, scales, global_scale, static_cast<int>(rows), static_cast<int>(in), packed, static_cast<int>(out),
      static_cast<int>(row0), static_cast<int>(rt0), static_cast<int>(n_row_tiles));
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status GemvNvfp4(const uint16_t* x, int64_t rows, int64_t in, const uint8_t* packed, int64_t out, uint16_t* y,
                       void* stream) {
  if (rows < 1 || rows > INT32_MAX || in < 16 || in % 16 != 0 || in > INT32_MAX || out < 1 || out > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("GemvNvfp4: rows ", rows, ", in ", in, ", out ", out,
                                                   " (need rows >= 1, in a positive multiple of 16, out >= 1)"));
  }
  if (x == nullptr || packed == nullptr || y == nullptr || !Aligned16(x) || !Aligned16(packed)) {
    return absl::InvalidArgumentError("GemvNvfp4: null x, packed or y, or x / packed not 16-byte aligned");
  }
  const int ks = KSplit(in, out, g_shape.gemv_warp_target), per_block = kWarps / ks;
  const int64_t blocks = (lay::RowTiles(out) + per_block - 1) / per_block;
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(rows > kPassRows ? GemvNvfp4Kernel<kWide, 2, 2> : kGemvForms[g_form],
                                             dim3(static_cast<unsigned>(blocks)), kThreads, 0,
                                             static_cast<cudaStream_t>(stream),
                                             reinterpret_cast<const __nv_bfloat16*>(x), static_cast<int>(rows),
                                             static_cast<int>(in), packed, static_cast<int>(out), ks,
                                             reinterpret_cast<__nv_bfloat16*>(y)));
  return absl::OkStatus();
}

absl::Status RoundActivationsW4A4(const uint16_t* x, int64_t rows, int64_t in, float input_scale, uint16_t* y,
                                  void* stream) {
  if (rows < 1 || rows > INT32_MAX || in < 16 || in % 16 != 0 || in > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("RoundActivationsW4A4: rows ", rows, ", in ", in,
                                                   " (need rows >= 1, in a positive multiple of 16)"));
  }
  if (!(input_scale > 0.0f) || !std::isfinite(input_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RoundActivationsW4A4: input_scale ", input_scale, " must be finite and > 0"));
  }
  if (x == nullptr || y == nullptr) return absl::InvalidArgumentError("RoundActivationsW4A4: null x or y");
  const int64_t groups = rows * (in / lay::kGroup), blocks = (groups + 255) / 256;
  if (blocks > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("RoundActivationsW4A4: ", rows, " x ", in, " is ", groups,
                                                   " groups of 16, more than one launch takes"));
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(RoundActivationsW4A4Kernel, dim3(static_cast<unsigned>(blocks)), 256, 0,
                                             static_cast<cudaStream_t>(stream),
                                             reinterpret_cast<const __nv_bfloat16*>(x), groups, input_scale,
                                             reinterpret_cast<__nv_bfloat16*>(y)));
  return absl::OkStatus();
}

absl::Status MoeGemvNvfp4(const uint8_t* const* weights, const MoePairs& p, int64_t max_groups,
                          int64_t max_group_pairs, const uint16_t* x, bool gather_x, int64_t in, int64_t out,
                          uint16_t* y, bool scatter_y, uint16_t* y_shared, void* stream) {
  if (in < 16 || in % 16 != 0 || in > INT32_MAX || out < 1 || out > INT32_MAX || max_groups < 0 ||
      max_groups > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("MoeGemvNvfp4: in ", in, ", out ", out, ", max_groups ",
                                                   max_groups, " (need in a positive multiple of 16, out >= 1, "
                                                   "max_groups <= 65535)"));
  }
  if (max_groups == 0) return absl::OkStatus();
  if (weights == nullptr || x == nullptr || y == nullptr || p.n_groups == nullptr ||
      (scatter_y && y_shared == nullptr)) {
    return absl::InvalidArgumentError("MoeGemvNvfp4: null weights, x, y, groups or (with scatter_y) y_shared");
  }
  if (!Aligned16(x)) return absl::InvalidArgumentError("MoeGemvNvfp4: x is not 16-byte aligned");
  const int ks = KSplit(in, out, g_shape.moe_warp_target), per_block = kWarps / ks;
  const dim3 grid(static_cast<unsigned>((lay::RowTiles(out) + per_block - 1) / per_block),
                  static_cast<unsigned>(max_groups));
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(
      max_group_pairs > kPassRows ? MoeGemvNvfp4Kernel<kWide, 2, 2> : kMoeForms[g_form], grid, kThreads, 0,
      static_cast<cudaStream_t>(stream), weights, p,
      reinterpret_cast<const __nv_bfloat16*>(x), gather_x, static_cast<int>(in), static_cast<int>(out), ks,
      reinterpret_cast<__nv_bfloat16*>(y), scatter_y, reinterpret_cast<__nv_bfloat16*>(y_shared)));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
