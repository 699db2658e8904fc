// GroupedLinearW8A8 and its decode form GroupedLinearW8A8Moe (linear_fp8.h): the W8A8 block-FP8
// product of the FP8 releases, on the warpgroup tensor cores of sm_90a (e4m3 x e4m3 wgmma); the
// activation quantization before it is quantize_fp8.cu's. The block shape, the copy roles and the
// output store are GroupedLinearFp8's (linear_fp8_shared.cuh); here the weight tiles
// (pre-swizzled) and the quantized rows go to wgmma as they are, and the blocks are persistent.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/linear_fp8_shared.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace ferry::kernels::cuda {

namespace {

using namespace fp8;  // NOLINT: the shared block shape

constexpr int kStep8 = 128;          // a W8A8 step: one 128 x 128 tile, one scale group of x
constexpr int kW8Stages = 6;         // 16 KiB tiles in flight
constexpr int kX8Bytes = 72 * 1024;  // the x ring: stages of n16max rows of 128 bytes + their scales
static_assert(kStep8 == kFp8BlockCols);
// Registers a thread after setmaxnreg: the copy warpgroup gives most of its launch share (168)
// to the multiplying warpgroups, whose two 64-value accumulators at width 128 need more than it.
constexpr int kCopyRegs = 56, kMulRegs = 224;
static_assert(kXCopyThreads % 8 == 0);
// The pool is the launch's share: 384 threads x 168 registers (__launch_bounds__(384, 1)); an
// increase past it would wait forever.
static_assert(kThreads == 384 && 2 * 128 * kMulRegs + 128 * kCopyRegs <= kThreads * (65536 / kThreads / 8 * 8));

// The W8A8 block's shared memory: the x ring, the W ring, the output tile of the item just
// finished (its own, so the rings keep streaming the next item meanwhile), the mbarriers.
struct Smem8 {
  static constexpr int kTile = kBlockOut * kStep8;
  static constexpr int kWAt = kX8Bytes;
  static constexpr int kOutAt = kWAt + kW8Stages * kTile;
  static constexpr int kBarAt = kOutAt + (kBlockRows * kOutRow + 1023) / 1024 * 1024;
  static constexpr int kBars = 2 * kMaxXStages + 2 * kW8Stages;
  static constexpr int kBytes = kBarAt + 8 * kBars + 1024;
};
static_assert(Smem8::kWAt % 1024 == 0 && Smem8::kOutAt % 1024 == 0);
static_assert(kX8Bytes >= 4 * (kBlockRows * kStep8 + 1024));

// A launch's problems, kCap at most: 56 bytes a problem.
template <int kCap>
struct ProblemsT {
  int first_tile[kCap];  // the problem's first tile (N rows) among all problems' tiles
  const uint8_t* qx[kCap];
  const float* sx[kCap];
  const uint8_t* w[kCap];
  const float* scale[kCap];
  __nv_bfloat16* y[kCap];
  int rows[kCap];
  int y_row0[kCap];  // >= 0: rows land through the call's row map from there
  int x_row0[kCap];  // >= 0: row t is row x_rows[x_row0 + t] of qx / sx (the call's x row map)
};
using Problems8 = ProblemsT<kMaxProblems8>;  // GroupedLinearW8A8's: the kernel's parameter
static_assert(sizeof(Problems8) + 64 <= 32764, "a kernel's parameters are at most 32764 bytes");
// GroupedLinearW8A8Moe's, built on the device (BuildMoeProblemsKernel): every (expert group,
// part) of a routing, one tile each.
constexpr int kMaxMoeProblems8 = 2 * (kMoeMaxExperts + 1);
struct MoeProblems8 {
  int count, items;
  ProblemsT<kMaxMoeProblems8> p;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// One step's four k32 steps of E4M3 wgmma at width N into d (overwritten). A k32 step moves
// both operands 32 bytes along K: 2 in a descriptor's address field (16-byte units; shared
// addresses stay far below its 2^18-byte range, so no carry leaves it).
template <int N>
__device__ __forceinline__ void StepMma8(float (&d)[64], uint32_t a, uint32_t b) {
  const uint64_t da = wgmma::Desc(a, 16, 1024), db = wgmma::Desc(b, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kStep8 / 32; ++kk) wgmma::WgmmaM64NK32E4M3<N>(d, da + 2 * kk, db + 2 * kk, kk);
}
#endif

// The W8A8 kernel: persistent blocks, each taking items (problem, N-row tile, 128-column block
// of out) in turn, item = blockIdx.x + k gridDim.x, the column blocks of one tile consecutive (its
// x stays in L2). The roles and rings of the W8A16 kernel, but the W tile (16 KiB, pre-swizzled)
// and the x rows (E4M3, with their group scales) go to wgmma as they are: no widening; the rings
// run on across items, so the next item's tiles stream in while one is finished and stored. A
// step's product lands in `part`, and acc += part * (w scale * x scale of the column) once done.
struct Item8 {
  int prob, tile, ob;
};
template <typename P>
__device__ __forceinline__ Item8 DecodeItem(const P& p, int count, int obs, int item) {
  const int pt = item / obs;
  int lo = 0, hi = count - 1;  // the last problem whose first tile is <= pt
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.first_tile[mid] <= pt) lo = mid; else hi = mid - 1;
  }
  return {lo, pt - p.first_tile[lo], item % obs};
}

