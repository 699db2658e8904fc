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
#include "kernels/cuda/linear_fp8_shared.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace ferry::kernels::cuda {

namespace {

using namespace fp8;  // NOLINT: the shared block shape

constexpr int kXChunks = (kBlockRows * 8 + kXCopyThreads - 1) / kXCopyThreads;  // 16-byte x chunks a copy thread
constexpr int kStep = 64;            // the `in` slice of a step: one packed tile, one 128-byte bf16 row
constexpr int kWStages = 12;         // packed W tiles in flight
constexpr int kXBytes = 96 * 1024;   // the x ring: as many stages of n16 rows as fit, up to 32
static_assert(kFp8BlockCols % kStep == 0);
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
};
static_assert(Smem::kWAt % 1024 == 0 && kXBytes >= kBlockRows * kStep * 2 * 4);
static_assert(kBlockRows * kOutRow <= Smem::kBarAt);

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
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
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
  uint8_t* smem = nullptr;
  const uint32_t base = AlignSmem1024(smem_raw, &smem);
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
      const uint32_t b = base + static_cast<uint32_t>(xs * x_stage_bytes);
      WithWidth(n16, [&](auto width) { StepMma<decltype(width)::value>(d, a_now, b); });
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
  StoreTile<true>(d, n16, nv, tid, o0, out, out, smem, p.y[prob] + static_cast<size_t>(tile) * kBlockRows * out);
#else
  __trap();  // built without sm_90a: GroupedLinearFp8Available is false, nothing launches this
#endif
}

// PackFp8's tiles (128 x 64 bytes): packed byte q comes from thread t = q / 32 of the
// multipliers (warpgroup g = t / 128, warp v, lane l), k16 step kk, fragment element e (registers
// a[e / 2] of the mma.m16n8k16 A layout): row 64 g + 16 v + l / 4 + 8 ((e / 2) % 2), column
// 16 kk + 2 (l % 4) + e % 2 + 8 (e / 4).
struct W8A16Layout {
  static constexpr int kCols = kStep;
  __host__ __device__ static void Source(int q, int* row, int* col) {
    const int t = q / 32, kk = (q % 32) / 8, e = q % 8, g = t / 128, v = (t % 128) / 32, l = t % 32;
    *row = 64 * g + 16 * v + l / 4 + 8 * ((e / 2) % 2);
    *col = 16 * kk + 2 * (l % 4) + e % 2 + 8 * (e / 4);
  }
};

}  // namespace

int64_t Fp8PackedBytes(int64_t out, int64_t in) { return fp8::PackedBytes<W8A16Layout>(out, in); }

absl::Status PackFp8(const uint8_t* w, int64_t out, int64_t in, uint8_t* packed, void* stream) {
  return fp8::Pack<W8A16Layout>("PackFp8", w, out, in, packed, stream);
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
            major == 9 && minor == 0 && optin >= Smem::kBytes &&
            cudaFuncSetAttribute(GroupedLinearFp8Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 Smem::kBytes) == cudaSuccess &&
            fp8::SetUpW8A8Kernel(optin);
  if (!ok) cudaGetLastError();
  (*known)[device] = ok;
  return ok;
#else
  return false;
#endif
}

absl::Status GroupedLinearFp8(const LinearGroupFp8* groups, int64_t n, int64_t in, int64_t out, void* stream) {
  Problems pr{};
  return RunGrouped(
      "GroupedLinearFp8", groups, n, in, out, kMaxProblems,
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

}  // namespace ferry::kernels::cuda
