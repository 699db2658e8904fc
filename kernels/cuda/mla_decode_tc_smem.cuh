// The shared-memory layout of the tensor-core MLA decode kernel and its address helpers: part of
// mla_decode_tc.cu (included by it alone, inside its anonymous namespace), kept apart from the
// kernel's code. See mla_decode_tc.cu's file comment for what each region holds when.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mla_decode_tc.h"

namespace ferry::kernels::cuda {
namespace {

constexpr int kLatent = 512;
constexpr int kTile = kMlaTcTile;
constexpr int kCluster = kMlaTcCluster;
constexpr int kMaxStages = 4;  // K/V ring: up to kStages tiles in flight (kStages - 1 beside the one computed)
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kDimsPerWarp = kLatent / kWarps;  // PV: latent columns a warp owns
constexpr int kOStride = kLatent + 8;           // bf16 a head row of the merge buffer (16-byte pad)
constexpr int kSStride = kTile + 4;             // float a head row of the S partials (16-byte pad)
constexpr int kSmemLimit = static_cast<int>(kMlaTcSmemBytes);  // 227 KiB, the sm_90 opt-in limit of a CTA
// The small form (kSmall): for devices whose opt-in shared memory a block is 99 KiB (sm_120 /
// sm_121: GB10), q is held in registers (each warp its A fragments) instead of shared memory,
// staged once through the last K/V stage, and two stages suffice (one tile in flight beside the
// one computed: a GB10 reads ~6 GB/s an SM).
constexpr int kSmallSmemLimit = 99 * 1024;
static_assert(kDimsPerWarp == 64, "PV loops assume 8 n-tiles of 8 columns a warp");
static_assert(kTile == 32, "S, the softmax and P assume 32-token tiles (4 n-tiles, 4 chunks a P row)");

// Shared memory of one CTA, byte offsets. Rows of Q and K/V are stored with their 16-byte chunks
// XOR-swizzled by (row & 7), so ldmatrix's eight row addresses hit distinct banks (Swz); P rows
// (64 B) by ((row >> 1) & 3) (PAddr).
//   S = Q K^T is computed by warp (head tile hs of MH heads, k-slice ks): every warp stores its
//   float32 partial [MH heads][32 tokens] into kPart[ks]; the softmax of heads [HT / 8 w, +HT / 8)
//   is done by warp w, which sums the kKSplit partials in ks order. P has its own region, so one
//   tile's S partials may be written while another warp still reads the previous tile's P:
//   two CTA barriers a tile.
template <int HT, int W, int MH, bool kSmall = false>
struct Smem {
  static constexpr int kLimit = kSmall ? kSmallSmemLimit : kSmemLimit;
  static constexpr int kTabTiles = kSmall ? 8 : 16;  // tiles whose row addresses are looked up at once
  static constexpr int kRowBytes = W * 2;
  static constexpr int kChunks = W / 8;
  static constexpr int kSTiles = HT / MH;
  static constexpr int kKSplit = kWarps / kSTiles;
  static constexpr int kSteps = W / 16;
  static constexpr int kStepsPerWarp = kSteps / kKSplit;
  static constexpr int kStage = kTile * kRowBytes;
  static constexpr int kPartBytes = kKSplit * HT * kSStride * 4;
  static constexpr int kQBytes = kSmall ? 0 : HT * kRowBytes;
  static constexpr int kFixed = kQBytes + kPartBytes + HT * 64 + 5 * HT * 4 + 64 + 16 + 8 * kMaxStages +
                                kTabTiles * kTile * 8;
  static constexpr int kStages = (kLimit - kFixed) / kStage < kMaxStages ? (kLimit - kFixed) / kStage : kMaxStages;
  static constexpr int kQ = 0;
  static constexpr int kKv = kQ + kQBytes;                 // kStages stages of kTile rows
  static constexpr int kPart = kKv + kStages * kStage;     // [kKSplit][HT][kSStride] float
  static constexpr int kP = kPart + kPartBytes;            // [HT][32] bf16, swizzled (PAddr)
  static constexpr int kTab = kP + HT * 64;                // [kTabTiles * kTile] int64 row offsets
  static constexpr int kCorr = kTab + kTabTiles * kTile * 8;  // [HT]
  static constexpr int kRecvM = kCorr + HT * 4;            // merge: [K][HT / K] maxima
  static constexpr int kRecvL = kRecvM + HT * 4;           // merge: [K][HT / K] sums
  static constexpr int kWgt = kRecvL + HT * 4;             // merge: [HT / K][K] weights
  static constexpr int kInv = kWgt + HT * 4;               // merge: [HT / K]
  static constexpr int kFlags = kInv + 64;                 // [0] bad selection, [1] bad anywhere in the cluster
  static constexpr int kFull = kFlags + 16;                // [kStages] mbarriers: stage s landed
  static constexpr int kBytes = kFull + 8 * kMaxStages;
  // After the tiles the merge receives K bf16 partials of HT / K heads each, [HT][kOStride] in
  // all, into q and the K/V stages.
  static_assert(HT * kOStride * 2 <= kPart - kQ, "merge buffer fits in q and the stages");
  static_assert(kKSplit >= 2 && kSteps % kKSplit == 0, "S k-slices");
  static_assert(kStages >= (kSmall ? 2 : 3), "tiles in flight beside the one computed");
  static_assert(!kSmall || (HT == kTile && kStage >= HT * kRowBytes), "q is staged through one stage");
  static_assert(kTabTiles * kTile % kThreads == 0, "whole table entries a thread");
  static_assert(kChunks % 8 == 0, "the swizzle stays inside a row");
  static_assert(kFull % 8 == 0, "mbarrier alignment");
  static_assert(kBytes <= kLimit, "shared memory of a CTA");
};

__device__ __forceinline__ uint32_t Swz(int row, int chunk, int row_bytes) {
  return static_cast<uint32_t>(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}
// P row h (32 bf16 = 4 chunks of 16 bytes), byte offset inside kP.
__device__ __forceinline__ uint32_t PAddr(int h, int chunk) {
  return static_cast<uint32_t>(h * 64 + ((chunk ^ ((h >> 1) & 3)) << 4));
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace
}  // namespace ferry::kernels::cuda