// The multiplying warpgroups' ring positions, carried across items: the x stage and its phase,
// the W tiles consumed so far.
struct MulRings {
  int xs, x_phase, g;
};

// A block's shared memory at launch width N: the x ring's stages (N rows of 128 bytes, swizzled,
// then the rows' scales; 1 KiB keeps alignment) and the rings' mbarriers.
struct Block8 {
  uint32_t base;  // shared address, 1024-aligned
  uint8_t* smem;  // the same place
  int x_rows_bytes, x_stage_bytes, x_stages;
  uint32_t x_full, x_empty, w_full, w_empty;
};
__device__ __forceinline__ Block8 LayOutBlock8(uint8_t* raw, int N) {
  Block8 b;
  b.base = AlignSmem1024(raw, &b.smem);
  b.x_rows_bytes = N * 128;
  b.x_stage_bytes = b.x_rows_bytes + 1024;
  b.x_stages = min(kMaxXStages, kX8Bytes / b.x_stage_bytes);
  b.x_full = b.base + Smem8::kBarAt;
  b.x_empty = b.x_full + 8 * kMaxXStages;
  b.w_full = b.x_empty + 8 * kMaxXStages;
  b.w_empty = b.w_full + 8 * kW8Stages;
  return b;
}

// The multiplying warpgroups' share of one item at wgmma width N (the item's nv <= N rows rounded
// up, WithItemWidth; its tile `it.tile` of the launch's tiles of tile_rows; the product's columns
// past nv discarded): each step's product into `part`, then acc += part * (w scale * x scale of
// the column), then the tile's store. N is a template parameter so that no step branches on the
// width: a run-time choice inside the step loop makes ptxas serialize the wgmmas (C7520).
template <int N, typename P>
__device__ __forceinline__ void MultiplyItem(const P& p, const Item8& it, int nv, int tile_rows, int steps,
                                             int out, int64_t ldy, const int32_t* y_rows, int tid, const Block8& b,
                                             MulRings& r) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const int wg = tid / 128, l = tid % 32;
  const uint32_t base = b.base, x_full = b.x_full, x_empty = b.x_empty, w_full = b.w_full, w_empty = b.w_empty;
  const int x_stage_bytes = b.x_stage_bytes, x_stages = b.x_stages, x_rows_bytes = b.x_rows_bytes;
  uint8_t* const smem = b.smem;
  const float* const wscale = p.scale[it.prob] + static_cast<size_t>(it.ob) * steps;
  float acc[64], part[64];  // N / 2 of each in use
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
  // A step waits for its own product before scaling it (ptxas serializes the wgmmas of a
  // warpgroup that reads one product while the next is in flight, C7514); the two warpgroups
  // overlap each other instead.
  for (int kt = 0; kt < steps; ++kt, ++r.g) {
    const int ws = r.g % kW8Stages;
    const float s_w = __ldg(wscale + kt);
    ptx::MbarWait(x_full + 8 * r.xs, r.x_phase);
    ptx::MbarWait(w_full + 8 * ws, (r.g / kW8Stages) & 1);
    wgmma::ProxyFence();
    wgmma::Fence();
    const uint32_t stage = base + static_cast<uint32_t>(r.xs * x_stage_bytes);
    const uint32_t a = base + static_cast<uint32_t>(Smem8::kWAt + ws * Smem8::kTile + wg * 64 * 128);
    StepMma8<N>(part, a, stage);
    wgmma::Commit();
    wgmma::Wait<0>();
    ptx::MbarArrive(w_empty + 8 * ws);
    // Columns 8 j + 2 (l % 4) + {0, 1} of the thread's accumulator: one 8-byte load of their
    // x scales a j. All N columns, also past the item's rows (a run-time bound here made the
    // kernel 14% slower at 2k tokens, 20% at 8k: measured).
    const float* scale_x = reinterpret_cast<const float*>(smem + r.xs * x_stage_bytes + x_rows_bytes) + 2 * (l % 4);
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      const float2 sx = *reinterpret_cast<const float2*>(scale_x + 8 * j);
      const float s0 = s_w * sx.x, s1 = s_w * sx.y;
      acc[4 * j] += part[4 * j] * s0;
      acc[4 * j + 1] += part[4 * j + 1] * s1;
      acc[4 * j + 2] += part[4 * j + 2] * s0;
      acc[4 * j + 3] += part[4 * j + 3] * s1;
    }
    ptx::MbarArrive(x_empty + 8 * r.xs);
    if (++r.xs == x_stages) r.xs = 0, r.x_phase ^= 1;
  }
  const int row0 = p.y_row0[it.prob];
  if (y_rows != nullptr && row0 >= 0) {
    StoreTile<false>(acc, N, nv, tid, it.ob * kBlockOut, out, ldy, smem + Smem8::kOutAt, p.y[it.prob],
                     y_rows + row0 + it.tile * tile_rows);
  } else {
    StoreTile<false>(acc, N, nv, tid, it.ob * kBlockOut, out, ldy, smem + Smem8::kOutAt,
                     p.y[it.prob] + static_cast<size_t>(it.tile) * tile_rows * ldy);
  }
