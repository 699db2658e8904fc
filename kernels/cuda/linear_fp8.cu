// GroupedLinearFp8 (linear_fp8.h): the experts' GEMMs with the weights kept E4M3 on the device,
// on the warpgroup tensor cores of sm_90a.
//
// A block owns 128 weight rows (one scale block: one scale an `in` step) and up to 128 x rows of
// one problem, so the product is D [128 x n] = W [128 x in] · X [n x in]^T with the weights as
// wgmma's M side and the rows as its N side (n = the rows rounded up to 16: an expert's few rows
// waste little of the instruction). Roles, handing 64-wide `in` steps over through mbarriers:
//  - warp 8 streams the packed fp8 W tiles (one sequential 8 KiB bulk copy a step, up to 12
//    steps ahead: HBM latency); warps 9-11 copy the x rows by cp.async, swizzled for wgmma, into
//    as many stages as fit in 96 KiB (6 at 128 rows, 32 at 16 or fewer);
//  - warpgroups 0 and 1 own 64 weight rows each: a thread reads its 32 packed bytes of a step
//    (the packing puts them in the order of wgmma's A register fragments), widens them in
//    registers to bf16 times the block scale (exactly the loader's upcast), and multiplies with A
//    from registers while the next step is widened.
// The whole `in` of a row is summed in one block, so a row's bits do not depend on the other rows
// or problems. Measured on the H200 (bench/results/h200-fp8-experts.md): the multiplying warps'
// widening (about 190 instructions a warp a step, half of them conversions) and their waits for
// x bound a block, not the HBM stream.
#include "kernels/cuda/linear_fp8.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace ferry::kernels::cuda {

namespace {

constexpr int kMulThreads = 256;     // warpgroups 0 and 1: 64 weight rows each
constexpr int kCopyThreads = 128;    // warpgroup 2: warp 8 copies W, warps 9-11 copy x
constexpr int kXCopyThreads = 96;
constexpr int kThreads = kMulThreads + kCopyThreads;
constexpr int kBlockOut = 128;       // weight rows a block: one scale block, one packed tile's rows
constexpr int kBlockRows = 128;      // x rows a block at most (wgmma's largest N used here)
constexpr int kXChunks = (kBlockRows * 8 + kXCopyThreads - 1) / kXCopyThreads;  // 16-byte x chunks a copy thread
constexpr int kStep = 64;            // the `in` slice of a step: one packed tile, one 128-byte bf16 row
constexpr int kWStages = 12;         // packed W tiles in flight
constexpr int kXBytes = 96 * 1024;   // the x ring: as many stages of n16 rows as fit, up to 32
constexpr int kMaxXStages = 32;
constexpr int kMaxScales = 256;      // scale blocks along `in` a block keeps: in <= 32768
constexpr int kMaxProblems = 256;
static_assert(kFp8BlockCols % kStep == 0 && kFp8BlockRows == kBlockOut);
static_assert(kFp8TileRows == kBlockOut && kFp8TileCols == kStep && kBlockOut * kStep == kMulThreads * 32);

// Shared memory, from a 1024-byte-aligned base: the x ring (stages of [n16 x 64] bf16, swizzled,
// each a multiple of 1024 bytes), the packed W ring (kWStages x 8 KiB), the mbarriers, the
// block's scales. After the loop the rings hold the output tile [rows][128] bf16 (rows padded to
// 272 bytes).
struct Smem {
  static constexpr int kW8 = kBlockOut * kStep;
  static constexpr int kWAt = kXBytes;
  static constexpr int kBarAt = kWAt + kWStages * kW8;
  static constexpr int kBars = 2 * kMaxXStages + 2 * kWStages;
  static constexpr int kScaleAt = kBarAt + 8 * kBars;
  static constexpr int kBytes = kScaleAt + 4 * kMaxScales + 1024;  // + the alignment slack
  static constexpr int kOutRow = kBlockOut * 2 + 16;
};
static_assert(Smem::kWAt % 1024 == 0 && kXBytes >= kBlockRows * kStep * 2 * 4);
static_assert(kBlockRows * Smem::kOutRow <= Smem::kBarAt);

// One launch's problems (a kernel parameter: 9 KiB, under the 32 KiB limit of CUDA 12.1+).
struct Problems {
  const __nv_bfloat16* x[kMaxProblems];
  const uint8_t* w[kMaxProblems];
  const float* scale[kMaxProblems];
  __nv_bfloat16* y[kMaxProblems];
  int rows[kMaxProblems];
};

// Two E4M3 values (low byte first) -> bf16x2 of value * s, rounded to nearest even: E4M3 -> f16
// is exact, so the product is float(e4m3) * s as the loader computes it.
__device__ __forceinline__ uint32_t Widen2(uint32_t pair, float s) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * s, f.y * s);
  return *reinterpret_cast<const uint32_t*>(&b);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// One step's four k16 steps of wgmma at width N, A from the registers a[4 kk ...].
