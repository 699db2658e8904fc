// glm5_next's ops (ops.h): mHC stream mixing, the KDA conv / norms / gates, the pooled indexer's
// pool keys and selection. Simple, memory-bound kernels: a thread an output element, or a thread
// a (row, head) where a head's d values reduce in the CPU's order.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>

#include "common/status.h"
#include "kernels/cuda/block_sum.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/paged.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 256;
cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }
unsigned GridFor(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65536)); }
#define FERRY_GRID_LOOP(e, n)                                                                 \
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < (n); \
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)

__device__ inline float ToF(float v) { return v; }
__device__ inline float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ inline T FromF(float v);
template <>
__device__ inline float FromF<float>(float v) { return v; }
template <>
__device__ inline __nv_bfloat16 FromF<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
__device__ inline float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void MixInKernel(const float* __restrict__ h, const float* __restrict__ pre, int64_t streams, int64_t dim,
                            int64_t total, float* __restrict__ u) {
  PdlLaunchDependents();
  PdlWait();
  FERRY_GRID_LOOP(e, total) {
    const int64_t r = e / dim, d = e % dim;
    float acc = 0.0f;
    for (int64_t j = 0; j < streams; ++j) acc += pre[r * streams + j] * h[(r * streams + j) * dim + d];
    u[e] = acc;
  }
}

// One block of kNormThreads per (row, output): a fixed-order dot of in values (thread t sums the
// 4-element pieces t, t + kNormThreads, ... when both rows are 16-byte aligned and in % 4 == 0,
// else the elements t, t + kNormThreads, ...; then a fixed tree). All of a thread's loads are
// issued together (the loop is unrolled): a block is one round trip, not one per piece. With
// `norm`, x's row is first scaled by its RowInvRms (block_sum.cuh), each value as RmsNormF32 with
// a weight of ones scales it: the same bits as that RMSNorm followed by this dot.
__global__ void __launch_bounds__(kNormThreads)
    RowDotKernel(const float* __restrict__ x, int64_t in, const float* __restrict__ w, int64_t out, bool norm,
                 float eps, float* __restrict__ y) {
  PdlLaunchDependents();
  PdlWait();
  __shared__ float part[kNormThreads / 32];
  const int64_t ro = blockIdx.x, r = ro / out, o = ro % out;
  const float* xr = x + r * in;
  const float* wr = w + o * in;
  const float inv =
      norm ? RowInvRms(xr, in, in % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0, eps, part) : 1.0f;
  const bool vec = in % 4 == 0 && (reinterpret_cast<uintptr_t>(xr) | reinterpret_cast<uintptr_t>(wr)) % 16 == 0;
  const int64_t pieces = vec ? in / 4 : 0;
  float acc = 0.0f;
#pragma unroll 4
  for (int64_t p = threadIdx.x; p < pieces; p += kNormThreads) {
    float4 a = reinterpret_cast<const float4*>(xr)[p];
    const float4 b = reinterpret_cast<const float4*>(wr)[p];
    if (norm) a = float4{a.x * inv, a.y * inv, a.z * inv, a.w * inv};  // RmsNormF32's values (weight 1)
    acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
  }
  for (int64_t i = 4 * pieces + threadIdx.x; i < in; i += kNormThreads) {
    acc += (norm ? xr[i] * inv : xr[i]) * wr[i];
  }
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int i = 0; i < kNormThreads / 32; ++i) total += part[i];
    y[ro] = total;
  }
}

template <typename T>
__global__ void MixOutKernel(float* h, const float* __restrict__ post, const float* __restrict__ comb,
                             const T* __restrict__ y, int64_t streams, int64_t dim, int64_t total) {
  PdlLaunchDependents();
  PdlWait();
  FERRY_GRID_LOOP(e, total) {  // e over (row, channel): the thread owns all streams of it
    const int64_t r = e / dim, d = e % dim;
    float old[8], next[8];
    for (int64_t j = 0; j < streams; ++j) old[j] = h[(r * streams + j) * dim + d];
    const float yv = ToF(y[e]);
    for (int64_t k = 0; k < streams; ++k) {
      float acc = post[r * streams + k] * yv;
      for (int64_t j = 0; j < streams; ++j) acc += comb[(r * streams + j) * streams + k] * old[j];
      next[k] = acc;
    }
    for (int64_t k = 0; k < streams; ++k) h[(r * streams + k) * dim + d] = next[k];
  }
}

