// The pieces linear_fp8.cu (W8A16) and linear_w8a8.cu (W8A8) share: the block shape both
// grouped kernels use, the output tile's store, the packing kernel over a tile layout, and the
// host-side checks and launch loop of a grouped call. Internal to those two files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/mma.cuh"

namespace ferry::kernels::cuda::fp8 {

inline constexpr int kMulThreads = 256;   // warpgroups 0 and 1: 64 weight rows each
inline constexpr int kCopyThreads = 128;  // warpgroup 2: warp 8 copies W, warps 9-11 copy x
inline constexpr int kXCopyThreads = 96;
inline constexpr int kThreads = kMulThreads + kCopyThreads;
inline constexpr int kBlockOut = 128;   // weight rows a block: one scale block, one packed tile's rows
inline constexpr int kBlockRows = 128;  // x rows a block at most (wgmma's largest N used here)
inline constexpr int kMaxXStages = 32;  // x ring stages at most (few rows: many small stages)
inline constexpr int kMaxScales = 256;  // scale blocks along `in`: in <= 32768
inline constexpr int kMaxProblems = 256;
// GroupedLinearW8A8's problems a launch: a MoE layer's gate and up of every expert and the shared
// expert's in one (GLM-5.3-Flash: 2 x 289); 56 bytes each of the kernel's parameters (<= 32 KiB).
inline constexpr int kMaxProblems8 = 580;
inline constexpr int kOutRow = kBlockOut * 2 + 16;  // a row of the output tile in shared memory, bytes
static_assert(kFp8BlockRows == kBlockOut);

inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// f(std::integral_constant<int, N>{}) for the wgmma width N = n16 (16, 32, ..., 128; 128 past
// it): a block's rows, rounded up to 16, chosen at run time among the compiled widths.
template <typename F>
__device__ __forceinline__ void WithWidth(int n16, F&& f) {
  switch (n16 >> 4) {
    case 1: f(std::integral_constant<int, 16>{}); break;
    case 2: f(std::integral_constant<int, 32>{}); break;
    case 3: f(std::integral_constant<int, 48>{}); break;
    case 4: f(std::integral_constant<int, 64>{}); break;
    case 5: f(std::integral_constant<int, 80>{}); break;
    case 6: f(std::integral_constant<int, 96>{}); break;
    case 7: f(std::integral_constant<int, 112>{}); break;
    default: f(std::integral_constant<int, 128>{}); break;
  }
}

// The block's dynamic shared memory `raw` from its first 1024-byte boundary (the 128-byte
// swizzle's atoms are 1024 bytes): the shared address, and *smem the same place as a pointer.
__device__ __forceinline__ uint32_t AlignSmem1024(uint8_t* raw, uint8_t** smem) {
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  const uint32_t base = (at + 1023u) & ~1023u;
  *smem = raw + (base - at);
  return base;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The multiplying warpgroups' accumulators (d[4 j + e] = D[16 v + l / 4 + 8 (e / 2)][8 j +
// 2 (l % 4) + e % 2] of warpgroup g's 64 rows) -> y rows [0, nv) x columns [o0, o0 + 128) of a
// row-major bf16 matrix of `out` columns, row t at y + t * ldy (y + rows[t] * ldy with a row map):
// transposed through the `staging` tile (rows padded to 272 bytes), then 16-byte stores. kBlock: the whole block takes part (block barriers, all threads
// store); otherwise only the multiplying warpgroups call it (named barrier 1) while the copy
// warps run on. Starts and ends with its barrier.
template <bool kBlock>
__device__ __forceinline__ void StoreTile(const float (&d)[64], int n16, int nv, int tid, int o0, int out,
                                          int64_t ldy, uint8_t* staging, __nv_bfloat16* y,
                                          const int32_t* rows = nullptr) {
  auto sync = [] {
    if (kBlock) {
      __syncthreads();
    } else {
      ptx::NamedBarrier(1, kMulThreads);
    }
  };
  sync();  // the staging tile is free (the rings' last reads, or the previous item's stores)
  if (tid < kMulThreads) {
    const int wg = tid / 128, v = (tid % 128) / 32, l = tid % 32;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      if (8 * j < n16) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = wg * 64 + 16 * v + l / 4 + 8 * (e / 2), col = 8 * j + 2 * (l % 4) + (e % 2);
          *reinterpret_cast<__nv_bfloat16*>(staging + col * kOutRow + row * 2) =
              __float2bfloat16_rn(d[4 * j + e]);
        }
      }
    }
  }
  sync();
  const int threads = kBlock ? kThreads : kMulThreads;
  for (int c = tid; c < nv * (kBlockOut / 8); c += threads) {
    const int t = c / (kBlockOut / 8), ch = c % (kBlockOut / 8), o = o0 + ch * 8;
    if (o < out) {
      const int64_t row = rows != nullptr ? rows[t] : t;
      *reinterpret_cast<uint4*>(y + row * ldy + o) =
          *reinterpret_cast<const uint4*>(staging + t * kOutRow + ch * 16);
    }
  }
}
#endif