#endif
}

// f(std::integral_constant<int, W>{}) for the wgmma width W of an item of nv <= N rows in a launch
// of width N: nv rounded up to a multiple of 32, at most N. The x ring keeps the launch's layout
// (N rows a stage); a narrower item only multiplies, scales and stores fewer columns.
template <int N, typename F>
__device__ __forceinline__ void WithItemWidth(int nv, F&& f) {
  if constexpr (N > 32) {
    if (nv <= 32) return f(std::integral_constant<int, 32>{});
  }
  if constexpr (N > 64) {
    if (nv <= 64) return f(std::integral_constant<int, 64>{});
  }
  if constexpr (N > 96) {
    if (nv <= 96) return f(std::integral_constant<int, 96>{});
  }
  f(std::integral_constant<int, N>{});
}

// The W8A8 block's work over the problems p (count of them, items items; x_rows / y_rows the
// row maps of problems with x_row0 / y_row0 >= 0). Called by the two kernels below.
template <int N, typename P>
__device__ __forceinline__ void GroupedW8A8Block(const P& p, int count, int items, int in, int out, int scale_stride,
                                                 int64_t ldy, const int32_t* x_rows, const int32_t* y_rows) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const int obs = (out + kBlockOut - 1) / kBlockOut, steps = (in + kStep8 - 1) / kStep8;
  const int tid = static_cast<int>(threadIdx.x);
  extern __shared__ uint8_t smem_raw[];
  const Block8 b = LayOutBlock8(smem_raw, N);
  const uint32_t base = b.base, x_full = b.x_full, x_empty = b.x_empty, w_full = b.w_full, w_empty = b.w_empty;
  const int x_stage_bytes = b.x_stage_bytes, x_stages = b.x_stages, x_rows_bytes = b.x_rows_bytes;
  if (tid == 0) {
    for (int i = 0; i < x_stages; ++i) ptx::MbarInit(x_full + 8 * i, kXCopyThreads);
    for (int i = 0; i < x_stages; ++i) ptx::MbarInit(x_empty + 8 * i, kMulThreads);
    for (int i = 0; i < kW8Stages; ++i) ptx::MbarInit(w_full + 8 * i, 1);
    for (int i = 0; i < kW8Stages; ++i) ptx::MbarInit(w_empty + 8 * i, kMulThreads);
    ptx::MbarInitFence();
  }
  __syncthreads();

  if (tid >= kMulThreads) {
    wgmma::DecMaxRegs<kCopyRegs>();
    const int ct = tid - kMulThreads;
    if (ct == 0) {
      int g = 0;  // W tiles copied so far (all items)
      for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x)) {
        const Item8 it = DecodeItem(p, count, obs, item);
        const uint8_t* w = p.w[it.prob] + static_cast<size_t>(it.ob) * steps * Smem8::kTile;
        for (int kt = 0; kt < steps; ++kt, ++g) {
          const int st = g % kW8Stages;
          if (g >= kW8Stages) ptx::MbarWait(w_empty + 8 * st, ((g / kW8Stages) - 1) & 1);
          ptx::MbarArriveExpectTx(w_full + 8 * st, Smem8::kTile);
          ptx::BulkCopy(base + static_cast<uint32_t>(Smem8::kWAt + st * Smem8::kTile),
                        w + static_cast<size_t>(kt) * Smem8::kTile, Smem8::kTile, w_full + 8 * st);
        }
      }
    } else if (ct >= 32) {
      const int xt = ct - 32;
      int st = 0, phase = 0, g = 0;
      for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x)) {
        const Item8 it = DecodeItem(p, count, obs, item);
        const int nv = min(p.rows[it.prob] - it.tile * N, N), n16 = (nv + 15) & ~15;
        // Row r of the item: row xmap[r] of qx / sx through the call's x map, else row tile N + r.
        const int32_t* xmap =
            x_rows != nullptr && p.x_row0[it.prob] >= 0 ? x_rows + p.x_row0[it.prob] + it.tile * N : nullptr;
        const uint8_t* x = p.qx[it.prob] + (xmap != nullptr ? 0 : static_cast<size_t>(it.tile) * N * in);
        const float* sx = p.sx[it.prob] + (xmap != nullptr ? 0 : static_cast<size_t>(it.tile) * N);
        for (int kt = 0; kt < steps; ++kt, ++g) {
          if (g >= x_stages) ptx::MbarWait(x_empty + 8 * st, phase ^ 1);
          const uint32_t stage = base + static_cast<uint32_t>(st * x_stage_bytes);
          const int k0 = kt * kStep8;
          // The item's rows rounded up to 16 (zeros past nv and past `in`); the stage's rows past
          // them keep what an earlier step left there: they only reach the product's columns
          // past nv, which nothing stores. Thread xt copies chunk xt % 8 of every 12th row from
          // row xt / 8 (kXCopyThreads / 8 rows a pass), so only the row changes from copy to copy.
          const int ch = xt & 7, k = k0 + ch * 16;
          const uint8_t* src = x + static_cast<size_t>(xt >> 3) * in + k;
          for (int r = xt >> 3; r < n16; r += kXCopyThreads / 8, src += static_cast<size_t>(kXCopyThreads / 8) * in) {
            const bool ok = r < nv && k < in;
            const uint8_t* at = xmap != nullptr && ok ? x + static_cast<size_t>(__ldg(xmap + r)) * in + k : src;
            ptx::CpAsync16(stage + r * 128 + ((ch ^ (r & 7)) << 4), ok ? static_cast<const void*>(at) : x,
                           ok ? 16 : 0);
          }
          for (int r = xt; r < n16; r += kXCopyThreads) {
            const bool ok = r < nv;
            const int64_t row = xmap != nullptr && ok ? __ldg(xmap + r) : r;
            ptx::CpAsync4(stage + x_rows_bytes + 4 * r,
                          ok ? static_cast<const void*>(sx + static_cast<size_t>(kt) * scale_stride + row) : sx,
                          ok ? 4 : 0);
          }
          ptx::CpAsyncMbarArrive(x_full + 8 * st);
          if (++st == x_stages) st = 0, phase ^= 1;
        }
      }
    }
  } else {
    wgmma::IncMaxRegs<kMulRegs>();
    MulRings r{0, 0, 0};
    for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x)) {
      const Item8 it = DecodeItem(p, count, obs, item);
      const int nv = min(p.rows[it.prob] - it.tile * N, N);
      WithItemWidth<N>(nv, [&](auto w) {
        MultiplyItem<decltype(w)::value>(p, it, nv, N, steps, out, ldy, y_rows, tid, b, r);
      });
    }
  }
