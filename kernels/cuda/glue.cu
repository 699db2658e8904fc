// The model glue ops of ops.h: embedding gather, float32-input RMSNorm, LayerNorm, residual add,
// casts, row copies, paged cache writes, the CSR selection and the MoE combine. Each is simple
// and memory-bound; one thread an element (or a block a row where a row reduces).
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/block_sum.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/mhc_row.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/paged.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline float ToF(float v) { return v; }
__device__ inline float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ inline T FromF(float v);
template <>
__device__ inline float FromF<float>(float v) { return v; }
template <>
__device__ inline __nv_bfloat16 FromF<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

unsigned GridFor(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65536)); }

// Sum over the block (kThreads threads); every thread gets the total. `scratch` holds
// kThreads / 32 floats; the trailing barrier lets the caller reuse it.
__device__ float BlockSum(float v, float* scratch) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kThreads / 32; ++i) total += scratch[i];
  __syncthreads();
  return total;
}

__global__ void EmbeddingKernel(const __nv_bfloat16* __restrict__ table, int64_t vocab, int64_t dim,
                                const int32_t* __restrict__ ids, int64_t total, float* __restrict__ out) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / dim, i = e % dim;
    const int64_t id = ids[r];
    out[e] = (id < 0 || id >= vocab) ? __int_as_float(0x7fc00000) : __bfloat162float(table[id * dim + i]);
  }
}

// x float32 (may alias y when T is float), w and y of type T. A block of kNormThreads a row
// (whatever the row count, so a row's sum runs the same way alone or in a batch): RowInvRms
// (block_sum.cuh), then y = w * (x * inv). With h (mHC's streams [rows, streams, dim], 16-byte
// aligned, dim % 4 == 0, x aligned too), x is first written as MixInKernel's mix of them with pre
// [rows, streams] (each element summed over the streams in ascending order, as MixInKernel), by
// the thread that then reads it.
// An mHC site's Sinkhorn inputs and outputs (MhcSinkhorn's, ops.h) for the fused kernel below.
struct SinkhornSite {
  const float* m = nullptr;
  const float* scale = nullptr;
  const float* base = nullptr;
  float eps = 0.0f;
  int64_t iters = 0;
  float* post = nullptr;
  float* comb = nullptr;
};

// S > 0 (with h): first the row's mHC weights from its logits (SinkhornRowLanes on warp 0, writing
// pre, site.post and site.comb as MhcSinkhorn does), then the mix with that pre and the norm.
template <typename T, int S>
__global__ void __launch_bounds__(kNormThreads)
    RmsNormF32Kernel(float* x, int64_t dim, const T* __restrict__ w, float eps, T* y, const float* __restrict__ h,
                     float* pre, int streams, SinkhornSite site) {
  PdlLaunchDependents();
  PdlWait();
  __shared__ float scratch[32];
  if constexpr (S > 0) {
    if (threadIdx.x < 32) {
      constexpr int G = SinkhornLanes(S), M = (2 + S) * S;
      const int lane = threadIdx.x, l = lane % G;
      const int64_t r = blockIdx.x;
      SinkhornRowLanes<S>(site.m + r * M, site.scale, site.base, site.eps, site.iters, l, lane - l, lane < G,
                          pre + r * S, site.post + r * S, site.comb + r * S * S);
    }
    __syncthreads();  // pre is read below by every thread of the block
  }
  float* xr = x + blockIdx.x * dim;
  T* yr = y + blockIdx.x * dim;
  const bool vec = dim % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t pieces = vec ? dim / 4 : 0;
  if (h != nullptr) {  // the host checked vec
    const float* hr = h + blockIdx.x * streams * dim;
    const float* pr = pre + blockIdx.x * streams;  // written by this block when S > 0
#pragma unroll 4
    for (int64_t p = threadIdx.x; p < pieces; p += kNormThreads) {
      float4 acc{0.0f, 0.0f, 0.0f, 0.0f};
      for (int j = 0; j < streams; ++j) {
        const float4 v = reinterpret_cast<const float4*>(hr + j * dim)[p];
        const float c = pr[j];
        acc.x += c * v.x;
        acc.y += c * v.y;
        acc.z += c * v.z;
        acc.w += c * v.w;
      }
      reinterpret_cast<float4*>(xr)[p] = acc;
    }
  }
  const float inv = RowInvRms(xr, dim, vec, eps, scratch);
#pragma unroll 4
  for (int64_t p = threadIdx.x; p < pieces; p += kNormThreads) {
    const float4 v = reinterpret_cast<const float4*>(xr)[p];
    const int64_t i = 4 * p;
    yr[i] = FromF<T>(ToF(w[i]) * (v.x * inv));
    yr[i + 1] = FromF<T>(ToF(w[i + 1]) * (v.y * inv));
    yr[i + 2] = FromF<T>(ToF(w[i + 2]) * (v.z * inv));
    yr[i + 3] = FromF<T>(ToF(w[i + 3]) * (v.w * inv));
  }
  for (int64_t i = 4 * pieces + threadIdx.x; i < dim; i += kNormThreads) yr[i] = FromF<T>(ToF(w[i]) * (xr[i] * inv));
}