template <int N>
__device__ __forceinline__ void StepMma(float (&d)[64], const uint32_t (&a)[16], uint32_t b) {
#pragma unroll
  for (int kk = 0; kk < kStep / 16; ++kk) {
    const uint32_t frag[4] = {a[4 * kk], a[4 * kk + 1], a[4 * kk + 2], a[4 * kk + 3]};
    wgmma::WgmmaM64NKRegA<N>(d, frag, wgmma::Desc(b + kk * 32, 16, 1024), 1);
  }
}
__device__ __forceinline__ void StepMmaN(int n16, float (&d)[64], const uint32_t (&a)[16], uint32_t b) {
  switch (n16 >> 4) {
    case 1: StepMma<16>(d, a, b); break;
    case 2: StepMma<32>(d, a, b); break;
    case 3: StepMma<48>(d, a, b); break;
    case 4: StepMma<64>(d, a, b); break;
    case 5: StepMma<80>(d, a, b); break;
    case 6: StepMma<96>(d, a, b); break;
    case 7: StepMma<112>(d, a, b); break;
    default: StepMma<128>(d, a, b); break;
  }
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The multiplying warpgroups' accumulators (d[4 j + e] = D[16 v + l / 4 + 8 (e / 2)][8 j +
// 2 (l % 4) + e % 2] of warpgroup g's 64 rows) -> y rows [0, nv) x columns [o0, o0 + 128) of a
// row-major [rows][out] bf16 matrix: transposed through the `staging` tile (rows padded to 272
// bytes), then 16-byte stores. kBlock: the whole block takes part (block barriers, all threads
// store); otherwise only the multiplying warpgroups call it (named barrier 1) while the copy
// warps run on. Starts and ends with its barrier.
template <bool kBlock>
__device__ __forceinline__ void StoreTile(const float (&d)[64], int n16, int nv, int tid, int o0, int out,
                                          uint8_t* staging, __nv_bfloat16* y) {
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
          *reinterpret_cast<__nv_bfloat16*>(staging + col * Smem::kOutRow + row * 2) =
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
      *reinterpret_cast<uint4*>(y + static_cast<size_t>(t) * out + o) =
          *reinterpret_cast<const uint4*>(staging + t * Smem::kOutRow + ch * 16);
    }
  }
}
#endif

