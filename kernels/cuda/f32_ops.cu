// Float32-activation twins of RoPE, SwiGLU, MLA decode attention and the indexer scores (the
// verification precision of ops.h). Same structure as the bf16 kernels, float32 loads.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/paged.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 256;
cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

__global__ void RopeF32Kernel(float* x, int64_t heads, int64_t row_stride, int64_t head_stride, int64_t offset,
                              int64_t half, int64_t pairs, const int64_t* __restrict__ positions,
                              const float* __restrict__ inv_freq) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = p % half, rh = p / half;
    const int64_t h = rh % heads, r = rh / heads;
    float* e = x + r * row_stride + h * head_stride + offset + 2 * j;
    const float angle = static_cast<float>(positions[r]) * inv_freq[j];
    const float c = cosf(angle), s = sinf(angle);
    const float a = e[0], b = e[1];
    e[0] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    e[1] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  }
}

__global__ void SwiGluF32Kernel(const float* gate, const float* up, int64_t cols, int64_t in_stride, int64_t total,
                                float limit, float* out) {
  PdlLaunchDependents();
  PdlWait();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, i = e % cols;
    float g = gate[r * in_stride + i], u = up[r * in_stride + i];
    if (limit > 0.0f) {
      g = fminf(g, limit);
      u = fmaxf(fminf(u, limit), -limit);
    }
    out[e] = g / (1.0f + expf(-g)) * u;
  }
}

// One block of 128 threads per (row, head); tiles of kTile selected tokens: a warp a token for
// the scores, then every thread updates the running softmax and its channels d = tid + 128 a.
constexpr int kMlaThreads = 128;
constexpr int kMlaWarps = kMlaThreads / 32;
constexpr int kTile = 32;
constexpr int kMaxLatent = 1024;
constexpr int kAcc = kMaxLatent / kMlaThreads;

__global__ void __launch_bounds__(kMlaThreads)
    MlaDecodeF32Kernel(const float* __restrict__ q_abs, const float* __restrict__ q_pe, int heads, int latent,
                       int rope, PagedViewF32 cache, const int32_t* __restrict__ sel,
                       const int32_t* __restrict__ sel_offsets, float scale, float* __restrict__ out) {
  PdlLaunchDependents();
  PdlWait();
  extern __shared__ float q[];  // [latent + rope]
  __shared__ float score[kTile];
  __shared__ const float* rows[kTile];
  __shared__ int bad;
  const int width = latent + rope;
  const int64_t rh = blockIdx.x, r = rh / heads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < width; i += kMlaThreads) q[i] = i < latent ? q_abs[rh * latent + i] : q_pe[rh * rope + i - latent];
  const int64_t begin = sel_offsets[r], end = sel_offsets[r + 1];
  if (tid == 0) bad = end < begin ? 1 : 0;
  __syncthreads();
  float m = -INFINITY, l = 0.0f, acc[kAcc];
#pragma unroll
  for (int a = 0; a < kAcc; ++a) acc[a] = 0.0f;
  for (int64_t t0 = begin; t0 < end; t0 += kTile) {
    const int nt = static_cast<int>(end - t0 < kTile ? end - t0 : kTile);
    if (tid < nt) {
      rows[tid] = PagedRow(cache, r, sel[t0 + tid]);
      if (rows[tid] == nullptr) bad = 1;
    }
    __syncthreads();
    for (int j = warp; j < nt; j += kMlaWarps) {
      const float* row = rows[j];
      float s = 0.0f;
      if (row != nullptr) {
        for (int i = lane; i < width; i += 32) s += q[i] * row[i];
      }
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0) score[j] = s * scale;
    }
    __syncthreads();
    float tmax = m;
    for (int j = 0; j < nt; ++j) tmax = fmaxf(tmax, score[j]);
    const float corr = expf(m - tmax);
    l *= corr;
#pragma unroll
    for (int a = 0; a < kAcc; ++a) acc[a] *= corr;
    for (int j = 0; j < nt; ++j) {
      const float p = expf(score[j] - tmax);
      l += p;
      const float* row = rows[j];
      if (row == nullptr) continue;
#pragma unroll
      for (int a = 0; a < kAcc; ++a) {
        const int d = tid + a * kMlaThreads;
        if (d < latent) acc[a] += p * row[d];
      }
    }
    m = tmax;
    __syncthreads();
  }
  const bool empty = end == begin;
  const float inv = empty ? 0.0f : 1.0f / l;
#pragma unroll
  for (int a = 0; a < kAcc; ++a) {
    const int d = tid + a * kMlaThreads;
    if (d < latent) out[rh * latent + d] = bad ? __int_as_float(0x7fc00000) : (empty ? 0.0f : acc[a] * inv);
  }
}

// The bf16 IndexerScores kernel's layout with float32 queries and keys.
constexpr int kIdxWarps = kThreads / 32;
constexpr int kKeysPerBlock = 256;
constexpr int kMaxHeads = 64;
constexpr int64_t kMaxSharedFloats = 11000;