template <typename T>
__global__ void LayerNormKernel(const T* x, int64_t dim, const T* __restrict__ w, const T* __restrict__ b, float eps,
                                T* y) {
  PdlLaunchDependents();
  PdlWait();
  __shared__ float scratch[kThreads / 32];
  const T* xr = x + blockIdx.x * dim;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) sum += ToF(xr[i]);
  const float mean = BlockSum(sum, scratch) / static_cast<float>(dim);
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    const float d = ToF(xr[i]) - mean;
    sq += d * d;
  }
  const float inv = rsqrtf(BlockSum(sq, scratch) / static_cast<float>(dim) + eps);
  // y may alias x: each thread reads and then writes only its own elements, after both sums.
  T* yr = y + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) yr[i] = FromF<T>((ToF(xr[i]) - mean) * inv * ToF(w[i]) + ToF(b[i]));
}

__global__ void ZeroKernel(uint32_t* x, int64_t n) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[e] = 0u;
  }
}

template <typename T>
__global__ void AddKernel(float* x, const T* __restrict__ y, int64_t n) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[e] += ToF(y[e]);
  }
}

__global__ void ToF32Kernel(const __nv_bfloat16* __restrict__ in, int64_t n, float* __restrict__ out) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[e] = __bfloat162float(in[e]);
  }
}

__global__ void ToBf16Kernel(const float* __restrict__ in, int64_t n, __nv_bfloat16* __restrict__ out) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[e] = __float2bfloat16_rn(in[e]);
  }
}

template <typename T>
__global__ void CopyRowsKernel(const T* __restrict__ src, int64_t src_stride,
                               const int32_t* __restrict__ src_idx, T* __restrict__ dst,
                               int64_t dst_stride, const int32_t* __restrict__ dst_idx, int64_t cols, int64_t total) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = e / cols, c = e % cols;
    const int64_t s = src_idx != nullptr ? src_idx[j] : j;
    const int64_t d = dst_idx != nullptr ? dst_idx[j] : j;
    if (s < 0 || d < 0) continue;
    dst[d * dst_stride + c] = src[s * src_stride + c];
  }
}

template <typename T>
__global__ void WritePagedKernel(const T* __restrict__ src, int64_t src_stride, int64_t cols, int64_t col_offset,
                                 const int64_t* __restrict__ positions, PagedViewOf<T> cache, int64_t total) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    const T* row = PagedRow(cache, r, positions[r]);
    if (row == nullptr) continue;
    const_cast<T*>(row)[col_offset + c] = src[r * src_stride + c];
  }
}

// A row's count as CompactSelection takes it: outside [0, k] it selects nothing.
__device__ __forceinline__ int32_t ClampedCount(int32_t n, int64_t k) { return n < 0 || n > k ? 0 : n; }

constexpr int kCompactMaxBlocks = 1024;  // CompactKernel: a block's prefix reads at most `rows` counts

// Grid: G = min(rows, kCompactMaxBlocks) blocks (1 for no rows); block b takes rows [b rows / G,
// (b + 1) rows / G). Its threads sum the counts of the rows before its first (where its output
// starts), then write its rows' offsets and copy their ids, striding over each row. (One block
// for every row, as before, copied a batch of 64 rows x 2048 ids in 66 us on an H200.)
__global__ void __launch_bounds__(kThreads)
    CompactKernel(const int32_t* __restrict__ ids, const int32_t* __restrict__ counts, int64_t rows, int64_t k,
                  int32_t* __restrict__ sel, int32_t* __restrict__ offsets) {
  PdlLaunchDependents();
  PdlWait();
  __shared__ int32_t warp_sum[kThreads / 32];
  const int64_t r0 = blockIdx.x * rows / gridDim.x, r1 = (blockIdx.x + 1) * rows / gridDim.x;
  int32_t before = 0;  // <= rows * k <= INT32_MAX
  for (int64_t i = threadIdx.x; i < r0; i += kThreads) before += ClampedCount(counts[i], k);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) before += __shfl_xor_sync(0xffffffffu, before, off);
  if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x >> 5] = before;
  __syncthreads();
  int32_t start = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) start += warp_sum[w];
  for (int64_t r = r0; r < r1; ++r) {
    const int32_t n = ClampedCount(counts[r], k);
    if (threadIdx.x == 0) offsets[r] = start;
    const int32_t* src = ids + r * k;
    for (int32_t j = threadIdx.x; j < n; j += kThreads) sel[start + j] = src[j];
    start += n;
  }
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) offsets[rows] = start;
}