__global__ void __launch_bounds__(kThreads, 1)
    GroupedLinearFp8Kernel(const __grid_constant__ Problems p, int tiles, int in, int out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const int prob = static_cast<int>(blockIdx.y) / tiles, tile = static_cast<int>(blockIdx.y) % tiles;
  const int left = p.rows[prob] - tile * kBlockRows;
  if (left <= 0) return;
  const int nv = min(left, kBlockRows), n16 = (nv + 15) & ~15;
  const int steps = (in + kStep - 1) / kStep, scale_cols = (in + kFp8BlockCols - 1) / kFp8BlockCols;
  const int ob = static_cast<int>(blockIdx.x), o0 = ob * kBlockOut;
  const __nv_bfloat16* x = p.x[prob] + static_cast<size_t>(tile) * kBlockRows * in;
  const uint8_t* w = p.w[prob] + static_cast<size_t>(ob) * steps * Smem::kW8;
  const float* scale = p.scale[prob] + static_cast<size_t>(ob) * scale_cols;
  const int tid = static_cast<int>(threadIdx.x);
  // The x ring: a stage holds n16 rows of 128 bytes (the swizzle repeats every 8 rows).
  const int x_stage_bytes = n16 * 128, x_stages = min(kMaxXStages, kXBytes / x_stage_bytes);

  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (base - raw);
  // mbarriers: x_full (a stage's x copies landed: the copy threads' arrivals), x_empty (both
  // multiplying warpgroups' wgmma are done with it: their threads' arrivals), w_full (a packed
  // tile landed: one arrival with its byte count), w_empty (every multiplying thread has read it).
  const uint32_t x_full = base + Smem::kBarAt, x_empty = x_full + 8 * kMaxXStages;
  const uint32_t w_full = x_empty + 8 * kMaxXStages, w_empty = w_full + 8 * kWStages;
  float* scales = reinterpret_cast<float*>(smem + Smem::kScaleAt);
  for (int i = tid; i < scale_cols; i += kThreads) scales[i] = scale[i];
  if (tid == 0) {
    for (int i = 0; i < x_stages; ++i) ptx::MbarInit(x_full + 8 * i, kXCopyThreads);
    for (int i = 0; i < x_stages; ++i) ptx::MbarInit(x_empty + 8 * i, kMulThreads);
    for (int i = 0; i < kWStages; ++i) ptx::MbarInit(w_full + 8 * i, 1);
    for (int i = 0; i < kWStages; ++i) ptx::MbarInit(w_empty + 8 * i, kMulThreads);
    ptx::MbarInitFence();
  }
  __syncthreads();

  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.0f;

  if (tid >= kMulThreads) {
    // The copy warps, each its own ring (a thread's cp.async arrival waits for all its earlier
    // copies, so one thread copying both would tie the rings together). Step kt's packed tile:
    // one 8 KiB bulk copy by lane 0 of warp 8 once the multipliers have read the tile kWStages
    // steps back. Step kt's x rows (zero past the rows and past `in`, n16 rows of 8 chunks):
    // every thread of warps 9 and 10 its share, then its arrival.
    const int ct = tid - kMulThreads;
    if (ct == 0) {
      for (int kt = 0; kt < steps; ++kt) {
        const int st = kt % kWStages;
        if (kt >= kWStages) ptx::MbarWait(w_empty + 8 * st, ((kt / kWStages) - 1) & 1);
        ptx::MbarArriveExpectTx(w_full + 8 * st, Smem::kW8);
        ptx::BulkCopy(base + static_cast<uint32_t>(Smem::kWAt + st * Smem::kW8),
                      w + static_cast<size_t>(kt) * Smem::kW8, Smem::kW8, w_full + 8 * st);
      }
    } else if (ct >= 32) {
      // Each copy thread's chunks are the same every step (n16 rows x 8 chunks over 96 threads).
      const int xt = ct - 32;
      const __nv_bfloat16* src[kXChunks];
      uint32_t dst[kXChunks];
      int col[kXChunks];
      bool row_ok[kXChunks], mine[kXChunks];
#pragma unroll
      for (int j = 0; j < kXChunks; ++j) {
        const int c = xt + j * kXCopyThreads, r = c >> 3, ch = c & 7;
        mine[j] = c < n16 * 8;
        row_ok[j] = r < nv;
        col[j] = ch * 8;
        src[j] = row_ok[j] ? x + static_cast<size_t>(r) * in + ch * 8 : p.x[prob];
        dst[j] = static_cast<uint32_t>(r * 128 + ((ch ^ (r & 7)) << 4));
      }
      int st = 0, phase = 0;
      for (int kt = 0; kt < steps; ++kt) {
        if (kt >= x_stages) ptx::MbarWait(x_empty + 8 * st, phase ^ 1);
        const uint32_t stage = base + static_cast<uint32_t>(st * x_stage_bytes);
        const int k0 = kt * kStep;
#pragma unroll
        for (int j = 0; j < kXChunks; ++j) {
          if (!mine[j]) continue;
          const bool ok = row_ok[j] && k0 + col[j] < in;
          ptx::CpAsync16(stage + dst[j], ok ? static_cast<const void*>(src[j] + k0) : p.x[prob], ok ? 16 : 0);
        }
        ptx::CpAsyncMbarArrive(x_full + 8 * st);
        if (++st == x_stages) st = 0, phase ^= 1;
      }
    }
  } else {
    // The multipliers. Thread t's 32 packed bytes of a step are its A fragments for the four
    // k16 steps (4 bytes = 4 values a register pair, PackFp8's order).
    auto widen = [&](int kt, uint32_t (&a)[16]) {
      const int st = kt % kWStages;
      ptx::MbarWait(w_full + 8 * st, (kt / kWStages) & 1);
      const uint4* src = reinterpret_cast<const uint4*>(smem + Smem::kWAt + st * Smem::kW8 + tid * 32);
      const uint4 lo = src[0], hi = src[1];
      ptx::MbarArrive(w_empty + 8 * st);
      const float s = scales[(kt * kStep) / kFp8BlockCols];
      const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        a[2 * i] = Widen2(words[i], s);
        a[2 * i + 1] = Widen2(words[i] >> 16, s);
      }
    };
    // One step: multiply step kt (A in a_now), then widen step kt + 1 into a_next while it runs.
    // xs / x_phase: step kt's x stage and its phase parity; prev_xs: step kt - 1's stage.
    int xs = 0, x_phase = 0, prev_xs = -1;
    auto step = [&](int kt, uint32_t (&a_now)[16], uint32_t (&a_next)[16]) {
      ptx::MbarWait(x_full + 8 * xs, x_phase);
      wgmma::ProxyFence();
      wgmma::Fence();
      StepMmaN(n16, d, a_now, base + static_cast<uint32_t>(xs * x_stage_bytes));
      wgmma::Commit();
      wgmma::Wait<1>();  // step kt - 1's wgmma is done: its x stage and its registers (a_next) are free
      if (prev_xs >= 0) ptx::MbarArrive(x_empty + 8 * prev_xs);
      prev_xs = xs;
      if (++xs == x_stages) xs = 0, x_phase ^= 1;
      if (kt + 1 < steps) widen(kt + 1, a_next);
    };
    uint32_t a0[16], a1[16];
    widen(0, a0);
    int kt = 0;
    for (; kt + 1 < steps; kt += 2) {
      step(kt, a0, a1);
      step(kt + 1, a1, a0);
    }
    if (kt < steps) step(kt, a0, a1);
    wgmma::Wait<0>();
  }
  StoreTile<true>(d, n16, nv, tid, o0, out, smem, p.y[prob] + static_cast<size_t>(tile) * kBlockRows * out);