// Up to three convolutions of one shape in one launch (q, k and v): blockIdx.y picks the set.
template <typename T>
struct ConvSets {
  const T* x[3];
  const float* weight[3];
  float* tail[3];
  float* y[3];
};

template <typename T>
__global__ void ConvSiluKernel(ConvSets<T> sets, int64_t n, int64_t channels, int kernel) {
  PdlLaunchDependents();
  PdlWait();
  const T* __restrict__ x = sets.x[blockIdx.y];
  const float* __restrict__ weight = sets.weight[blockIdx.y];
  float* tail = sets.tail[blockIdx.y];
  float* __restrict__ y = sets.y[blockIdx.y];
  FERRY_GRID_LOOP(c, channels) {
    float win[8];  // the last kernel - 1 inputs, oldest first, then the new one
    for (int j = 0; j < kernel - 1; ++j) win[j] = tail[j * channels + c];
    for (int64_t t = 0; t < n; ++t) {
      win[kernel - 1] = ToF(x[t * channels + c]);
      float acc = 0.0f;
      for (int j = 0; j < kernel; ++j) acc += weight[c * kernel + j] * win[j];
      y[t * channels + c] = acc / (1.0f + expf(-acc));
      for (int j = 0; j + 1 < kernel; ++j) win[j] = win[j + 1];
    }
    for (int j = 0; j < kernel - 1; ++j) tail[j * channels + c] = win[j];
  }
}

// One warp a (row, head): lane l sums the squares of elements l, l + 32, ... in order, then the
// warp adds the lanes by a fixed xor tree (the same whatever the row count).
__device__ __forceinline__ float WarpSum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

#define FERRY_WARP_LOOP(rh, n)                                                                         \
  for (int64_t rh = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; rh < (n); \
       rh += static_cast<int64_t>(gridDim.x) * blockDim.x / 32)

// blockIdx.y 0: x0 scaled by scale0; 1: x1 by scale1 (q and k in one launch).
__global__ void L2NormKernel(float* x0, float scale0, float* x1, float scale1, int64_t d, int64_t total) {
  PdlLaunchDependents();
  PdlWait();
  float* x = blockIdx.y == 0 ? x0 : x1;
  const float scale = blockIdx.y == 0 ? scale0 : scale1;
  const int lane = threadIdx.x & 31;
  FERRY_WARP_LOOP(rh, total) {
    float* v = x + rh * d;
    float sum = 0.0f;
    for (int64_t i = lane; i < d; i += 32) sum += v[i] * v[i];
    const float inv = 1.0f / sqrtf(WarpSum(sum) + 1e-6f);
    for (int64_t i = lane; i < d; i += 32) v[i] = v[i] * inv * scale;
  }
}

// h[r, j, d] = u[r, d] for every stream j: each stream starts as the embedding.
__global__ void StreamsKernel(const float* __restrict__ u, int64_t streams, int64_t dim, int64_t total,
                              float* __restrict__ h) {
  PdlLaunchDependents();
  PdlWait();
  FERRY_GRID_LOOP(e, total) {
    const int64_t r = e / dim, d = e % dim;
    const float v = u[e];
    for (int64_t j = 0; j < streams; ++j) h[(r * streams + j) * dim + d] = v;
  }
}

template <typename T>
__global__ void DecayKernel(const T* __restrict__ f, int64_t d, int64_t channels, const float* __restrict__ a_log,
                            const float* __restrict__ dt_bias, float lower_bound, int64_t total, float* __restrict__ g) {
  PdlLaunchDependents();
  PdlWait();
  FERRY_GRID_LOOP(e, total) {
    const int64_t c = e % channels;
    g[e] = lower_bound * Sigmoid(expf(a_log[c / d]) * (ToF(f[e]) + dt_bias[c]));
  }
}

__global__ void SigmoidKernel(float* x, int64_t n) {
  PdlLaunchDependents();
  PdlWait();
  FERRY_GRID_LOOP(e, n) x[e] = Sigmoid(x[e]);
}