template <typename T>
__global__ void MoeCombineKernel(const T* __restrict__ slots, const float* __restrict__ weights,
                                 const T* __restrict__ shared, int64_t top_k, int64_t dim, int64_t total,
                                 bool assign, float* __restrict__ x) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / dim, i = e % dim;
    float y = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) {
      // Product then sum, each rounded (no FMA), as the CPU's `yr[i] += s[i] * w`.
      y = __fadd_rn(y, __fmul_rn(ToF(slots[(r * top_k + j) * dim + i]), weights[r * top_k + j]));
    }
    if (shared != nullptr) y = __fadd_rn(y, ToF(shared[e]));
    x[e] = assign ? y : x[e] + y;
  }
}

template <typename T>
const __nv_bfloat16* Bf(const T* p) {
  return reinterpret_cast<const __nv_bfloat16*>(p);
}
template <typename T>
__nv_bfloat16* Bf(T* p) {
  return reinterpret_cast<__nv_bfloat16*>(p);
}
cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

absl::Status EmbeddingGatherF32(const uint16_t* table, int64_t vocab, int64_t dim, const int32_t* ids,
                                int64_t rows, float* out, void* stream) {
  if (vocab < 1 || dim < 1 || rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("EmbeddingGatherF32: vocab ", vocab, ", dim ", dim, ", rows ", rows, " (need vocab, dim >= 1)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (table == nullptr || ids == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("EmbeddingGatherF32: null table, ids or out");
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(EmbeddingKernel, GridFor(rows * dim), kThreads, 0, S(stream), Bf(table),
                                             vocab, dim, ids, rows * dim, out));
  return absl::OkStatus();
}

absl::Status RmsNormF32ToBf16(const float* x, int64_t rows, int64_t dim, const uint16_t* w, float eps,
                              uint16_t* y, void* stream) {
  if (dim < 1 || rows < 0 || rows > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("RmsNormF32ToBf16: rows ", rows, ", dim ", dim));
  }
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(RmsNormF32Kernel<__nv_bfloat16, 0>, static_cast<unsigned>(rows),
                                             kNormThreads, 0, S(stream), const_cast<float*>(x), dim, Bf(w), eps, Bf(y),
                                             nullptr, nullptr, 0, SinkhornSite{}));
  return absl::OkStatus();
}

absl::Status LayerNormBf16(const uint16_t* x, int64_t rows, int64_t dim, const uint16_t* w, const uint16_t* b,
                           float eps, uint16_t* y, void* stream) {
  if (dim < 1 || rows < 0 || rows > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("LayerNormBf16: rows ", rows, ", dim ", dim));
  }
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(LayerNormKernel<__nv_bfloat16>, static_cast<unsigned>(rows), kThreads, 0,
                                             S(stream), Bf(x), dim, Bf(w), Bf(b), eps, Bf(y)));
  return absl::OkStatus();
}

absl::Status ZeroWords(void* x, int64_t n, void* stream) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("ZeroWords: n is ", n));
  if (n == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(
      LaunchDependent(ZeroKernel, GridFor(n), kThreads, 0, S(stream), static_cast<uint32_t*>(x), n));
  return absl::OkStatus();
}

absl::Status AddBf16ToF32(float* x, const uint16_t* y, int64_t n, void* stream) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("AddBf16ToF32: n is ", n));
  if (n == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(AddKernel<__nv_bfloat16>, GridFor(n), kThreads, 0, S(stream), x, Bf(y),
                                             n));
  return absl::OkStatus();
}

absl::Status CastBf16ToF32(const uint16_t* in, int64_t n, float* out, void* stream) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("CastBf16ToF32: n is ", n));
  if (n == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(ToF32Kernel, GridFor(n), kThreads, 0, S(stream), Bf(in), n, out));
  return absl::OkStatus();
}