#else
  __trap();  // built without sm_90a: GroupedLinearFp8Available is false, nothing launches this
#endif
}

// Where packed byte q of a tile comes from: thread t = q / 32 of the multipliers (warpgroup
// g = t / 128, warp v, lane l), k16 step kk, fragment element e (registers a[e / 2] of the
// mma.m16n8k16 A layout): row 64 g + 16 v + l / 4 + 8 ((e / 2) % 2), column
// 16 kk + 2 (l % 4) + e % 2 + 8 (e / 4).
__host__ __device__ inline void PackedSource(int q, int* row, int* col) {
  const int t = q / 32, kk = (q % 32) / 8, e = q % 8, g = t / 128, v = (t % 128) / 32, l = t % 32;
  *row = 64 * g + 16 * v + l / 4 + 8 * ((e / 2) % 2);
  *col = 16 * kk + 2 * (l % 4) + e % 2 + 8 * (e / 4);
}

__global__ void PackFp8Kernel(const uint8_t* w, int64_t out, int64_t in, int64_t bytes, uint8_t* packed) {
  const int64_t kb_count = (in + kStep - 1) / kStep;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / Smem::kW8, ob = t / kb_count, kb = t % kb_count;
    int r = 0, c = 0;
    PackedSource(static_cast<int>(i % Smem::kW8), &r, &c);
    const int64_t row = ob * kBlockOut + r, col = kb * kStep + c;
    packed[i] = row < out && col < in ? w[row * in + col] : 0;
  }
}

// ---- W8A8 ----

constexpr int kStep8 = 128;          // a W8A8 step: one 128 x 128 tile, one scale group of x
constexpr int kW8Stages = 6;         // 16 KiB tiles in flight
constexpr int kX8Bytes = 72 * 1024;  // the x ring: stages of n16max rows of 128 bytes + their scales
static_assert(kStep8 == kFp8BlockCols);

// The W8A8 block's shared memory: the x ring, the W ring, the output tile of the item just
// finished (its own, so the rings keep streaming the next item meanwhile), the mbarriers.
struct Smem8 {
  static constexpr int kTile = kBlockOut * kStep8;
  static constexpr int kWAt = kX8Bytes;
  static constexpr int kOutAt = kWAt + kW8Stages * kTile;
  static constexpr int kBarAt = kOutAt + (kBlockRows * Smem::kOutRow + 1023) / 1024 * 1024;
  static constexpr int kBars = 2 * kMaxXStages + 2 * kW8Stages;
  static constexpr int kBytes = kBarAt + 8 * kBars + 1024;
};
static_assert(Smem8::kWAt % 1024 == 0 && Smem8::kOutAt % 1024 == 0);
static_assert(kX8Bytes >= 4 * (kBlockRows * kStep8 + 1024));

