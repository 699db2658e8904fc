// Absorbed MLA decode attention over a paged bf16 latent cache (MlaDecodeAttention in ops.h).
//
// Two paths with one contract. The model shapes (latent 512, rope 0 or 64) run on the tensor
// cores (mla_decode_tc.cu) when MlaTcApplies says the device and the pointers' alignment allow:
// each selected row is read once for all heads of its query row, and a row's selection is split
// over the CTAs of a cluster by its own length only. Everything else (the toy and test shapes,
// q or out not 16-byte aligned, devices below sm_90 or without its shared memory) runs the
// per-head kernel below, which needs only the cache rows 16-byte aligned.
//
// Per-head kernel: one block of 128 threads per (query row, head). The row's selection is walked
// in tiles of kTile tokens: the tile's cached rows are staged in shared memory (each warp copies
// whole rows with 16-byte loads), each warp scores its rows against the query (float32 dot,
// warp-shuffle sum), then every thread updates the running max / denominator (all threads compute
// the same values from the shared scores) and its own latent channels d = tid + 128 a of the
// output. Every cached row is read once per (row, head).
#include <cuda_bf16.h>

#include <climits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/mla_decode_tc.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/paged.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 16;
constexpr int kMaxLatent = 1024;
constexpr int kMaxWidth = 1152;
constexpr int kAccPerThread = kMaxLatent / kThreads;
static_assert(kMaxLatent % kThreads == 0, "each thread owns whole channels");

// Dynamic shared memory: tile rows [kTile, width] bf16, then q [width] and scores [kTile] float.
constexpr size_t SharedBytes(int64_t width) {
  return static_cast<size_t>(kTile * width * 2 + width * 4 + kTile * 4);
}
static_assert(SharedBytes(kMaxWidth) <= 48 * 1024, "fits the default dynamic shared memory limit");

__global__ void __launch_bounds__(kThreads)
    MlaDecodeKernel(const __nv_bfloat16* __restrict__ q_abs, const __nv_bfloat16* __restrict__ q_pe, int heads,
                    int latent, int rope, PagedView cache, const int32_t* __restrict__ sel,
                    const int32_t* __restrict__ sel_offsets, float scale, __nv_bfloat16* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int width = latent + rope;
  __nv_bfloat16* tile = reinterpret_cast<__nv_bfloat16*>(smem);
  float* q = reinterpret_cast<float*>(smem + kTile * width * 2);  // width % 8 == 0 keeps this aligned
  float* score = q + width;
  __shared__ int bad;

  const int64_t rh = blockIdx.x;
  const int64_t r = rh / heads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < width; i += kThreads) {
    q[i] = i < latent ? __bfloat162float(q_abs[rh * latent + i]) : __bfloat162float(q_pe[rh * rope + i - latent]);
  }
  const int64_t begin = sel_offsets[r], end = sel_offsets[r + 1];
  if (tid == 0) bad = end < begin ? 1 : 0;
  __syncthreads();

  float m = -INFINITY, l = 0.0f;
  float acc[kAccPerThread];
#pragma unroll
  for (int a = 0; a < kAccPerThread; ++a) acc[a] = 0.0f;

  const int vecs = width / 8;  // 16-byte vectors a row
  for (int64_t t0 = begin; t0 < end; t0 += kTile) {
    const int nt = static_cast<int>(end - t0 < kTile ? end - t0 : kTile);
    for (int j = warp; j < nt; j += kWarps) {
      const __nv_bfloat16* src = PagedRow(cache, r, sel[t0 + j]);
      uint4* dst = reinterpret_cast<uint4*>(tile + j * width);
      if (src == nullptr) {
        if (lane == 0) bad = 1;
        for (int v = lane; v < vecs; v += 32) dst[v] = make_uint4(0, 0, 0, 0);
      } else {
        const uint4* s4 = reinterpret_cast<const uint4*>(src);
        for (int v = lane; v < vecs; v += 32) dst[v] = s4[v];
      }
    }
    __syncthreads();
    for (int j = warp; j < nt; j += kWarps) {
      const __nv_bfloat162* row = reinterpret_cast<const __nv_bfloat162*>(tile + j * width);
      float s = 0.0f;
      for (int p = lane; p < width / 2; p += 32) {
        const float2 c = __bfloat1622float2(row[p]);
        s += q[2 * p] * c.x + q[2 * p + 1] * c.y;
      }
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0) score[j] = s * scale;
    }
    __syncthreads();
    // Every thread runs the same softmax bookkeeping over the shared scores.
    float tmax = m;
    for (int j = 0; j < nt; ++j) tmax = fmaxf(tmax, score[j]);
    const float corr = expf(m - tmax);  // 0 on the first tile (m = -inf)
    l *= corr;