#endif
}

template <int N>
__global__ void __launch_bounds__(kThreads, 1)
    GroupedLinearW8A8Kernel(const __grid_constant__ Problems8 p, int count, int items, int in, int out,
                            int scale_stride, int64_t ldy, const int32_t* y_rows) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  GroupedW8A8Block<N>(p, count, items, in, out, scale_stride, ldy, nullptr, y_rows);
#else
  __trap();  // built without sm_90a: GroupedLinearFp8Available is false, nothing launches this
#endif
}

// GroupedLinearW8A8Moe's: the problems from BuildMoeProblemsKernel (one tile each).
template <int N>
__global__ void __launch_bounds__(kThreads, 1)
    GroupedLinearW8A8MoeKernel(const MoeProblems8* __restrict__ mp, int in, int out, int scale_stride, int64_t ldy,
                               const int32_t* x_rows, const int32_t* y_rows) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  GroupedW8A8Block<N>(mp->p, mp->count, mp->items, in, out, scale_stride, ldy, x_rows, y_rows);
#else
  __trap();  // built without sm_90a: GroupedLinearFp8Available is false, nothing launches this
#endif
}

// GroupedLinearW8A8Moe's problem list: problem g n_parts + k is part k of group g (one tile of
// the launch width N). A group of more than N pairs (a routing that picked an expert twice in a
// row) keeps its first N and sets bit 2 of *error. One block.
struct MoePartTables {
  const uint8_t* const* packed[2];
  const float* const* scales[2];
};
__global__ void BuildMoeProblemsKernel(MoePartTables t, int n_parts, MoePairs pairs, int n_experts, const uint8_t* qx,
                                       const float* sx, bool gather_x, int in, int out, __nv_bfloat16* y,
                                       int64_t y_stride, bool scatter_y, __nv_bfloat16* y_shared, int N,
                                       int32_t* error, MoeProblems8* __restrict__ mp) {
  const int groups = *pairs.n_groups, obs = (out + kBlockOut - 1) / kBlockOut;
  for (int i = static_cast<int>(threadIdx.x); i < groups * n_parts; i += static_cast<int>(blockDim.x)) {
    const int g = i / n_parts, k = i % n_parts;
    const int e = pairs.group_expert[g], start = pairs.group_start[g];
    ProblemsT<kMaxMoeProblems8>& p = mp->p;
    p.first_tile[i] = i;
    p.rows[i] = min(pairs.group_count[g], N);
    if (pairs.group_count[g] > N && error != nullptr) atomicOr(error, 2);
    p.w[i] = t.packed[k][e];
    p.scale[i] = t.scales[k][e];
    p.qx[i] = gather_x ? qx : qx + static_cast<int64_t>(start) * in;
    p.sx[i] = gather_x ? sx : sx + start;
    p.x_row0[i] = gather_x ? start : -1;
    if (!scatter_y) {
      p.y[i] = y + static_cast<int64_t>(start) * y_stride + k * out;
      p.y_row0[i] = -1;
    } else if (e < n_experts) {
      p.y[i] = y + k * out;
      p.y_row0[i] = start;
    } else {  // the shared group: pairs of rows 0, 1, ... in order
      p.y[i] = y_shared + k * out;
      p.y_row0[i] = -1;
    }
  }
  if (threadIdx.x == 0) {
    mp->count = groups * n_parts;
    mp->items = groups * n_parts * obs;
  }
}