struct Problems8 {
  int first_tile[kMaxProblems];  // the problem's first 128-row tile among all problems' tiles
  const uint8_t* qx[kMaxProblems];
  const float* sx[kMaxProblems];
  const uint8_t* w[kMaxProblems];
  const float* scale[kMaxProblems];
  __nv_bfloat16* y[kMaxProblems];
  int rows[kMaxProblems];
};

// 4 bytes global -> shared (cp.async.ca), zero-filled when src_bytes is 0.
__device__ __forceinline__ void CpAsync4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// One step's four k32 steps of E4M3 wgmma at width N into d (overwritten).
template <int N>
__device__ __forceinline__ void StepMma8(float (&d)[64], uint32_t a, uint32_t b) {
#pragma unroll
  for (int kk = 0; kk < kStep8 / 32; ++kk) {
    wgmma::WgmmaM64NK32E4M3<N>(d, wgmma::Desc(a + kk * 32, 16, 1024), wgmma::Desc(b + kk * 32, 16, 1024), kk);
  }
}
__device__ __forceinline__ void StepMma8N(int n16, float (&d)[64], uint32_t a, uint32_t b) {
  switch (n16 >> 4) {
    case 1: StepMma8<16>(d, a, b); break;
    case 2: StepMma8<32>(d, a, b); break;
    case 3: StepMma8<48>(d, a, b); break;
    case 4: StepMma8<64>(d, a, b); break;
    case 5: StepMma8<80>(d, a, b); break;
    case 6: StepMma8<96>(d, a, b); break;
    case 7: StepMma8<112>(d, a, b); break;
    default: StepMma8<128>(d, a, b); break;
  }
}
#endif

// The W8A8 kernel: persistent blocks, each taking items (problem, 128-row tile, 128-column block
// of out) in turn, item = blockIdx.x + k gridDim.x, the column blocks of one tile consecutive (its
// x stays in L2). The roles and rings of the W8A16 kernel, but the W tile (16 KiB, pre-swizzled)
// and the x rows (E4M3, with their group scales) go to wgmma as they are: no widening; the rings
// run on across items, so the next item's tiles stream in while one is finished and stored. A
// step's product lands in `part`, and acc += part * (w scale * x scale of the column) once done.
struct Item8 {
  int prob, tile, ob;
};
__device__ __forceinline__ Item8 DecodeItem(const Problems8& p, int count, int obs, int item) {
  const int pt = item / obs;
  int lo = 0, hi = count - 1;  // the last problem whose first tile is <= pt
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.first_tile[mid] <= pt) lo = mid; else hi = mid - 1;
  }
  return {lo, pt - p.first_tile[lo], item % obs};
}