// Packs row-major E4M3 `w` [out, in] into tiles of kBlockOut x Layout::kCols bytes (ordered by
// row block then column block, zero outside): packed byte q of a tile comes from the tile's row
// and column that Layout::Source(q, &row, &col) names.
template <typename Layout>
__global__ void PackKernel(const uint8_t* w, int64_t out, int64_t in, int64_t bytes, uint8_t* packed) {
  constexpr int kTile = kBlockOut * Layout::kCols;
  const int64_t kb_count = (in + Layout::kCols - 1) / Layout::kCols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / kTile, ob = t / kb_count, kb = t % kb_count;
    int r = 0, c = 0;
    Layout::Source(static_cast<int>(i % kTile), &r, &c);
    const int64_t row = ob * kBlockOut + r, col = kb * Layout::kCols + c;
    packed[i] = row < out && col < in ? w[row * in + col] : 0;
  }
}

// The packed size of an [out, in] matrix in Layout's tiles.
template <typename Layout>
int64_t PackedBytes(int64_t out, int64_t in) {
  return (out + kBlockOut - 1) / kBlockOut * kBlockOut * ((in + Layout::kCols - 1) / Layout::kCols * Layout::kCols);
}

// PackKernel<Layout> with the argument checks (`name` for messages).
template <typename Layout>
absl::Status Pack(const char* name, const uint8_t* w, int64_t out, int64_t in, uint8_t* packed, void* stream) {
  if (out < 1 || in < 1 || w == nullptr || packed == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": a ", out, " x ", in, " matrix (or a null pointer)"));
  }
  const int64_t bytes = PackedBytes<Layout>(out, in);
  const int blocks = static_cast<int>(std::min<int64_t>((bytes + 255) / 256, 8192));
  PackKernel<Layout><<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(w, out, in, bytes, packed);
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

// The checks and launches the grouped kernels share: every problem with rows gets
// fill(slot, problem) in the launch's table (max_problems at a time), then launch(count, tiles).
// usable(problem) says whether its pointers are non-null and aligned.
template <typename Group, typename Usable, typename Fill, typename Launch>
absl::Status RunGrouped(const char* name, const Group* groups, int64_t n, int64_t in, int64_t out, int max_problems,
                        Usable usable, Fill fill, Launch launch) {
  if (n < 0 || in < 16 || in % 16 != 0 || out < 8 || out % 8 != 0 || in > kMaxScales * kFp8BlockCols ||
      out > INT_MAX / kBlockRows) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", n, " problems of in ", in, ", out ", out,
                                                   "; need in a multiple of 16 up to ", kMaxScales * kFp8BlockCols,
                                                   ", out a multiple of 8"));
  }
  int64_t max_rows = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (groups[i].rows < 0 || groups[i].rows > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": problem ", i, " has ", groups[i].rows, " rows"));
    }
    if (groups[i].rows == 0) continue;
    if (!usable(groups[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": problem ", i, " has a null pointer or a matrix not 16-byte aligned"));
    }
    max_rows = std::max(max_rows, groups[i].rows);
  }
  if (max_rows == 0) return absl::OkStatus();
  if (!GroupedLinearFp8Available()) {
    return absl::FailedPreconditionError(absl::StrCat(name, ": needs sm_90a code and a compute capability 9.0 device"));
  }
  const int tiles = static_cast<int>((max_rows + kBlockRows - 1) / kBlockRows);
  if (tiles > 65535) return absl::InvalidArgumentError(absl::StrCat(name, ": ", max_rows, " rows in one problem"));
  const int per_launch = std::min(max_problems, 65535 / tiles);
  int count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (groups[i].rows == 0) continue;
    fill(count, groups[i]);
    if (++count == per_launch) {
      FERRY_RETURN_IF_ERROR(launch(count, tiles));
      count = 0;
    }
  }
  if (count > 0) FERRY_RETURN_IF_ERROR(launch(count, tiles));
  return absl::OkStatus();
}

inline dim3 Grid(int64_t out, int count, int tiles) {
  return dim3(static_cast<unsigned>((out + kBlockOut - 1) / kBlockOut), static_cast<unsigned>(count * tiles));
}

// Sets the W8A8 kernel's shared-memory size on the current device: false when the device cannot
// give it (`optin` bytes a block at most). Defined in linear_w8a8.cu, called by
// GroupedLinearFp8Available.
bool SetUpW8A8Kernel(int optin);

}  // namespace ferry::kernels::cuda::fp8