template <typename T>
__global__ void KdaOutputKernel(const float* __restrict__ o, const T* __restrict__ gate, int64_t d,
                                const float* __restrict__ o_norm, float eps, int64_t total, T* __restrict__ out) {
  PdlLaunchDependents();
  PdlWait();
  const int lane = threadIdx.x & 31;
  FERRY_WARP_LOOP(rh, total) {  // a warp a (row, head), as L2NormKernel
    const float* v = o + rh * d;
    float sum = 0.0f;
    for (int64_t i = lane; i < d; i += 32) sum += v[i] * v[i];
    const float inv = rsqrtf(WarpSum(sum) / static_cast<float>(d) + eps);
    for (int64_t i = lane; i < d; i += 32) {
      out[rh * d + i] = FromF<T>(o_norm[i] * (v[i] * inv) * Sigmoid(ToF(gate[rh * d + i])));
    }
  }
}

template <typename T>
__global__ void PooledKeysKernel(PagedViewOf<T> keys, PagedViewOf<T> gates, PagedViewOf<T> pools, int64_t row,
                                 int64_t p0, int64_t kpool, const float* __restrict__ ape, int64_t dim, int64_t total) {
  PdlLaunchDependents();
  PdlWait();
  FERRY_GRID_LOOP(e, total) {  // e over (pool - p0, channel)
    const int64_t p = p0 + e / dim, c = e % dim;
    const T* out_row = PagedRow(pools, row, p);
    if (out_row == nullptr) continue;
    float mx = -INFINITY;
    bool bad = false;
    for (int64_t j = 0; j < kpool; ++j) {
      const T* gr = PagedRow(gates, row, p * kpool + j);
      if (gr == nullptr) {
        bad = true;
        break;
      }
      mx = fmaxf(mx, ToF(gr[c]) + ape[j * dim + c]);
    }
    float acc = __int_as_float(0x7fc00000);
    if (!bad) {
      float den = 0.0f;
      for (int64_t j = 0; j < kpool; ++j) den += expf(ToF(PagedRow(gates, row, p * kpool + j)[c]) + ape[j * dim + c] - mx);
      acc = 0.0f;
      for (int64_t j = 0; j < kpool; ++j) {
        const T* kr = PagedRow(keys, row, p * kpool + j);
        if (kr == nullptr) {
          acc = __int_as_float(0x7fc00000);
          break;
        }
        const float w = expf(ToF(PagedRow(gates, row, p * kpool + j)[c]) + ape[j * dim + c] - mx);
        acc += w / den * ToF(kr[c]);
      }
    }
    const_cast<T*>(out_row)[c] = FromF<T>(acc);
  }
}

// A block a row, its threads striding over the row's pools (one thread a row wrote 2,048 ids
// one after another: 6.6 us; a 64-bit division an element, 7 us on an H200 at any batch).
__global__ void ExpandKernel(const int32_t* __restrict__ ids, int64_t k, const int64_t* __restrict__ pos, int64_t rows,
                             int64_t kpool, const int32_t* __restrict__ offsets, int32_t* __restrict__ sel) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = pos[r], n = (t + 1) / kpool;
    int32_t* out = sel + offsets[r];
    if (n <= k) {
      for (int64_t i = threadIdx.x; i <= t; i += blockDim.x) out[i] = static_cast<int32_t>(i);
      continue;
    }
    const int32_t* row_ids = ids + r * k;
    for (int64_t p = threadIdx.x; p < k; p += blockDim.x) {  // pool by pool: no division an element
      const int64_t first = row_ids[p] * kpool;
      int32_t* dst = out + p * kpool;
      for (int64_t j = 0; j < kpool; ++j) dst[j] = static_cast<int32_t>(first + j);
    }
    for (int64_t i = n * kpool + threadIdx.x; i <= t; i += blockDim.x) {
      out[k * kpool + (i - n * kpool)] = static_cast<int32_t>(i);
    }
  }
}

template <typename U>
const __nv_bfloat16* Bf(const U* p) {
  return reinterpret_cast<const __nv_bfloat16*>(p);
}
template <typename U>
__nv_bfloat16* Bf(U* p) {
  return reinterpret_cast<__nv_bfloat16*>(p);
}