__global__ void __launch_bounds__(kThreads, 1)
    GroupedLinearW8A8Kernel(const __grid_constant__ Problems8 p, int count, int items, int n16max, int in, int out,
                            int scale_stride) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const int obs = (out + kBlockOut - 1) / kBlockOut, steps = (in + kStep8 - 1) / kStep8;
  const int tid = static_cast<int>(threadIdx.x);
  // An x stage: n16max rows of 128 bytes (swizzled), then the rows' scales (1 KiB keeps alignment).
  const int x_rows_bytes = n16max * 128, x_stage_bytes = x_rows_bytes + 1024;
  const int x_stages = min(kMaxXStages, kX8Bytes / x_stage_bytes);

  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (base - raw);
  const uint32_t x_full = base + Smem8::kBarAt, x_empty = x_full + 8 * kMaxXStages;
  const uint32_t w_full = x_empty + 8 * kMaxXStages, w_empty = w_full + 8 * kW8Stages;
  if (tid == 0) {
    for (int i = 0; i < x_stages; ++i) ptx::MbarInit(x_full + 8 * i, kXCopyThreads);
    for (int i = 0; i < x_stages; ++i) ptx::MbarInit(x_empty + 8 * i, kMulThreads);
    for (int i = 0; i < kW8Stages; ++i) ptx::MbarInit(w_full + 8 * i, 1);
    for (int i = 0; i < kW8Stages; ++i) ptx::MbarInit(w_empty + 8 * i, kMulThreads);
    ptx::MbarInitFence();
  }
  __syncthreads();

  if (tid >= kMulThreads) {
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
        const int nv = min(p.rows[it.prob] - it.tile * kBlockRows, kBlockRows), n16 = (nv + 15) & ~15;
        const uint8_t* x = p.qx[it.prob] + static_cast<size_t>(it.tile) * kBlockRows * in;
        const float* sx = p.sx[it.prob] + static_cast<size_t>(it.tile) * kBlockRows;
        for (int kt = 0; kt < steps; ++kt, ++g) {
          if (g >= x_stages) ptx::MbarWait(x_empty + 8 * st, phase ^ 1);
          const uint32_t stage = base + static_cast<uint32_t>(st * x_stage_bytes);
          const int k0 = kt * kStep8;
          for (int c = xt; c < n16 * 8; c += kXCopyThreads) {
            const int r = c >> 3, ch = c & 7, k = k0 + ch * 16;
            const bool ok = r < nv && k < in;
            ptx::CpAsync16(stage + r * 128 + ((ch ^ (r & 7)) << 4),
                           ok ? static_cast<const void*>(x + static_cast<size_t>(r) * in + k) : p.qx[it.prob],
                           ok ? 16 : 0);
          }
          for (int r = xt; r < n16; r += kXCopyThreads) {
            const bool ok = r < nv;
            CpAsync4(stage + x_rows_bytes + 4 * r,
                     ok ? static_cast<const void*>(sx + static_cast<size_t>(kt) * scale_stride + r) : p.sx[it.prob],
                     ok ? 4 : 0);
          }
          ptx::CpAsyncMbarArrive(x_full + 8 * st);
          if (++st == x_stages) st = 0, phase ^= 1;
        }
      }
    }
  } else {
    const int wg = tid / 128, l = tid % 32;
    float acc[64], part[64];
    int xs = 0, x_phase = 0, g = 0;
    for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x)) {
      const Item8 it = DecodeItem(p, count, obs, item);
      const int nv = min(p.rows[it.prob] - it.tile * kBlockRows, kBlockRows), n16 = (nv + 15) & ~15;
      const float* wscale = p.scale[it.prob] + static_cast<size_t>(it.ob) * steps;
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
      for (int kt = 0; kt < steps; ++kt, ++g) {
        const int ws = g % kW8Stages;
        const float s_w = __ldg(wscale + kt);
        ptx::MbarWait(x_full + 8 * xs, x_phase);
        ptx::MbarWait(w_full + 8 * ws, (g / kW8Stages) & 1);
        wgmma::ProxyFence();
        wgmma::Fence();
        const uint32_t stage = base + static_cast<uint32_t>(xs * x_stage_bytes);
        StepMma8N(n16, part, base + static_cast<uint32_t>(Smem8::kWAt + ws * Smem8::kTile + wg * 64 * 128), stage);
        wgmma::Commit();
        wgmma::Wait<0>();
        ptx::MbarArrive(w_empty + 8 * ws);
        const float* scale_x = reinterpret_cast<const float*>(smem + xs * x_stage_bytes + x_rows_bytes);
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          if (8 * j < n16) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              acc[4 * j + e] += part[4 * j + e] * (s_w * scale_x[8 * j + 2 * (l % 4) + (e % 2)]);
            }
          }
        }
        ptx::MbarArrive(x_empty + 8 * xs);
        if (++xs == x_stages) xs = 0, x_phase ^= 1;
      }
      StoreTile<false>(acc, n16, nv, tid, it.ob * kBlockOut, out, smem + Smem8::kOutAt,
                       p.y[it.prob] + static_cast<size_t>(it.tile) * kBlockRows * out);
    }
  }
#else
  __trap();  // built without sm_90a: GroupedLinearFp8Available is false, nothing launches this
#endif
}

// One warp a (row, group of 128 columns), four columns a lane: cpu::QuantizeActFp8.
__global__ void QuantizeActFp8Kernel(const __nv_bfloat16* x, int64_t rows, int64_t in, uint8_t* q, float* s,
                                     int64_t scale_stride) {
  const int64_t groups = (in + 127) / 128;
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (item >= rows * groups) return;
  const int64_t r = item / groups, g = item % groups, c0 = g * 128 + lane * 4;
  float v[4];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = c0 + i < in ? __bfloat162float(x[r * in + c0 + i]) : 0.0f;
    amax = fmaxf(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float scale = amax / 448.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (c0 + i < in) {
      q[r * in + c0 + i] = scale > 0.0f ? __nv_cvt_float_to_fp8(v[i] / scale, __NV_SATFINITE, __NV_E4M3) : 0;
    }
  }
  if (lane == 0) s[g * scale_stride + r] = scale;
}