#pragma unroll
    for (int a = 0; a < kAccPerThread; ++a) acc[a] *= corr;
    for (int j = 0; j < nt; ++j) {
      const float p = expf(score[j] - tmax);
      l += p;
      const __nv_bfloat16* row = tile + j * width;
#pragma unroll
      for (int a = 0; a < kAccPerThread; ++a) {
        const int d = tid + a * kThreads;
        if (d < latent) acc[a] += p * __bfloat162float(row[d]);
      }
    }
    m = tmax;
    __syncthreads();  // the next tile overwrites tile[] and score[]
  }

  const bool empty = end == begin;
  const float inv = empty ? 0.0f : 1.0f / l;
  __nv_bfloat16* o = out + rh * latent;
#pragma unroll
  for (int a = 0; a < kAccPerThread; ++a) {
    const int d = tid + a * kThreads;
    if (d < latent) o[d] = __float2bfloat16(bad ? __int_as_float(0x7fc00000) : (empty ? 0.0f : acc[a] * inv));
  }
}

}  // namespace

int64_t MlaDecodeWorkspaceBytes(int64_t rows, int64_t heads) { return MlaWgWorkspaceBytes(rows, heads); }

absl::Status MlaDecodeAttention(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads,
                                int64_t latent, int64_t rope, const PagedCacheBf16& cache, const int32_t* sel,
                                const int32_t* sel_offsets, float scale, uint16_t* out, void* stream,
                                void* workspace, int64_t workspace_bytes) {
  const int64_t width = latent + rope;
  if (rows < 0 || heads < 1 || latent < 1 || latent > kMaxLatent || rope < 0 || width % 8 != 0 ||
      width > kMaxWidth || rows * heads > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MlaDecodeAttention: rows ", rows, ", heads ", heads, ", latent ", latent, ", rope ", rope,
        " (need heads >= 1, 1 <= latent <= ", kMaxLatent, ", rope >= 0, latent + rope a multiple of 8 and <= ",
        kMaxWidth, ", rows * heads <= ", INT_MAX, ")"));
  }
  if (cache.width != width) {
    return absl::InvalidArgumentError(absl::StrCat("MlaDecodeAttention: cache rows are ", cache.width,
                                                   " wide, latent + rope is ", width));
  }
  PagedView view;
  if (absl::Status s = MakePagedView(cache, "MlaDecodeAttention", &view); !s.ok()) return s;
  if (reinterpret_cast<uintptr_t>(cache.arena) % 16 != 0 || cache.page_stride % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("MlaDecodeAttention: cache arena at byte ",
                                                   reinterpret_cast<uintptr_t>(cache.arena) % 16,
                                                   " of 16, page_stride ", cache.page_stride,
                                                   " (need a 16-byte aligned arena, page_stride % 8 == 0)"));
  }
  if (workspace_bytes < 0 || (workspace == nullptr && workspace_bytes != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("MlaDecodeAttention: workspace_bytes ", workspace_bytes,
                                                   " with a ", workspace == nullptr ? "null" : "non-null",
                                                   " workspace (need >= 0, and 0 when null)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (q_abs == nullptr || (rope > 0 && q_pe == nullptr) || sel == nullptr || sel_offsets == nullptr ||
      out == nullptr) {
    return absl::InvalidArgumentError("MlaDecodeAttention: null q_abs, q_pe, sel, sel_offsets or out");
  }
  if (MlaTcApplies(q_abs, q_pe, rows, heads, latent, rope, cache, out)) {
    return MlaDecodeTc(q_abs, q_pe, rows, heads, rope, view, sel, sel_offsets, scale, out, workspace, workspace_bytes,
                       stream);
  }
  MlaDecodeKernel<<<static_cast<unsigned>(rows * heads), kThreads, SharedBytes(width),
                    static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const __nv_bfloat16*>(q_abs), reinterpret_cast<const __nv_bfloat16*>(q_pe),
      static_cast<int>(heads), static_cast<int>(latent), static_cast<int>(rope), view, sel, sel_offsets, scale,
      reinterpret_cast<__nv_bfloat16*>(out));
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