absl::Status CheckRows(const char* op, int64_t rows, int64_t a, int64_t b) {
  if (rows < 0 || a < 1 || b < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": rows ", rows, ", sizes ", a, " and ", b, " (need >= 1)"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status MixOut(float* h, const float* post, const float* comb, const T* y, int64_t rows, int64_t streams,
                    int64_t dim, void* stream) {
  if (rows < 0 || streams < 1 || streams > 8 || dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("MhcMixOut: rows ", rows, ", streams ", streams, ", dim ", dim, " (need 1 <= streams <= 8)"));
  }
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MixOutKernel<T>, GridFor(rows * dim), kThreads, 0, S(stream), h, post,
                                             comb, y, streams, dim, rows * dim));
  return absl::OkStatus();
}

template <typename T>
absl::Status ConvSilu(const ConvSets<T>& sets, int n_sets, int64_t n, int64_t channels, int64_t kernel,
                      void* stream) {
  if (n < 0 || channels < 1 || kernel < 2 || kernel > 8) {
    return absl::InvalidArgumentError(absl::StrCat("KdaConvSilu: n ", n, ", channels ", channels, ", kernel ", kernel,
                                                   " (need channels >= 1, 2 <= kernel <= 8)"));
  }
  if (n == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(ConvSiluKernel<T>, dim3(GridFor(channels), n_sets), kThreads, 0, S(stream),
                                             sets, n, channels, static_cast<int>(kernel)));
  return absl::OkStatus();
}

template <typename T>
absl::Status ConvSiluOne(const T* x, int64_t n, int64_t channels, int64_t kernel, const float* weight, float* tail,
                         float* y, void* stream) {
  return ConvSilu(ConvSets<T>{{x}, {weight}, {tail}, {y}}, 1, n, channels, kernel, stream);
}

template <typename T>
absl::Status ConvSiluQkv(const T* const* x, int64_t n, int64_t channels, int64_t kernel, const float* const* weight,
                         float* tail, float* const* y, void* stream) {
  const int64_t stride = (kernel - 1) * channels;
  return ConvSilu(ConvSets<T>{{x[0], x[1], x[2]},
                              {weight[0], weight[1], weight[2]},
                              {tail, tail + stride, tail + 2 * stride},
                              {y[0], y[1], y[2]}},
                  3, n, channels, kernel, stream);
}

template <typename T>
absl::Status Decay(const T* f, int64_t rows, int64_t heads, int64_t d, const float* a_log, const float* dt_bias,
                   float lower_bound, float* g, void* stream) {
  FERRY_RETURN_IF_ERROR(CheckRows("KdaDecay", rows, heads, d));
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(DecayKernel<T>, GridFor(rows * heads * d), kThreads, 0, S(stream), f, d,
                                             heads * d, a_log, dt_bias, lower_bound, rows * heads * d, g));
  return absl::OkStatus();
}

template <typename T>
absl::Status KdaOut(const float* o, const T* gate, int64_t rows, int64_t heads, int64_t d, const float* o_norm,
                    float eps, T* out, void* stream) {
  FERRY_RETURN_IF_ERROR(CheckRows("KdaOutput", rows, heads, d));
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(KdaOutputKernel<T>, GridFor(rows * heads * 32), kThreads, 0, S(stream), o,
                                             gate, d, o_norm, eps, rows * heads, out));
  return absl::OkStatus();
}

template <typename Cache, typename T>
absl::Status PooledKeys(const Cache& keys, const Cache& gates, const Cache& pools, int64_t row, int64_t p0, int64_t p1,
                        int64_t kpool, const float* ape, void* stream) {
  if (kpool < 1 || p0 < 0 || p1 < p0 || row < 0 || keys.width != gates.width || keys.width != pools.width) {
    return absl::InvalidArgumentError(absl::StrCat("PooledKeys: pools [", p0, ", ", p1, "), kpool ", kpool, ", row ",
                                                   row, ", widths ", keys.width, ", ", gates.width, ", ", pools.width,
                                                   " (need kpool >= 1, p0 <= p1, one width)"));
  }
  PagedViewOf<T> kv, gv, pv;
  FERRY_RETURN_IF_ERROR(MakePagedView(keys, "PooledKeys", &kv));
  FERRY_RETURN_IF_ERROR(MakePagedView(gates, "PooledKeys", &gv));
  FERRY_RETURN_IF_ERROR(MakePagedView(pools, "PooledKeys", &pv));
  const int64_t total = (p1 - p0) * keys.width;
  if (total == 0) return absl::OkStatus();
  if (ape == nullptr) return absl::InvalidArgumentError("PooledKeys: null ape");
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(PooledKeysKernel<T>, GridFor(total), kThreads, 0, S(stream), kv, gv, pv,
                                             row, p0, kpool, ape, keys.width, total));
  return absl::OkStatus();
}

}  // namespace

