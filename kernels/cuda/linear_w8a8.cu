// GroupedLinearW8A8 and QuantizeActFp8 (linear_fp8.h): the W8A8 block-FP8 product of the FP8
// releases, on the warpgroup tensor cores of sm_90a (e4m3 x e4m3 wgmma), and the dynamic
// activation quantization before it. The block shape, the copy roles and the output store are
// GroupedLinearFp8's (linear_fp8_shared.cuh); here the weight tiles (pre-swizzled) and the
// quantized rows go to wgmma as they are, and the blocks are persistent.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
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

struct Problems8 {
  int first_tile[kMaxProblems];  // the problem's first 128-row tile among all problems' tiles
  const uint8_t* qx[kMaxProblems];
  const float* sx[kMaxProblems];
  const uint8_t* w[kMaxProblems];
  const float* scale[kMaxProblems];
  __nv_bfloat16* y[kMaxProblems];
  int rows[kMaxProblems];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// One step's four k32 steps of E4M3 wgmma at width N into d (overwritten).
template <int N>
__device__ __forceinline__ void StepMma8(float (&d)[64], uint32_t a, uint32_t b) {
#pragma unroll
  for (int kk = 0; kk < kStep8 / 32; ++kk) {
    wgmma::WgmmaM64NK32E4M3<N>(d, wgmma::Desc(a + kk * 32, 16, 1024), wgmma::Desc(b + kk * 32, 16, 1024), kk);
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
            ptx::CpAsync4(stage + x_rows_bytes + 4 * r,
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
        const uint32_t a = base + static_cast<uint32_t>(Smem8::kWAt + ws * Smem8::kTile + wg * 64 * 128);
        WithWidth(n16, [&](auto width) { StepMma8<decltype(width)::value>(part, a, stage); });
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

// PackFp8W8A8's tiles: 128 x 128 bytes, row r's 16-byte chunk c at r * 128 + 16 (c ^ (r % 8))
// (the 128-byte swizzle wgmma reads).
struct W8A8Layout {
  static constexpr int kCols = 128;
  __host__ __device__ static void Source(int q, int* row, int* col) {
    *row = q / 128;
    *col = (((q % 128) / 16) ^ (*row & 7)) * 16 + q % 16;
  }
};

}  // namespace

bool fp8::SetUpW8A8Kernel(int optin) {
  return optin >= Smem8::kBytes && cudaFuncSetAttribute(GroupedLinearW8A8Kernel,
                                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        Smem8::kBytes) == cudaSuccess;
}

int64_t Fp8W8A8PackedBytes(int64_t out, int64_t in) { return fp8::PackedBytes<W8A8Layout>(out, in); }

absl::Status PackFp8W8A8(const uint8_t* w, int64_t out, int64_t in, uint8_t* packed, void* stream) {
  return fp8::Pack<W8A8Layout>("PackFp8W8A8", w, out, in, packed, stream);
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