__global__ void __launch_bounds__(kThreads)
    IndexerScoresF32Kernel(const float* __restrict__ qi, const float* __restrict__ w, int heads, int dim,
                           PagedViewF32 keys, const int32_t* __restrict__ n_keys, float scale,
                           float* __restrict__ scores, int64_t score_stride) {
  PdlLaunchDependents();
  PdlWait();
  extern __shared__ float smem[];
  const int qpitch = dim + 1;
  float* q = smem;
  float* wh = q + heads * qpitch;
  float* kbuf = wh + heads;
  const int64_t r = blockIdx.y;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kKeysPerBlock;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* row_scores = scores + r * score_stride;
  const int64_t n = n_keys[r];
  if (n < 0 || n > score_stride) {
    for (int64_t s = k0 + tid; s < k0 + kKeysPerBlock && s < score_stride; s += kThreads) {
      row_scores[s] = __int_as_float(0x7fc00000);
    }
    return;
  }
  if (k0 >= n) return;
  for (int e = tid; e < heads * dim; e += kThreads) q[(e / dim) * qpitch + e % dim] = qi[r * heads * dim + e];
  for (int h = tid; h < heads; h += kThreads) wh[h] = w[r * heads + h];
  __syncthreads();
  float* kw = kbuf + warp * dim;
  const int64_t k_end = k0 + kKeysPerBlock < n ? k0 + kKeysPerBlock : n;
  for (int64_t s = k0 + warp; s < k_end; s += kIdxWarps) {
    const float* key = PagedRow(keys, r, s);
    if (key == nullptr) {
      if (lane == 0) row_scores[s] = __int_as_float(0x7fc00000);
      continue;
    }
    for (int e = lane; e < dim; e += 32) kw[e] = key[e];
    __syncwarp();
    float acc = 0.0f;
    for (int j = 0; j < kMaxHeads / 32; ++j) {
      const int h = lane + 32 * j;
      if (h < heads) {
        const float* qh = q + h * qpitch;
        float d = 0.0f;
        for (int e = 0; e < dim; ++e) d += qh[e] * kw[e];
        d *= scale;
        acc += wh[h] * (d > 0.0f ? d : 0.0f);
      }
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) row_scores[s] = acc;
    __syncwarp();
  }
}

// out[i] = ((parts[0][i] + parts[1][i]) + parts[2][i]) + ..., one element a thread: the order the
// host's fixed-order reduction sums in (no contraction: additions only, each rounded).
__global__ void SumInRankOrderKernel(const float* __restrict__ parts, int ranks, int64_t n, int64_t stride,
                                     float* __restrict__ out) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = parts[e];
    for (int q = 1; q < ranks; ++q) s = __fadd_rn(s, parts[q * stride + e]);
    out[e] = s;
  }
}

}  // namespace

absl::Status RopeInterleavedF32(float* x, int64_t rows, int64_t heads, int64_t row_stride, int64_t head_stride,
                                int64_t offset, int64_t dim, const int64_t* positions, const float* inv_freq,
                                void* stream) {
  if (rows < 0 || heads < 0 || dim < 2 || dim % 2 != 0 || offset < 0 ||
      (heads > 1 && offset + dim > head_stride) || (rows > 1 && row_stride < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("RopeInterleavedF32: rows ", rows, ", heads ", heads,
                                                   ", row_stride ", row_stride, ", head_stride ", head_stride,
                                                   ", offset ", offset, ", dim ", dim,
                                                   " (need dim even >= 2 and offset + dim <= head_stride)"));
  }
  if (rows == 0 || heads == 0) return absl::OkStatus();
  if (x == nullptr || positions == nullptr || inv_freq == nullptr) {
    return absl::InvalidArgumentError("RopeInterleavedF32: null x, positions or inv_freq");
  }
  const int64_t half = dim / 2, pairs = rows * heads * half;
  const int64_t blocks = std::min<int64_t>((pairs + kThreads - 1) / kThreads, 65536);
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(RopeF32Kernel, static_cast<unsigned>(blocks), kThreads, 0, S(stream), x,
                                             heads, row_stride, head_stride, offset, half, pairs, positions, inv_freq));
  return absl::OkStatus();
}

