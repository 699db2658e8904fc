// QuantizeActFp8 (and its gathered form) and SwiGluQuantizeActFp8 (linear_fp8.h): the dynamic
// activation quantization of the W8A8 experts (transformers' act_quant: per row, groups of 128
// columns, s = max|x| / 448, q = E4M3(x / s)), bit for bit cpu::QuantizeActFp8.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/swiglu.cuh"

namespace ferry::kernels::cuda {
namespace {

// cpu::QuantizeActFp8 of one row's 128-column group by the 128 / kLane lanes that hold it, kLane
// columns a lane: v the lane's values (columns c0 .. c0 + kLane - 1 of the row, zero past `in`),
// qr the row's bytes at c0; the group's first lane stores the scale at *s. The group's lanes are
// aligned in the warp (a 16-lane half for kLane 8), so the shuffles stay within it.
template <int kLane>
__device__ __forceinline__ void QuantizeGroupLane(const float (&v)[kLane], int lane, int64_t c0, int64_t in,
                                                  uint8_t* qr, float* s) {
  constexpr int kGroupLanes = 128 / kLane;
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kLane; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int off = kGroupLanes / 2; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  if (c0 >= in) return;  // a lane past the row (only when the row ends inside the warp's columns)
  const float scale = amax / 448.0f;
  uint32_t packed[kLane / 4] = {};
#pragma unroll
  for (int i = 0; i < kLane; ++i) {
    const uint32_t b = scale > 0.0f ? __nv_cvt_float_to_fp8(v[i] / scale, __NV_SATFINITE, __NV_E4M3) : 0;
    packed[i / 4] |= b << (8 * (i % 4));
  }
  if (c0 + kLane - 1 < in && (reinterpret_cast<uintptr_t>(qr) & (kLane - 1)) == 0) {
    if constexpr (kLane == 8) {
      *reinterpret_cast<uint2*>(qr) = make_uint2(packed[0], packed[1]);  // the eight bytes in one store
    } else {
      *reinterpret_cast<uint32_t*>(qr) = packed[0];
    }
  } else {
#pragma unroll
    for (int i = 0; i < kLane; ++i) {
      if (c0 + i < in) qr[i] = static_cast<uint8_t>(packed[i / 4] >> (8 * (i % 4)));
    }
  }
  if (lane % kGroupLanes == 0) *s = scale;
}

// The eight bf16 at p (16-byte aligned) as floats.
__device__ __forceinline__ void LoadBf16x8(const __nv_bfloat16* p, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(h[k]);
    v[2 * k] = f.x;
    v[2 * k + 1] = f.y;
  }
}

// One warp a (row, 32 kLane columns), kLane columns a lane: cpu::QuantizeActFp8 (of x's row
// src_row[r] for row r when src_row is given). kLane 8 needs x's rows 16-byte aligned.
template <int kLane>
__global__ void QuantizeActFp8Kernel(const __nv_bfloat16* x, const int32_t* src_row, int64_t rows, int64_t in,
                                     uint8_t* q, float* s, int64_t scale_stride) {
  const int64_t chunks = (in + 32 * kLane - 1) / (32 * kLane);
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (item >= rows * chunks) return;
  const int64_t r = item / chunks, c0 = (item % chunks) * 32 * kLane + lane * kLane;
  const __nv_bfloat16* xr = x + (src_row != nullptr ? static_cast<int64_t>(src_row[r]) : r) * in;
  float v[kLane];
  bool loaded = false;
  if constexpr (kLane == 8) {
    if (c0 + 7 < in) LoadBf16x8(xr + c0, v), loaded = true;
  }
  if (!loaded) {
#pragma unroll
    for (int i = 0; i < kLane; ++i) v[i] = c0 + i < in ? __bfloat162float(xr[c0 + i]) : 0.0f;
  }
  QuantizeGroupLane<kLane>(v, lane, c0, in, q + r * in + c0, s + (c0 / 128) * scale_stride + r);
}

// SwiGluBf16 then QuantizeActFp8 of its bf16 output in one pass, the same bits (swiglu.cuh's value
// rounded to bf16, then QuantizeGroupLane): one warp a (row, 32 kLane columns). kLane 8 needs
// gate's and up's rows 16-byte aligned.
template <int kLane>
__global__ void SwiGluQuantizeActFp8Kernel(const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t rows,
                                           int64_t cols, int64_t in_stride, float limit, uint8_t* q, float* s,
                                           int64_t scale_stride) {
  const int64_t chunks = (cols + 32 * kLane - 1) / (32 * kLane);
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (item >= rows * chunks) return;
  const int64_t r = item / chunks, c0 = (item % chunks) * 32 * kLane + lane * kLane;
  const __nv_bfloat16* gr = gate + r * in_stride + c0;
  const __nv_bfloat16* ur = up + r * in_stride + c0;
  float v[kLane];
  bool loaded = false;
  if constexpr (kLane == 8) {
    if (c0 + 7 < cols) {
      float g[8], u[8];
      LoadBf16x8(gr, g);
      LoadBf16x8(ur, u);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = __bfloat162float(SwiGluOf(g[i], u[i], limit));
      loaded = true;
    }
  }
  if (!loaded) {
#pragma unroll
    for (int i = 0; i < kLane; ++i) {
      v[i] = c0 + i < cols
                 ? __bfloat162float(SwiGluOf(__bfloat162float(gr[i]), __bfloat162float(ur[i]), limit))
                 : 0.0f;
    }
  }
  QuantizeGroupLane<kLane>(v, lane, c0, cols, q + r * cols + c0, s + (c0 / 128) * scale_stride + r);
}

// Blocks of 256 threads for one warp a (row, 32 kLane columns) over rows x cols.
template <int kLane>
int64_t QuantizeBlocks(int64_t rows, int64_t cols) {
  return (rows * ((cols + 32 * kLane - 1) / (32 * kLane)) + 7) / 8;
}

}  // namespace