// PackFp8W8A8's tiles: 128 x 128 bytes, row r's 16-byte chunk c at r * 128 + 16 (c ^ (r % 8))
// (the 128-byte swizzle wgmma reads).
struct W8A8Layout {
  static constexpr int kCols = 128;
  __host__ __device__ static void Source(int q, int* row, int* col) {
    *row = q / 128;
    *col = (((q % 128) / 16) ^ (*row & 7)) * 16 + q % 16;
  }
};

// The kernel of each launch width N = 16 (i + 1): a launch's problems share the tile rows and the
// x ring's layout (LaunchWidth); each item multiplies at its own width (WithItemWidth).
using W8A8Kernel = void (*)(Problems8, int, int, int, int, int, int64_t, const int32_t*);
constexpr W8A8Kernel kW8A8Kernels[kBlockRows / 16] = {
    GroupedLinearW8A8Kernel<16>, GroupedLinearW8A8Kernel<32>, GroupedLinearW8A8Kernel<48>,
    GroupedLinearW8A8Kernel<64>, GroupedLinearW8A8Kernel<80>, GroupedLinearW8A8Kernel<96>,
    GroupedLinearW8A8Kernel<112>, GroupedLinearW8A8Kernel<128>};
using W8A8MoeKernel = void (*)(const MoeProblems8*, int, int, int, int64_t, const int32_t*, const int32_t*);
constexpr W8A8MoeKernel kW8A8MoeKernels[kBlockRows / 16] = {
    GroupedLinearW8A8MoeKernel<16>, GroupedLinearW8A8MoeKernel<32>, GroupedLinearW8A8MoeKernel<48>,
    GroupedLinearW8A8MoeKernel<64>, GroupedLinearW8A8MoeKernel<80>, GroupedLinearW8A8MoeKernel<96>,
    GroupedLinearW8A8MoeKernel<112>, GroupedLinearW8A8MoeKernel<128>};

}  // namespace