absl::Status SwiGluF32(const float* gate, const float* up, int64_t rows, int64_t cols, int64_t in_stride, float limit,
                       float* out, void* stream) {
  if (rows < 0 || cols < 1 || in_stride < cols) {
    return absl::InvalidArgumentError(absl::StrCat("SwiGluF32: rows ", rows, ", cols ", cols, ", in_stride ",
                                                   in_stride, " (need cols >= 1, in_stride >= cols)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (gate == nullptr || up == nullptr || out == nullptr) return absl::InvalidArgumentError("SwiGluF32: null pointer");
  const int64_t total = rows * cols;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 65536);
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(SwiGluF32Kernel, static_cast<unsigned>(blocks), kThreads, 0, S(stream),
                                             gate, up, cols, in_stride, total, limit, out));
  return absl::OkStatus();
}

absl::Status MlaDecodeAttentionF32(const float* q_abs, const float* q_pe, int64_t rows, int64_t heads, int64_t latent,
                                   int64_t rope, const PagedCacheF32& cache, const int32_t* sel,
                                   const int32_t* sel_offsets, float scale, float* out, void* stream) {
  const int64_t width = latent + rope;
  if (rows < 0 || heads < 1 || latent < 1 || latent > kMaxLatent || rope < 0 || rows * heads > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("MlaDecodeAttentionF32: rows ", rows, ", heads ", heads, ", latent ",
                                                   latent, ", rope ", rope, " (need heads >= 1, 1 <= latent <= ",
                                                   kMaxLatent, ", rope >= 0)"));
  }
  if (cache.width != width) {
    return absl::InvalidArgumentError(absl::StrCat("MlaDecodeAttentionF32: cache rows are ", cache.width,
                                                   " wide, latent + rope is ", width));
  }
  PagedViewF32 view;
  if (absl::Status s = MakePagedView(cache, "MlaDecodeAttentionF32", &view); !s.ok()) return s;
  if (rows == 0) return absl::OkStatus();
  if (q_abs == nullptr || (rope > 0 && q_pe == nullptr) || sel == nullptr || sel_offsets == nullptr ||
      out == nullptr) {
    return absl::InvalidArgumentError("MlaDecodeAttentionF32: null q_abs, q_pe, sel, sel_offsets or out");
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MlaDecodeF32Kernel, static_cast<unsigned>(rows * heads), kMlaThreads,
                                             static_cast<size_t>(width) * sizeof(float), S(stream), q_abs, q_pe,
                                             static_cast<int>(heads), static_cast<int>(latent), static_cast<int>(rope),
                                             view, sel, sel_offsets, scale, out));
  return absl::OkStatus();
}

absl::Status IndexerScoresF32(const float* qi, const float* w, int64_t rows, int64_t heads, int64_t dim,
                              const PagedCacheF32& keys, const int32_t* n_keys, float scale, float* scores,
                              int64_t score_stride, void* stream) {
  if (rows < 1 || rows > 65535 || heads < 1 || heads > kMaxHeads || dim < 1 || score_stride < 1 ||
      heads * (dim + 2) + kIdxWarps * dim > kMaxSharedFloats) {
    return absl::InvalidArgumentError(absl::StrCat(
        "IndexerScoresF32: rows ", rows, ", heads ", heads, ", dim ", dim, ", score_stride ", score_stride,
        " (need 1 <= rows <= 65535, 1 <= heads <= ", kMaxHeads, ", dim >= 1, score_stride >= 1, heads * (dim + 2) + ",
        kIdxWarps, " * dim <= ", kMaxSharedFloats, ")"));
  }
  if (keys.width != dim) {
    return absl::InvalidArgumentError(absl::StrCat("IndexerScoresF32: key rows are ", keys.width, " wide, dim is ", dim));
  }
  PagedViewF32 view;
  if (absl::Status s = MakePagedView(keys, "IndexerScoresF32", &view); !s.ok()) return s;
  if (qi == nullptr || w == nullptr || n_keys == nullptr || scores == nullptr) {
    return absl::InvalidArgumentError("IndexerScoresF32: null qi, w, n_keys or scores");
  }
  const int64_t key_blocks = (score_stride + kKeysPerBlock - 1) / kKeysPerBlock;
  const size_t shared = static_cast<size_t>(heads * (dim + 2) + kIdxWarps * dim) * sizeof(float);
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(IndexerScoresF32Kernel,
                                             dim3(static_cast<unsigned>(key_blocks), static_cast<unsigned>(rows)),
                                             kThreads, shared, S(stream), qi, w, static_cast<int>(heads),
                                             static_cast<int>(dim), view, n_keys, scale, scores, score_stride));
  return absl::OkStatus();
}

absl::Status SumInRankOrderF32(const float* parts, int64_t ranks, int64_t n, int64_t stride, float* out,
                               void* stream) {
  if (ranks < 1 || ranks > 1024 || n < 0 || stride < n) {
    return absl::InvalidArgumentError(absl::StrCat("SumInRankOrderF32: ranks ", ranks, ", n ", n, ", stride ", stride,
                                                   " (need 1 <= ranks <= 1024, n >= 0, stride >= n)"));
  }
  if (n == 0) return absl::OkStatus();
  if (parts == nullptr || out == nullptr) return absl::InvalidArgumentError("SumInRankOrderF32: null parts or out");
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65536));
  SumInRankOrderKernel<<<blocks, kThreads, 0, S(stream)>>>(parts, static_cast<int>(ranks), n, stride, out);
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