namespace {

absl::Status RowDot(const char* op, const float* x, int64_t rows, int64_t in, const float* w, int64_t out, bool norm,
                    float eps, float* y, void* stream) {
  if (rows < 0 || in < 1 || out < 1 || rows * out > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": rows ", rows, ", in ", in, ", out ", out,
                                                   " (need in, out >= 1, rows * out <= ", INT_MAX, ")"));
  }
  if (rows == 0) return absl::OkStatus();
  if (x == nullptr || w == nullptr || y == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null pointer"));
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(RowDotKernel, static_cast<unsigned>(rows * out), kNormThreads, 0,
                                             S(stream), x, in, w, out, norm, eps, y));
  return absl::OkStatus();
}

}  // namespace

absl::Status LinearF32RowInvariant(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y,
                                   void* stream) {
  return RowDot("LinearF32RowInvariant", x, rows, in, w, out, false, 0.0f, y, stream);
}

absl::Status RmsNormLinearF32RowInvariant(const float* x, int64_t rows, int64_t in, float eps, const float* w,
                                          int64_t out, float* y, void* stream) {
  return RowDot("RmsNormLinearF32RowInvariant", x, rows, in, w, out, true, eps, y, stream);
}

absl::Status MhcMixIn(const float* h, const float* pre, int64_t rows, int64_t streams, int64_t dim, float* u,
                      void* stream) {
  FERRY_RETURN_IF_ERROR(CheckRows("MhcMixIn", rows, streams, dim));
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MixInKernel, GridFor(rows * dim), kThreads, 0, S(stream), h, pre, streams,
                                             dim, rows * dim, u));
  return absl::OkStatus();
}

absl::Status MhcMixOutBf16(float* h, const float* post, const float* comb, const uint16_t* y, int64_t rows,
                           int64_t streams, int64_t dim, void* stream) {
  return MixOut(h, post, comb, Bf(y), rows, streams, dim, stream);
}
absl::Status MhcMixOutF32(float* h, const float* post, const float* comb, const float* y, int64_t rows,
                          int64_t streams, int64_t dim, void* stream) {
  return MixOut(h, post, comb, y, rows, streams, dim, stream);
}

absl::Status KdaConvSiluBf16(const uint16_t* x, int64_t n, int64_t channels, int64_t kernel, const float* weight,
                             float* tail, float* y, void* stream) {
  return ConvSiluOne(Bf(x), n, channels, kernel, weight, tail, y, stream);
}
absl::Status KdaConvSiluF32(const float* x, int64_t n, int64_t channels, int64_t kernel, const float* weight,
                            float* tail, float* y, void* stream) {
  return ConvSiluOne(x, n, channels, kernel, weight, tail, y, stream);
}
absl::Status KdaConvSiluQkvBf16(const uint16_t* const x[3], int64_t n, int64_t channels, int64_t kernel,
                                const float* const weight[3], float* tail, float* const y[3], void* stream) {
  const __nv_bfloat16* xb[3] = {Bf(x[0]), Bf(x[1]), Bf(x[2])};
  return ConvSiluQkv(xb, n, channels, kernel, weight, tail, y, stream);
}
absl::Status KdaConvSiluQkvF32(const float* const x[3], int64_t n, int64_t channels, int64_t kernel,
                               const float* const weight[3], float* tail, float* const y[3], void* stream) {
  return ConvSiluQkv(x, n, channels, kernel, weight, tail, y, stream);
}