bool fp8::SetUpW8A8Kernel(int optin) {
  if (optin < Smem8::kBytes) return false;
  for (W8A8Kernel k : kW8A8Kernels) {
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, Smem8::kBytes) != cudaSuccess) {
      return false;
    }
  }
  for (W8A8MoeKernel k : kW8A8MoeKernels) {
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, Smem8::kBytes) != cudaSuccess) {
      return false;
    }
  }
  return true;
}

int64_t Fp8W8A8PackedBytes(int64_t out, int64_t in) { return fp8::PackedBytes<W8A8Layout>(out, in); }

absl::Status PackFp8W8A8(const uint8_t* w, int64_t out, int64_t in, uint8_t* packed, void* stream) {
  return fp8::Pack<W8A8Layout>("PackFp8W8A8", w, out, in, packed, stream);
}

namespace {

bool Usable8(const LinearGroupW8A8& g) {
  return g.qx != nullptr && g.sx != nullptr && g.w != nullptr && g.scale != nullptr && g.y != nullptr &&
         Aligned16(g.qx) && Aligned16(g.w) && Aligned16(g.y);
}

// The launch width N (rows a tile, 16..128): the most rows of a problem, rounded up to 16, at most
// 128. A tile streams its problem's whole weight matrix once, so no problem below 128 rows is cut
// (measured before per-item widths: GLM-5.2's 2k-token experts ran 10% slower at 80 rows a tile
// than at 96); each item multiplies at its own rows' width (WithItemWidth), so the narrow experts
// of a launch with a few wide ones (a skewed routing, the shared expert) no longer pay for those.
int LaunchWidth(const LinearGroupW8A8* groups, int64_t n) {
  int64_t most = 1;
  for (int64_t i = 0; i < n; ++i) most = std::max(most, groups[i].rows);
  return static_cast<int>(std::min<int64_t>(kBlockRows, (most + 15) / 16 * 16));
}

// GroupedLinearW8A8 at launch width N, the arguments checked.
absl::Status GroupedLinearW8A8Launches(const LinearGroupW8A8* groups, int64_t n, int64_t in, int64_t out,
                                       int64_t scale_stride, int64_t y_stride, const int32_t* y_rows, int N,
                                       void* stream) {
  Problems8 pr{};
  int64_t tiles_so_far = 0;
  return RunGrouped(
      "GroupedLinearW8A8", groups, n, in, out, kMaxProblems8, Usable8,
      [&](int slot, const LinearGroupW8A8& g) {
        pr.first_tile[slot] = static_cast<int>(tiles_so_far);
        tiles_so_far += (g.rows + N - 1) / N;
        pr.qx[slot] = g.qx;
        pr.sx[slot] = g.sx;
        pr.w[slot] = g.w;
        pr.scale[slot] = g.scale;
        pr.y[slot] = reinterpret_cast<__nv_bfloat16*>(g.y);
        pr.rows[slot] = static_cast<int>(g.rows);
        pr.y_row0[slot] = static_cast<int>(g.y_row0);
        pr.x_row0[slot] = -1;
      },
      [&](int count, int) -> absl::Status {
        const int64_t items = tiles_so_far * ((out + kBlockOut - 1) / kBlockOut);
        tiles_so_far = 0;
        if (items > INT_MAX) return absl::InvalidArgumentError(absl::StrCat("GroupedLinearW8A8: ", items, " items"));
        int device = 0, sms = 0;
        FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
        FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        const unsigned grid = static_cast<unsigned>(std::min<int64_t>(items, sms));
        kW8A8Kernels[N / 16 - 1]<<<grid, kThreads, Smem8::kBytes, static_cast<cudaStream_t>(stream)>>>(
            pr, count, static_cast<int>(items), static_cast<int>(in), static_cast<int>(out),
            static_cast<int>(scale_stride), y_stride, y_rows);
        FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
        return absl::OkStatus();
      });
}

}  // namespace