// packed (W8A8 layout) byte i <- w, zero outside.
__global__ void PackFp8W8A8Kernel(const uint8_t* w, int64_t out, int64_t in, int64_t bytes, uint8_t* packed) {
  const int64_t kb_count = (in + kStep8 - 1) / kStep8;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / Smem8::kTile, ob = t / kb_count, kb = t % kb_count;
    const int q = static_cast<int>(i % Smem8::kTile), r = q / 128, chunk = ((q % 128) / 16) ^ (r & 7);
    const int64_t row = ob * kBlockOut + r, col = kb * kStep8 + chunk * 16 + q % 16;
    packed[i] = row < out && col < in ? w[row * in + col] : 0;
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

int64_t Fp8PackedBytes(int64_t out, int64_t in) {
  return (out + kBlockOut - 1) / kBlockOut * kBlockOut * ((in + kStep - 1) / kStep * kStep);
}

absl::Status PackFp8(const uint8_t* w, int64_t out, int64_t in, uint8_t* packed, void* stream) {
  if (out < 1 || in < 1 || w == nullptr || packed == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("PackFp8: a ", out, " x ", in, " matrix (or a null pointer)"));
  }
  const int64_t bytes = Fp8PackedBytes(out, in);
  const int blocks = static_cast<int>(std::min<int64_t>((bytes + 255) / 256, 8192));
  PackFp8Kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(w, out, in, bytes, packed);
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

bool GroupedLinearFp8Available() {
#if defined(FERRY_CUDA_SM90A)
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  static std::mutex mu;
  static auto* known = new std::map<int, bool>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known->find(device); it != known->end()) return it->second;
  int optin = 0, major = 0, minor = 0;
  bool ok = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
            major == 9 && minor == 0 && optin >= std::max(Smem::kBytes, Smem8::kBytes) &&
            cudaFuncSetAttribute(GroupedLinearFp8Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 Smem::kBytes) == cudaSuccess &&
            cudaFuncSetAttribute(GroupedLinearW8A8Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 Smem8::kBytes) == cudaSuccess;
  if (!ok) cudaGetLastError();
  (*known)[device] = ok;
  return ok;
#else
  return false;
#endif
}