absl::Status CastF32ToBf16(const float* in, int64_t n, uint16_t* out, void* stream) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("CastF32ToBf16: n is ", n));
  if (n == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(ToBf16Kernel, GridFor(n), kThreads, 0, S(stream), in, n, Bf(out)));
  return absl::OkStatus();
}

absl::Status CopyRowsBf16(const uint16_t* src, int64_t src_stride, const int32_t* src_idx, uint16_t* dst,
                          int64_t dst_stride, const int32_t* dst_idx, int64_t rows, int64_t cols, void* stream) {
  if (rows < 0 || cols < 1 || src_stride < cols || dst_stride < cols) {
    return absl::InvalidArgumentError(absl::StrCat("CopyRowsBf16: rows ", rows, ", cols ", cols, ", src_stride ",
                                                   src_stride, ", dst_stride ", dst_stride,
                                                   " (need cols >= 1 and both strides >= cols)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (src == nullptr || dst == nullptr) return absl::InvalidArgumentError("CopyRowsBf16: null src or dst");
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(CopyRowsKernel<__nv_bfloat16>, GridFor(rows * cols), kThreads, 0,
                                             S(stream), Bf(src), src_stride, src_idx, Bf(dst), dst_stride, dst_idx,
                                             cols, rows * cols));
  return absl::OkStatus();
}

absl::Status WritePagedRowsBf16(const uint16_t* src, int64_t rows, int64_t src_stride, int64_t cols,
                                int64_t col_offset, const int64_t* positions, const PagedCacheBf16& cache,
                                void* stream) {
  if (rows < 0 || cols < 1 || col_offset < 0 || col_offset + cols > cache.width || src_stride < cols) {
    return absl::InvalidArgumentError(absl::StrCat("WritePagedRowsBf16: rows ", rows, ", cols ", cols,
                                                   ", col_offset ", col_offset, ", src_stride ", src_stride,
                                                   ", cache width ", cache.width,
                                                   " (need col_offset + cols <= width, src_stride >= cols)"));
  }
  PagedView view;
  if (absl::Status s = MakePagedView(cache, "WritePagedRowsBf16", &view); !s.ok()) return s;
  if (rows == 0) return absl::OkStatus();
  if (src == nullptr || positions == nullptr) {
    return absl::InvalidArgumentError("WritePagedRowsBf16: null src or positions");
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(WritePagedKernel<__nv_bfloat16>, GridFor(rows * cols), kThreads, 0,
                                             S(stream), Bf(src), src_stride, cols, col_offset, positions, view,
                                             rows * cols));
  return absl::OkStatus();
}

absl::Status CompactSelection(const int32_t* ids, const int32_t* counts, int64_t rows, int64_t k, int32_t* sel,
                              int32_t* offsets, void* stream) {
  if (rows < 0 || k < 0 || rows * k > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("CompactSelection: rows ", rows, ", k ", k, " (need rows, k >= 0, rows * k <= ", INT_MAX, ")"));
  }
  if (offsets == nullptr || (rows > 0 && counts == nullptr) || (rows * k > 0 && (ids == nullptr || sel == nullptr))) {
    return absl::InvalidArgumentError("CompactSelection: null ids, counts, sel or offsets");
  }
  const auto grid = static_cast<unsigned>(std::clamp<int64_t>(rows, 1, kCompactMaxBlocks));
  FERRY_CUDA_RETURN_IF_ERROR(
      LaunchDependent(CompactKernel, grid, kThreads, 0, S(stream), ids, counts, rows, k, sel, offsets));
  return absl::OkStatus();
}

absl::Status MoeCombineF32(const uint16_t* slots, const float* weights, const uint16_t* shared, int64_t rows,
                           int64_t top_k, int64_t dim, float* x, void* stream, bool assign) {
  if (rows < 0 || top_k < 0 || dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoeCombineF32: rows ", rows, ", top_k ", top_k, ", dim ", dim, " (need top_k >= 0, dim >= 1)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (x == nullptr || (top_k > 0 && (slots == nullptr || weights == nullptr))) {
    return absl::InvalidArgumentError("MoeCombineF32: null slots, weights or x");
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MoeCombineKernel<__nv_bfloat16>, GridFor(rows * dim), kThreads, 0,
                                             S(stream), Bf(slots), weights, Bf(shared), top_k, dim, rows * dim, assign,
                                             x));
  return absl::OkStatus();
}

absl::Status RmsNormF32(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y,
                        void* stream) {
  if (dim < 1 || rows < 0 || rows > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("RmsNormF32: rows ", rows, ", dim ", dim));
  }
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(RmsNormF32Kernel<float, 0>, static_cast<unsigned>(rows), kNormThreads, 0,
                                             S(stream), const_cast<float*>(x), dim, w, eps, y, nullptr, nullptr, 0,
                                             SinkhornSite{}));
  return absl::OkStatus();
}