absl::Status GroupedLinearW8A8(const LinearGroupW8A8* groups, int64_t n, int64_t in, int64_t out, int64_t scale_stride,
                               int64_t y_stride, const int32_t* y_rows, void* stream) {
  if (y_stride < out || y_stride % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("GroupedLinearW8A8: a y row stride of ", y_stride, " for ", out,
                                                   " columns; need at least that, a multiple of 8"));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (groups[i].rows > scale_stride) {
      return absl::InvalidArgumentError(absl::StrCat("GroupedLinearW8A8: problem ", i, " has ", groups[i].rows,
                                                     " rows, past the scale stride ", scale_stride));
    }
    if (groups[i].y_row0 < -1 || groups[i].y_row0 > INT_MAX - groups[i].rows ||
        (groups[i].y_row0 >= 0 && y_rows == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat("GroupedLinearW8A8: problem ", i, " has a row-map start of ",
                                                     groups[i].y_row0, y_rows == nullptr ? " but no row map" : ""));
    }
  }
  if (scale_stride > INT_MAX) return absl::InvalidArgumentError("GroupedLinearW8A8: scale stride past INT_MAX");
  return GroupedLinearW8A8Launches(groups, n, in, out, scale_stride, y_stride, y_rows, LaunchWidth(groups, n),
                                   stream);
}