absl::Status QuantizeActFp8Rows(const uint16_t* x, const int32_t* src_row, int64_t rows, int64_t in, uint8_t* q,
                                float* s, int64_t scale_stride, void* stream) {
  if (rows < 0 || in < 1 || scale_stride < rows || (rows > 0 && (x == nullptr || q == nullptr || s == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("QuantizeActFp8: ", rows, " rows of ", in,
                                                   " columns with a scale stride of ", scale_stride));
  }
  if (rows == 0) return absl::OkStatus();
  const auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
  auto* st = static_cast<cudaStream_t>(stream);
  if (QuantizeBlocks<4>(rows, in) > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("QuantizeActFp8: ", rows, " rows of ", in, " columns"));
  }
  if (in % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {  // 16-byte loads a lane
    QuantizeActFp8Kernel<8><<<static_cast<unsigned>(QuantizeBlocks<8>(rows, in)), 256, 0, st>>>(
        xb, src_row, rows, in, q, s, scale_stride);
  } else {
    QuantizeActFp8Kernel<4><<<static_cast<unsigned>(QuantizeBlocks<4>(rows, in)), 256, 0, st>>>(
        xb, src_row, rows, in, q, s, scale_stride);
  }
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status QuantizeActFp8(const uint16_t* x, int64_t rows, int64_t in, uint8_t* q, float* s, int64_t scale_stride,
                            void* stream) {
  return QuantizeActFp8Rows(x, nullptr, rows, in, q, s, scale_stride, stream);
}

absl::Status SwiGluQuantizeActFp8(const uint16_t* gate, const uint16_t* up, int64_t rows, int64_t cols,
                                  int64_t in_stride, float limit, uint8_t* q, float* s, int64_t scale_stride,
                                  void* stream) {
  if (rows < 0 || cols < 1 || in_stride < cols || scale_stride < rows ||
      (rows > 0 && (gate == nullptr || up == nullptr || q == nullptr || s == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("SwiGluQuantizeActFp8: ", rows, " rows of ", cols,
                                                   " columns, in_stride ", in_stride, ", scale stride ",
                                                   scale_stride, " (need cols >= 1, in_stride >= cols, "
                                                   "scale stride >= rows, non-null pointers)"));
  }
  if (rows == 0) return absl::OkStatus();
  const auto* g = reinterpret_cast<const __nv_bfloat16*>(gate);
  const auto* u = reinterpret_cast<const __nv_bfloat16*>(up);
  auto* st = static_cast<cudaStream_t>(stream);
  if (QuantizeBlocks<4>(rows, cols) > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("SwiGluQuantizeActFp8: ", rows, " rows of ", cols, " columns"));
  }
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (cols % 8 == 0 && in_stride % 8 == 0 && aligned(gate) && aligned(up)) {  // 16-byte loads a lane
    SwiGluQuantizeActFp8Kernel<8><<<static_cast<unsigned>(QuantizeBlocks<8>(rows, cols)), 256, 0, st>>>(
        g, u, rows, cols, in_stride, limit, q, s, scale_stride);
  } else {
    SwiGluQuantizeActFp8Kernel<4><<<static_cast<unsigned>(QuantizeBlocks<4>(rows, cols)), 256, 0, st>>>(
        g, u, rows, cols, in_stride, limit, q, s, scale_stride);
  }
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