namespace {

// The checks and launches the grouped kernels share: every problem with rows gets
// fill(slot, problem) in the launch's table (kMaxProblems at a time), then launch(count, tiles).
// usable(problem) says whether its pointers are non-null and aligned.
template <typename Group, typename Usable, typename Fill, typename Launch>
absl::Status RunGrouped(const char* name, const Group* groups, int64_t n, int64_t in, int64_t out, Usable usable,
                        Fill fill, Launch launch) {
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
  const int per_launch = std::min(kMaxProblems, 65535 / tiles);
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

dim3 Grid(int64_t out, int count, int tiles) {
  return dim3(static_cast<unsigned>((out + kBlockOut - 1) / kBlockOut), static_cast<unsigned>(count * tiles));
}

}  // namespace

absl::Status GroupedLinearFp8(const LinearGroupFp8* groups, int64_t n, int64_t in, int64_t out, void* stream) {
  Problems pr{};
  return RunGrouped(
      "GroupedLinearFp8", groups, n, in, out,
      [](const LinearGroupFp8& g) {
        return g.x != nullptr && g.w != nullptr && g.scale != nullptr && g.y != nullptr && Aligned16(g.x) &&
               Aligned16(g.w) && Aligned16(g.y);
      },
      [&](int slot, const LinearGroupFp8& g) {
        pr.x[slot] = reinterpret_cast<const __nv_bfloat16*>(g.x);
        pr.w[slot] = g.w;
        pr.scale[slot] = g.scale;
        pr.y[slot] = reinterpret_cast<__nv_bfloat16*>(g.y);
        pr.rows[slot] = static_cast<int>(g.rows);
      },
      [&](int count, int tiles) -> absl::Status {
        GroupedLinearFp8Kernel<<<Grid(out, count, tiles), kThreads, Smem::kBytes, static_cast<cudaStream_t>(stream)>>>(
            pr, tiles, static_cast<int>(in), static_cast<int>(out));
        FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
        return absl::OkStatus();
      });
}

int64_t Fp8W8A8PackedBytes(int64_t out, int64_t in) {
  return (out + kBlockOut - 1) / kBlockOut * kBlockOut * ((in + kStep8 - 1) / kStep8 * kStep8);
}

absl::Status PackFp8W8A8(const uint8_t* w, int64_t out, int64_t in, uint8_t* packed, void* stream) {
  if (out < 1 || in < 1 || w == nullptr || packed == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("PackFp8W8A8: a ", out, " x ", in, " matrix (or a null pointer)"));
  }
  const int64_t bytes = Fp8W8A8PackedBytes(out, in);
  const int blocks = static_cast<int>(std::min<int64_t>((bytes + 255) / 256, 8192));
  PackFp8W8A8Kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(w, out, in, bytes, packed);
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status QuantizeActFp8(const uint16_t* x, int64_t rows, int64_t in, uint8_t* q, float* s, int64_t scale_stride,
                            void* stream) {
  if (rows < 0 || in < 1 || scale_stride < rows || (rows > 0 && (x == nullptr || q == nullptr || s == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("QuantizeActFp8: ", rows, " rows of ", in,
                                                   " columns with a scale stride of ", scale_stride));
  }
  if (rows == 0) return absl::OkStatus();
  const int64_t warps = rows * ((in + 127) / 128);
  const int64_t blocks = (warps + 7) / 8;
  if (blocks > INT_MAX) return absl::InvalidArgumentError(absl::StrCat("QuantizeActFp8: ", warps, " groups"));
  QuantizeActFp8Kernel<<<static_cast<unsigned>(blocks), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const __nv_bfloat16*>(x), rows, in, q, s, scale_stride);
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status GroupedLinearW8A8(const LinearGroupW8A8* groups, int64_t n, int64_t in, int64_t out, int64_t scale_stride,
                               void* stream) {
  for (int64_t i = 0; i < n; ++i) {
    if (groups[i].rows > scale_stride) {
      return absl::InvalidArgumentError(absl::StrCat("GroupedLinearW8A8: problem ", i, " has ", groups[i].rows,
                                                     " rows, past the scale stride ", scale_stride));
    }
  }
  if (scale_stride > INT_MAX) return absl::InvalidArgumentError("GroupedLinearW8A8: scale stride past INT_MAX");
  Problems8 pr{};
  int64_t tiles_so_far = 0, max_rows = 0;
  return RunGrouped(
      "GroupedLinearW8A8", groups, n, in, out,
      [](const LinearGroupW8A8& g) {
        return g.qx != nullptr && g.sx != nullptr && g.w != nullptr && g.scale != nullptr && g.y != nullptr &&
               Aligned16(g.qx) && Aligned16(g.w) && Aligned16(g.y);
      },
      [&](int slot, const LinearGroupW8A8& g) {
        pr.first_tile[slot] = static_cast<int>(tiles_so_far);
        tiles_so_far += (g.rows + kBlockRows - 1) / kBlockRows;
        max_rows = std::max(max_rows, g.rows);
        pr.qx[slot] = g.qx;
        pr.sx[slot] = g.sx;
        pr.w[slot] = g.w;
        pr.scale[slot] = g.scale;
        pr.y[slot] = reinterpret_cast<__nv_bfloat16*>(g.y);
        pr.rows[slot] = static_cast<int>(g.rows);
      },
      [&](int count, int) -> absl::Status {
        const int64_t items = tiles_so_far * ((out + kBlockOut - 1) / kBlockOut);
        const int n16max = static_cast<int>(std::min<int64_t>((max_rows + 15) / 16 * 16, kBlockRows));
        tiles_so_far = 0;
        max_rows = 0;
        if (items > INT_MAX) return absl::InvalidArgumentError(absl::StrCat("GroupedLinearW8A8: ", items, " items"));
        int device = 0, sms = 0;
        FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
        FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        const unsigned grid = static_cast<unsigned>(std::min<int64_t>(items, sms));
        GroupedLinearW8A8Kernel<<<grid, kThreads, Smem8::kBytes, static_cast<cudaStream_t>(stream)>>>(
            pr, count, static_cast<int>(items), n16max, static_cast<int>(in), static_cast<int>(out),
            static_cast<int>(scale_stride));
        FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
        return absl::OkStatus();
      });
}

}  // namespace ferry::kernels::cuda