absl::Status LayerNormF32(const float* x, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
                          float* y, void* stream) {
  if (dim < 1 || rows < 0 || rows > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("LayerNormF32: rows ", rows, ", dim ", dim));
  }
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(LayerNormKernel<float>, static_cast<unsigned>(rows), kThreads, 0,
                                             S(stream), x, dim, w, b, eps, y));
  return absl::OkStatus();
}

absl::Status AddF32(float* x, const float* y, int64_t n, void* stream) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("AddF32: n is ", n));
  if (n == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(AddKernel<float>, GridFor(n), kThreads, 0, S(stream), x, y, n));
  return absl::OkStatus();
}

absl::Status CopyRowsF32(const float* src, int64_t src_stride, const int32_t* src_idx, float* dst, int64_t dst_stride,
                         const int32_t* dst_idx, int64_t rows, int64_t cols, void* stream) {
  if (rows < 0 || cols < 1 || src_stride < cols || dst_stride < cols) {
    return absl::InvalidArgumentError(absl::StrCat("CopyRowsF32: rows ", rows, ", cols ", cols, ", src_stride ",
                                                   src_stride, ", dst_stride ", dst_stride,
                                                   " (need cols >= 1 and both strides >= cols)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (src == nullptr || dst == nullptr) return absl::InvalidArgumentError("CopyRowsF32: null src or dst");
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(CopyRowsKernel<float>, GridFor(rows * cols), kThreads, 0, S(stream), src,
                                             src_stride, src_idx, dst, dst_stride, dst_idx, cols, rows * cols));
  return absl::OkStatus();
}

absl::Status WritePagedRowsF32(const float* src, int64_t rows, int64_t src_stride, int64_t cols, int64_t col_offset,
                               const int64_t* positions, const PagedCacheF32& cache, void* stream) {
  if (rows < 0 || cols < 1 || col_offset < 0 || col_offset + cols > cache.width || src_stride < cols) {
    return absl::InvalidArgumentError(absl::StrCat("WritePagedRowsF32: rows ", rows, ", cols ", cols,
                                                   ", col_offset ", col_offset, ", src_stride ", src_stride,
                                                   ", cache width ", cache.width,
                                                   " (need col_offset + cols <= width, src_stride >= cols)"));
  }
  PagedViewF32 view;
  if (absl::Status s = MakePagedView(cache, "WritePagedRowsF32", &view); !s.ok()) return s;
  if (rows == 0) return absl::OkStatus();
  if (src == nullptr || positions == nullptr) {
    return absl::InvalidArgumentError("WritePagedRowsF32: null src or positions");
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(WritePagedKernel<float>, GridFor(rows * cols), kThreads, 0, S(stream), src,
                                             src_stride, cols, col_offset, positions, view, rows * cols));
  return absl::OkStatus();
}

absl::Status MoeCombineF32Slots(const float* slots, const float* weights, const float* shared, int64_t rows,
                                int64_t top_k, int64_t dim, float* x, void* stream, bool assign) {
  if (rows < 0 || top_k < 0 || dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat("MoeCombineF32Slots: rows ", rows, ", top_k ", top_k, ", dim ", dim,
                                                   " (need top_k >= 0, dim >= 1)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (x == nullptr || (top_k > 0 && (slots == nullptr || weights == nullptr))) {
    return absl::InvalidArgumentError("MoeCombineF32Slots: null slots, weights or x");
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MoeCombineKernel<float>, GridFor(rows * dim), kThreads, 0, S(stream),
                                             slots, weights, shared, top_k, dim, rows * dim, assign, x));
  return absl::OkStatus();
}

namespace {

template <typename T>
absl::Status MixInNorm(const char* op, const float* h, const float* pre, int64_t rows, int64_t streams, int64_t dim,
                       const T* w, float eps, float* u, T* y, void* stream) {
  if (rows < 0 || rows > INT_MAX || streams < 1 || streams > 8 || dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": rows ", rows, ", streams ", streams, ", dim ", dim, " (need 1 <= streams <= 8)"));
  }
  if (rows == 0) return absl::OkStatus();
  const bool fused =
      dim % 4 == 0 && reinterpret_cast<uintptr_t>(h) % 16 == 0 && reinterpret_cast<uintptr_t>(u) % 16 == 0;
  if (!fused) {  // the two launches the fused one equals
    FERRY_RETURN_IF_ERROR(MhcMixIn(h, pre, rows, streams, dim, u, stream));
    FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(RmsNormF32Kernel<T, 0>, static_cast<unsigned>(rows), kNormThreads, 0,
                                               S(stream), u, dim, w, eps, y, nullptr, nullptr, 0, SinkhornSite{}));
    return absl::OkStatus();
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(RmsNormF32Kernel<T, 0>, static_cast<unsigned>(rows), kNormThreads, 0,
                                             S(stream), u, dim, w, eps, y, h, const_cast<float*>(pre),
                                             static_cast<int>(streams), SinkhornSite{}));
  return absl::OkStatus();
}

