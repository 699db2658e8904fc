#include "kernels/cuda/gemv_w4a4_sm121.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "absl/strings/str_format.h"
#include "kernels/nvfp4_mma_layout.h"

namespace ferry::kernels::cuda {
namespace {

namespace l = w4a4;

constexpr int kQuantizeThreads = 128;
constexpr int kGemvWarps = 4;  // row tiles a block

// One thread a group of 16 values (a padding group writes zeros). The arithmetic is
// w4a4::ScaleTarget / ValueMultiplier / E2M1Code, the CPU twin's; the E4M3 rounding is the
// hardware's cvt.rn.satfinite (nearest even, saturating at 448), as F32ToF8E4M3 on the host. No
// fast-math: the divisions are IEEE, and nothing here contracts into an FMA.
__global__ void QuantizeKernel(const uint16_t* __restrict__ x, int rows, int in, int stride, float input_scale,
                               uint8_t* __restrict__ codes, uint8_t* __restrict__ scales) {
  const int groups = stride / l::kGroup;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(rows) * groups) return;
  const int t = static_cast<int>(idx / groups), grp = static_cast<int>(idx % groups);
  uint8_t* c = codes + static_cast<int64_t>(t) * (stride / 2) + grp * (l::kGroup / 2);
  uint8_t* s = scales + static_cast<int64_t>(t) * groups + grp;
  if (grp * l::kGroup >= in) {
    for (int i = 0; i < l::kGroup / 2; ++i) c[i] = 0;
    *s = 0;
    return;
  }
  const uint16_t* v = x + static_cast<int64_t>(t) * in + grp * l::kGroup;
  float f[l::kGroup];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < l::kGroup; ++i) {
    f[i] = __uint_as_float(static_cast<uint32_t>(v[i]) << 16);
    amax = fmaxf(amax, fabsf(f[i]));
  }
  const float g = 1.0f / input_scale;
  const __nv_fp8_storage_t sc = __nv_cvt_float_to_fp8(l::ScaleTarget(amax, g), __NV_SATFINITE, __NV_E4M3);
  const float sf = __half2float(__half(__nv_cvt_fp8_to_halfraw(sc, __NV_E4M3)));
  const float r = l::ValueMultiplier(sf, g);
#pragma unroll
  for (int i = 0; i < l::kGroup / 2; ++i) {
    c[i] = static_cast<uint8_t>(l::E2M1Code(f[2 * i] * r) | l::E2M1Code(f[2 * i + 1] * r) << 4);
  }
  *s = sc;
}

#if defined(__CUDA_ARCH_FEAT_SM121_ALL)
// d += A B with block scales: mma.m16n8k64 kind::mxf4nvf4 scale_vec::4X, selectors all 0 (the
// lanes and bytes nvfp4_mma_layout.h describes). Only in sm_121a code.
__device__ inline void MmaNvf4(float (&d)[4], const l::LaneOperands& o) {
  constexpr uint16_t kByteId = 0, kThreadId = 0;
  asm volatile(
      "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {%11, %12}, %13, {%14, %15};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(o.a[0]), "r"(o.a[1]), "r"(o.a[2]), "r"(o.a[3]), "r"(o.b[0]), "r"(o.b[1]), "r"(o.sfa), "h"(kByteId),
        "h"(kThreadId), "r"(o.sfb), "h"(kByteId), "h"(kThreadId));
}
#endif

