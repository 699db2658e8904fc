// Lightning-indexer scores over a paged bf16 key cache (IndexerScores in ops.h): the CUDA-core
// kernel, for the shapes the tensor-core path (indexer_tc.cu: dim 128, heads 16/32/48/64 from
// sm_90 on) does not take.
//
// Grid (key blocks, query rows); a block of 8 warps scores kKeysPerBlock consecutive keys of one
// row. The row's queries sit in shared memory as float32, each head's row padded by one float so
// that lane h reading q[h][e] for the same e hits 32 different banks. Per key, a warp stages the
// key as float32 in its shared slot, lane h computes head h's dot (and head h + 32's), applies
// scale, ReLU and the head weight, and the warp sums the heads with shuffles.
#include <cuda_bf16.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/indexer_tc.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/paged.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKeysPerBlock = 256;
constexpr int kMaxHeads = 64;
constexpr int kHeadsPerLane = kMaxHeads / 32;
constexpr int64_t kMaxSharedFloats = 11000;  // 44,000 bytes, under the 48 KiB default

__global__ void __launch_bounds__(kThreads)
    IndexerScoresKernel(const __nv_bfloat16* __restrict__ qi, const float* __restrict__ w, int heads, int dim,
                        PagedView keys, const int32_t* __restrict__ n_keys, float scale, float* __restrict__ scores,
                        int64_t score_stride) {
  extern __shared__ float smem[];
  const int qpitch = dim + 1;
  float* q = smem;                          // [heads, dim + 1]
  float* wh = q + heads * qpitch;           // [heads]
  float* kbuf = wh + heads;                 // [kWarps, dim]
  const int64_t r = blockIdx.y;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kKeysPerBlock;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* row_scores = scores + r * score_stride;
  const int64_t n = n_keys[r];
  if (n < 0 || n > score_stride) {  // the whole row becomes NaN, each block its own range
    for (int64_t s = k0 + tid; s < k0 + kKeysPerBlock && s < score_stride; s += kThreads) {
      row_scores[s] = __int_as_float(0x7fc00000);
    }
    return;
  }
  if (k0 >= n) return;
  for (int e = tid; e < heads * dim; e += kThreads) {
    q[(e / dim) * qpitch + e % dim] = __bfloat162float(qi[r * heads * dim + e]);
  }
  for (int h = tid; h < heads; h += kThreads) wh[h] = w[r * heads + h];
  __syncthreads();

  float* kw = kbuf + warp * dim;
  const int64_t k_end = k0 + kKeysPerBlock < n ? k0 + kKeysPerBlock : n;
  for (int64_t s = k0 + warp; s < k_end; s += kWarps) {
    const __nv_bfloat16* key = PagedRow(keys, r, s);
    if (key == nullptr) {  // warp-uniform
      if (lane == 0) row_scores[s] = __int_as_float(0x7fc00000);
      continue;
    }
    for (int e = lane; e < dim; e += 32) kw[e] = __bfloat162float(key[e]);
    __syncwarp();
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kHeadsPerLane; ++j) {
      const int h = lane + 32 * j;
      if (h < heads) {
        const float* qh = q + h * qpitch;
        float d = 0.0f;
        for (int e = 0; e < dim; ++e) d += qh[e] * kw[e];
        d *= scale;
        acc += wh[h] * (d > 0.0f ? d : 0.0f);  // NaN > 0 is false: a NaN dot counts as 0, as on the CPU
      }
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) row_scores[s] = acc;
    __syncwarp();  // kw is rewritten by the next key
  }
}

}  // namespace

absl::Status IndexerScores(const uint16_t* qi, const float* w, int64_t rows, int64_t heads, int64_t dim,
                           const PagedCacheBf16& keys, const int32_t* n_keys, float scale, float* scores,
                           int64_t score_stride, void* stream) {
  if (rows < 1 || rows > 65535 || heads < 1 || heads > kMaxHeads || dim < 1 || score_stride < 1 ||
      heads * (dim + 2) + kWarps * dim > kMaxSharedFloats) {
    return absl::InvalidArgumentError(absl::StrCat(
        "IndexerScores: rows ", rows, ", heads ", heads, ", dim ", dim, ", score_stride ", score_stride,
        " (need 1 <= rows <= 65535, 1 <= heads <= ", kMaxHeads, ", dim >= 1, score_stride >= 1, heads * (dim + 2) + ",
        kWarps, " * dim <= ", kMaxSharedFloats, ")"));
  }
  if (keys.width != dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("IndexerScores: key rows are ", keys.width, " wide, dim is ", dim));
  }
  PagedView view;
  if (absl::Status s = MakePagedView(keys, "IndexerScores", &view); !s.ok()) return s;
  if (qi == nullptr || w == nullptr || n_keys == nullptr || scores == nullptr) {
    return absl::InvalidArgumentError("IndexerScores: null qi, w, n_keys or scores");
  }
  if (IndexerTcApplies(qi, heads, dim, view)) {
    return IndexerScoresTc(qi, w, rows, heads, view, n_keys, scale, scores, score_stride, stream);
  }
  const int64_t key_blocks = (score_stride + kKeysPerBlock - 1) / kKeysPerBlock;
  if (key_blocks > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("IndexerScores: score_stride ", score_stride, " too large"));
  }
  const size_t shared = static_cast<size_t>(heads * (dim + 2) + kWarps * dim) * sizeof(float);
  IndexerScoresKernel<<<dim3(static_cast<unsigned>(key_blocks), static_cast<unsigned>(rows)), kThreads, shared,
                        static_cast<cudaStream_t>(stream)>>>(reinterpret_cast<const __nv_bfloat16*>(qi), w,
                                                             static_cast<int>(heads), static_cast<int>(dim), view,
                                                             n_keys, scale, scores, score_stride);
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