// MhcSinkhorn then MixInNorm: one launch when the mix fuses and streams == 4 (the models' hc_mult;
// the kernel is compiled for it alone), else MhcSinkhorn's launch then MixInNorm's.
template <typename T>
absl::Status SinkhornMixInNorm(const char* op, const float* m, const float* scale, const float* base, float hc_eps,
                               int64_t iters, float* pre, float* post, float* comb, const float* h, int64_t rows,
                               int64_t streams, int64_t dim, const T* w, float eps, float* u, T* y, void* stream) {
  constexpr int kStreams = 4;
  const bool fused = streams == kStreams && rows >= 0 && rows <= INT_MAX && dim >= 1 && dim % 4 == 0 &&
                     reinterpret_cast<uintptr_t>(h) % 16 == 0 && reinterpret_cast<uintptr_t>(u) % 16 == 0 &&
                     m != nullptr && scale != nullptr && base != nullptr && pre != nullptr && post != nullptr &&
                     comb != nullptr;
  if (!fused) {
    FERRY_RETURN_IF_ERROR(MhcSinkhorn(m, rows, streams, scale, base, hc_eps, iters, pre, post, comb, stream));
    return MixInNorm(op, h, pre, rows, streams, dim, w, eps, u, y, stream);
  }
  if (rows == 0) return absl::OkStatus();
  const SinkhornSite site{m, scale, base, hc_eps, iters, post, comb};
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(RmsNormF32Kernel<T, kStreams>, static_cast<unsigned>(rows), kNormThreads,
                                             0, S(stream), u, dim, w, eps, y, h, pre, kStreams, site));
  return absl::OkStatus();
}

}  // namespace

absl::Status MhcMixInNormToBf16(const float* h, const float* pre, int64_t rows, int64_t streams, int64_t dim,
                                const uint16_t* w, float eps, float* u, uint16_t* y, void* stream) {
  return MixInNorm("MhcMixInNormToBf16", h, pre, rows, streams, dim, Bf(w), eps, u, Bf(y), stream);
}

absl::Status MhcMixInNormF32(const float* h, const float* pre, int64_t rows, int64_t streams, int64_t dim,
                             const float* w, float eps, float* u, float* y, void* stream) {
  return MixInNorm("MhcMixInNormF32", h, pre, rows, streams, dim, w, eps, u, y, stream);
}

absl::Status MhcSinkhornMixInNormToBf16(const float* m, const float* scale, const float* base, float hc_eps,
                                        int64_t iters, float* pre, float* post, float* comb, const float* h,
                                        int64_t rows, int64_t streams, int64_t dim, const uint16_t* w, float eps,
                                        float* u, uint16_t* y, void* stream) {
  return SinkhornMixInNorm("MhcSinkhornMixInNormToBf16", m, scale, base, hc_eps, iters, pre, post, comb, h, rows,
                           streams, dim, Bf(w), eps, u, Bf(y), stream);
}

absl::Status MhcSinkhornMixInNormF32(const float* m, const float* scale, const float* base, float hc_eps,
                                     int64_t iters, float* pre, float* post, float* comb, const float* h,
                                     int64_t rows, int64_t streams, int64_t dim, const float* w, float eps, float* u,
                                     float* y, void* stream) {
  return SinkhornMixInNorm("MhcSinkhornMixInNormF32", m, scale, base, hc_eps, iters, pre, post, comb, h, rows,
                           streams, dim, w, eps, u, y, stream);
}

}  // namespace ferry::kernels::cuda