// One warp a row tile of 16 weight rows, over all its column tiles in order; lanes assemble their
// operands with w4a4::LoadLaneOperands (the harness' host form reads through the same function).
// Lanes whose B column is past `rows` feed zero codes and scales.
__global__ void __launch_bounds__(32 * kGemvWarps)
    GemvW4A4Kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales, int rows, int in,
                   const uint8_t* __restrict__ packed, int out, float input_scale, uint16_t* __restrict__ y) {
#if defined(__CUDA_ARCH_FEAT_SM121_ALL)
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t rt = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (rt >= l::RowTiles(out)) return;
  const int64_t col_tiles = l::ColTiles(in), stride = l::PaddedCols(in);
  const int t = l::ScaleBCol(lane);
  const uint8_t* act_codes = t < rows ? codes + t * stride / 2 : nullptr;
  const uint8_t* act_scales = t < rows ? scales + t * stride / l::kGroup : nullptr;
  const auto load32 = [](const uint8_t* p) { return __ldg(reinterpret_cast<const unsigned int*>(p)); };
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t kt = 0; kt < col_tiles; ++kt) {
    const uint8_t* tile = packed + (rt * col_tiles + kt) * l::kTileBytes;
#pragma unroll
    for (int s = 0; s < l::kTileSteps; ++s) {
      const l::LaneOperands o =
          l::LoadLaneOperands(tile, act_codes, act_scales, lane, s, kt * l::kTileCols + l::kMmaK * s, load32);
      MmaNvf4(d, o);
    }
  }
  const float global = __ldg(reinterpret_cast<const float*>(packed + l::RowScaleOffset(out, in)) + rt);
  const float alpha = input_scale * global;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const l::Pos p = l::DElement(lane, j);
    const int64_t o = rt * l::kTileRows + p.row;
    if (o < out && p.col < rows) y[p.col * static_cast<int64_t>(out) + o] = __bfloat16_as_ushort(__float2bfloat16_rn(d[j] * alpha));
  }
#endif
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// GemvW4A4Kernel's body exists only in sm_121a code; elsewhere it would run as a no-op (a 90a
// build with 121a in the list also makes 90a code for it), so the launch checks the device.
absl::Status RequireSm121(const char* what) {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return absl::InternalError(absl::StrFormat("%s: cannot read the device's compute capability", what));
  }
  if (major != 12 || minor != 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: the block-scaled FP4 mma needs an sm_121 device (GB10); device %d is sm_%d%d", what, device, major, minor));
  }
  return absl::OkStatus();
}

absl::Status Launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("%s: launch failed: %s (the kernel exists only in sm_121a code)", what,
                                             cudaGetErrorString(e)));
}

}  // namespace

absl::Status QuantizeActivationsW4A4(const uint16_t* x, int64_t rows, int64_t in, float input_scale, uint8_t* codes,
                                     uint8_t* scales, void* stream) {
  if (rows < 1 || rows > INT32_MAX || in < 16 || in % 16 != 0 || in > INT32_MAX - l::kTileCols) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "QuantizeActivationsW4A4: rows %d and in %d must be >= 1, in a multiple of 16, both below 2^31", rows, in));
  }
  if (!(input_scale > 0.0f) || input_scale > 3.4e38f) {
    return absl::InvalidArgumentError(absl::StrFormat("QuantizeActivationsW4A4: input_scale %g must be finite and > 0",
                                                      input_scale));
  }
  if (!Aligned16(codes) || !Aligned16(scales)) {
    return absl::InvalidArgumentError("QuantizeActivationsW4A4: codes and scales must be 16-byte aligned");
  }
  const int64_t stride = l::PaddedCols(in), groups = rows * (stride / l::kGroup);
  const int64_t blocks = (groups + kQuantizeThreads - 1) / kQuantizeThreads;
  QuantizeKernel<<<static_cast<unsigned>(blocks), kQuantizeThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, static_cast<int>(rows), static_cast<int>(in), static_cast<int>(stride), input_scale, codes, scales);
  return Launched("QuantizeActivationsW4A4");
}

absl::Status GemvW4A4(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t in, const uint8_t* packed,
                      int64_t out, float input_scale, uint16_t* y, void* stream) {
  if (rows < 1 || rows > l::kMmaN || in < 16 || in % 16 != 0 || in > INT32_MAX - l::kTileCols || out < 1 ||
      out > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GemvW4A4: rows %d must be 1..8, in %d a positive multiple of 16, out %d >= 1, both below 2^31", rows, in,
        out));
  }
  if (!Aligned16(codes) || !Aligned16(scales) || !Aligned16(packed)) {
    return absl::InvalidArgumentError("GemvW4A4: codes, scales and packed must be 16-byte aligned");
  }
  if (absl::Status s = RequireSm121("GemvW4A4"); !s.ok()) return s;
  const int64_t blocks = (l::RowTiles(out) + kGemvWarps - 1) / kGemvWarps;
  GemvW4A4Kernel<<<static_cast<unsigned>(blocks), 32 * kGemvWarps, 0, static_cast<cudaStream_t>(stream)>>>(
      codes, scales, static_cast<int>(rows), static_cast<int>(in), packed, static_cast<int>(out), input_scale, y);
  return Launched("GemvW4A4");
}

}  // namespace ferry::kernels::cuda