const int64_t kGroupedW8A8MoeScratchBytes = (sizeof(MoeProblems8) + 255) / 256 * 256;

absl::Status GroupedLinearW8A8Moe(const W8A8ExpertTable* parts, int n_parts, const MoePairs& pairs, int64_t max_rows,
                                  int64_t n_experts, const uint8_t* qx, const float* sx, int64_t scale_stride,
                                  bool gather_x, int64_t in, int64_t out, uint16_t* y, int64_t y_stride,
                                  bool scatter_y, uint16_t* y_shared, void* scratch, int32_t* error,
                                  void* stream) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("GroupedLinearW8A8Moe: ", why));
  };
  if (n_parts < 1 || n_parts > 2 || parts == nullptr) return bad(absl::StrCat(n_parts, " parts (1 or 2)"));
  for (int k = 0; k < n_parts; ++k) {
    if (parts[k].packed == nullptr || parts[k].scales == nullptr) return bad(absl::StrCat("part ", k, " has no table"));
  }
  if (max_rows < 1 || max_rows > kGroupedW8A8MoeMaxRows) {
    return bad(absl::StrCat(max_rows, " rows a group at most (1 to ", kGroupedW8A8MoeMaxRows, ")"));
  }
  if (n_experts < 1 || n_experts > kMoeMaxExperts) return bad(absl::StrCat(n_experts, " experts"));
  if (in < 16 || in % 16 != 0 || in > kMaxScales * kFp8BlockCols || out < 8 || out % 8 != 0) {
    return bad(absl::StrCat("in ", in, ", out ", out, "; need in a multiple of 16 up to ", kMaxScales * kFp8BlockCols,
                            ", out a multiple of 8"));
  }
  if (y_stride < n_parts * out || y_stride % 8 != 0) {
    return bad(absl::StrCat("a y row stride of ", y_stride, " for ", n_parts, " x ", out, " columns"));
  }
  if (scale_stride < 1 || scale_stride > INT_MAX) return bad(absl::StrCat("a scale stride of ", scale_stride));
  if (qx == nullptr || sx == nullptr || y == nullptr || scratch == nullptr || !Aligned16(qx) || !Aligned16(y) ||
      !Aligned16(scratch) || (scatter_y && (y_shared == nullptr || !Aligned16(y_shared)))) {
    return bad("a null or misaligned (16 bytes) qx, sx, y, y_shared (with scatter_y) or scratch");
  }
  if (!GroupedLinearFp8Available()) {
    return absl::FailedPreconditionError("GroupedLinearW8A8Moe: needs sm_90a code and a compute capability 9.0 device");
  }
  MoePartTables t{};
  for (int k = 0; k < n_parts; ++k) {
    t.packed[k] = parts[k].packed;
    t.scales[k] = parts[k].scales;
  }
  auto* mp = static_cast<MoeProblems8*>(scratch);
  auto* st = static_cast<cudaStream_t>(stream);
  const int N = static_cast<int>((max_rows + 15) / 16 * 16);
  BuildMoeProblemsKernel<<<1, 256, 0, st>>>(t, n_parts, pairs, static_cast<int>(n_experts), qx, sx, gather_x,
                                            static_cast<int>(in), static_cast<int>(out),
                                            reinterpret_cast<__nv_bfloat16*>(y), y_stride, scatter_y,
                                            reinterpret_cast<__nv_bfloat16*>(y_shared), N, error, mp);
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  int device = 0, sms = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  kW8A8MoeKernels[N / 16 - 1]<<<sms, kThreads, Smem8::kBytes, st>>>(
      mp, static_cast<int>(in), static_cast<int>(out), static_cast<int>(scale_stride), y_stride,
      gather_x ? pairs.src_row : nullptr, scatter_y ? pairs.order : nullptr);
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