absl::Status KdaL2Norm(float* x, int64_t rows, int64_t heads, int64_t d, float scale, void* stream) {
  FERRY_RETURN_IF_ERROR(CheckRows("KdaL2Norm", rows, heads, d));
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(L2NormKernel, GridFor(rows * heads * 32), kThreads, 0, S(stream), x, scale,
                                             x, scale, d, rows * heads));
  return absl::OkStatus();
}

absl::Status KdaL2NormQk(float* q, float q_scale, float* k, int64_t rows, int64_t heads, int64_t d, void* stream) {
  FERRY_RETURN_IF_ERROR(CheckRows("KdaL2NormQk", rows, heads, d));
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(L2NormKernel, dim3(GridFor(rows * heads * 32), 2), kThreads, 0, S(stream),
                                             q, q_scale, k, 1.0f, d, rows * heads));
  return absl::OkStatus();
}

absl::Status MhcStreamsF32(const float* u, int64_t rows, int64_t streams, int64_t dim, float* h, void* stream) {
  FERRY_RETURN_IF_ERROR(CheckRows("MhcStreamsF32", rows, streams, dim));
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(
      LaunchDependent(StreamsKernel, GridFor(rows * dim), kThreads, 0, S(stream), u, streams, dim, rows * dim, h));
  return absl::OkStatus();
}

absl::Status KdaDecayBf16(const uint16_t* f, int64_t rows, int64_t heads, int64_t d, const float* a_log,
                          const float* dt_bias, float lower_bound, float* g, void* stream) {
  return Decay(Bf(f), rows, heads, d, a_log, dt_bias, lower_bound, g, stream);
}
absl::Status KdaDecayF32(const float* f, int64_t rows, int64_t heads, int64_t d, const float* a_log,
                         const float* dt_bias, float lower_bound, float* g, void* stream) {
  return Decay(f, rows, heads, d, a_log, dt_bias, lower_bound, g, stream);
}

absl::Status SigmoidF32(float* x, int64_t n, void* stream) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("SigmoidF32: n is ", n));
  if (n == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(SigmoidKernel, GridFor(n), kThreads, 0, S(stream), x, n));
  return absl::OkStatus();
}

absl::Status KdaOutputBf16(const float* o, const uint16_t* gate, int64_t rows, int64_t heads, int64_t d,
                           const float* o_norm, float eps, uint16_t* out, void* stream) {
  return KdaOut(o, Bf(gate), rows, heads, d, o_norm, eps, Bf(out), stream);
}
absl::Status KdaOutputF32(const float* o, const float* gate, int64_t rows, int64_t heads, int64_t d,
                          const float* o_norm, float eps, float* out, void* stream) {
  return KdaOut(o, gate, rows, heads, d, o_norm, eps, out, stream);
}

absl::Status PooledKeysBf16(const PagedCacheBf16& keys, const PagedCacheBf16& gates, const PagedCacheBf16& pools,
                            int64_t row, int64_t p0, int64_t p1, int64_t kpool, const float* ape, void* stream) {
  return PooledKeys<PagedCacheBf16, __nv_bfloat16>(keys, gates, pools, row, p0, p1, kpool, ape, stream);
}
absl::Status PooledKeysF32(const PagedCacheF32& keys, const PagedCacheF32& gates, const PagedCacheF32& pools,
                           int64_t row, int64_t p0, int64_t p1, int64_t kpool, const float* ape, void* stream) {
  return PooledKeys<PagedCacheF32, float>(keys, gates, pools, row, p0, p1, kpool, ape, stream);
}

absl::Status ExpandPoolSelection(const int32_t* pool_ids, int64_t k, const int64_t* pos, int64_t rows, int64_t kpool,
                                 const int32_t* offsets, int32_t* sel, void* stream) {
  if (rows < 0 || k < 0 || kpool < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExpandPoolSelection: rows ", rows, ", k ", k, ", kpool ", kpool, " (need k >= 0, kpool >= 1)"));
  }
  if (rows == 0) return absl::OkStatus();
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(ExpandKernel, static_cast<unsigned>(std::min<int64_t>(rows, 65535)),
                                             kThreads, 0, S(stream), pool_ids, k, pos, rows, kpool, offsets, sel));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
