// Memory-bound matrix-vector products for decode-sized batches (gemv.h): GemvBf16, a Linear over
// a few rows, and the sync-free MoE dispatch (MoeGroupPairs, MoeGemvBf16): the routing's (row,
// slot) pairs are grouped by expert on the device, and each expert's matrix is streamed once per
// pass of up to kPassVectors pairs, found through a device table of pointers. Nothing comes to the
// host, so a decode step's launches can all be queued ahead of the GPU.
#include <cuda_bf16.h>

#include <cub/block/block_scan.cuh>

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/moe_pairs.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kGroupThreads = 1024;
constexpr int kGemvWarps = 8;
constexpr int kRowsPerWarp = 4;  // a warp's rows
constexpr int kMaxSplit = 8;     // warps one row set's input can be cut over

// How many warps share one row set's input (1, 2, 4 or 8), from the matrix shape alone (so an
// output's summation order never depends on the batch): the fewest that give about 4096 warps
// over the matrix, each part still a 16-byte piece a lane or more. Narrow matrices are streamed
// by many warps a row set (a warp walking a whole 12 KB row alone waits out its loads one round
// trip at a time); wide ones one warp a row set, as many rows a block as warps.
int KSplit(int64_t in, int64_t out) {
  const int64_t sets = (out + kRowsPerWarp - 1) / kRowsPerWarp, pieces = in / 8;
  int ks = 1;
  while (ks < kMaxSplit && sets * ks < 4096 && pieces / (2 * ks) >= 32) ks *= 2;
  return ks;
}
__host__ __device__ inline int RowsPerBlock(int ks) { return kGemvWarps / ks * kRowsPerWarp; }
constexpr int kPassVectors = 8;  // the most vectors one pass of MoeGemvKernel takes

// One block. Counts the pairs of each expert, scans the counts into the list's offsets, then
// places each pair at its expert's offset + the number of earlier pairs of that expert (so the
// list is ordered by expert, then by pair index, whatever the thread timing).
__global__ void __launch_bounds__(kGroupThreads)
    MoeGroupPairsKernel(const int32_t* __restrict__ experts, int n_pairs, int top_k, int n_experts, int shared_rows,
                        MoePairs p, int32_t* __restrict__ error) {
  PdlLaunchDependents();
  PdlWait();
  using Scan = cub::BlockScan<int, kGroupThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int count[kMoeMaxExperts], offset[kMoeMaxExperts];
  __shared__ int ids[kMoeMaxPairs];
  __shared__ int valid_pairs, groups;
  const int t = threadIdx.x;
  for (int e = t; e < kMoeMaxExperts; e += kGroupThreads) count[e] = 0;
  __syncthreads();
  for (int i = t; i < n_pairs; i += kGroupThreads) {
    int e = experts[i];
    if (e < 0 || e >= n_experts) {
      atomicExch(error, 1);
      e = -1;
    } else {
      atomicAdd(&count[e], 1);
    }
    ids[i] = e;
  }
  __syncthreads();
  // kMoeMaxExperts == kGroupThreads: one expert a thread.
  const int c = count[t];
  int off = 0, g = 0, total = 0, used = 0;
  Scan(scan_tmp).ExclusiveSum(c, off, total);
  __syncthreads();
  Scan(scan_tmp).ExclusiveSum(c > 0 ? 1 : 0, g, used);
  offset[t] = off;
  if (t == 0) {
    valid_pairs = total;
    groups = used;
  }
  if (c > 0) {
    p.group_expert[g] = t;
    p.group_start[g] = off;
    p.group_count[g] = c;
  }
  __syncthreads();
  for (int i = t; i < n_pairs; i += kGroupThreads) {
    const int e = ids[i];
    if (e < 0) continue;
    int rank = 0;
    for (int k = 0; k < i; ++k) rank += ids[k] == e ? 1 : 0;
    const int j = offset[e] + rank;
    p.order[j] = i;
    p.src_row[j] = i / top_k;
  }
  for (int r = t; r < shared_rows; r += kGroupThreads) {
    p.order[valid_pairs + r] = -1;
    p.src_row[valid_pairs + r] = r;
  }
  if (t == 0) {
    if (shared_rows > 0) {
      p.group_expert[groups] = n_experts;
      p.group_start[groups] = valid_pairs;
      p.group_count[groups] = shared_rows;
    }
    *p.n_groups = groups + (shared_rows > 0 ? 1 : 0);
  }
}

__device__ inline void Dot8(const uint4& w, const uint4& x, float& acc) {
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(a[i]), fb = __bfloat1622float2(b[i]);
    acc = fmaf(fa.x, fb.x, acc);
    acc = fmaf(fa.y, fb.y, acc);
  }
}

// One block's product: rows [row0, row0 + RowsPerBlock(ks)) of w [out, in] times the nv vectors
// xv[0..nv) (nv <= NV). Warp w takes the row set (w / ks) (kRowsPerWarp rows) and the input slice
// (w % ks) of ks contiguous slices of 16-byte pieces. A lane sums its pieces lane, lane + 32, ...
// of its slice in order, the warp adds its lanes by a fixed xor tree, and the ks slices are added
// in order: an output's value depends only on its matrix row, its input vector and the shape (ks),
// not on NV. store(r, v, value) is called once for each row r < out and vector v < nv. `partial`
// is shared memory of kGemvWarps * 32 floats; the block must call this uniformly (it synchronizes).
template <int NV, typename Store>
__device__ __forceinline__ void BlockGemv(const __nv_bfloat16* __restrict__ w, int in, int out, int row0, int ks,
                                          const uint4* const (&xv)[NV], int nv, float* partial, Store store) {
  static_assert(kRowsPerWarp * NV <= 32, "one lane a (row, vector)");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, pieces = in / 8;
  const int set_row = row0 + warp / ks * kRowsPerWarp, slice = warp % ks;
  const int per = (pieces + ks - 1) / ks;
  const int begin = slice * per, end = min(pieces, begin + per);
  float acc[kRowsPerWarp][NV];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int v = 0; v < NV; ++v) acc[r][v] = 0.0f;
  }
  const uint4* wr[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    wr[r] = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(set_row + r, out - 1)) * in);
  }
#pragma unroll 4
  for (int k = begin + lane; k < end; k += 32) {
    uint4 wv[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) wv[r] = __ldcs(wr[r] + k);  // streamed once: evict first
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      if (v < nv) {
        const uint4 xk = __ldg(xv[v] + k);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) Dot8(wv[r], xk, acc[r][v]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[r][v] += __shfl_xor_sync(0xffffffffu, acc[r][v], off);
    }
  }
  // Lane r * NV + v of each warp keeps (r, v); then a warp's worth of threads a row set adds its
  // slices in order.
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      if (lane == r * NV + v) partial[warp * 32 + lane] = acc[r][v];
    }
  }
  __syncthreads();
  const int sets = kGemvWarps / ks;
  if (threadIdx.x < sets * 32 && lane < kRowsPerWarp * NV) {
    const int set = threadIdx.x / 32, r = lane / NV, v = lane % NV;
    float total = 0.0f;
    for (int i = 0; i < ks; ++i) total += partial[(set * ks + i) * 32 + lane];
    const int row = row0 + set * kRowsPerWarp + r;
    if (v < nv && row < out) store(row, v, total);
  }
  __syncthreads();  // partial is reused by the next call
}

// Vectors a pass (NV) -> blocks an SM the kernels are compiled for: fewer accumulators, more
// blocks streaming at once.
constexpr int MinBlocks(int nv) { return nv <= 2 ? 3 : 2; }

// Block (x = a tile of RowsPerBlock(ks) output rows, y = a group): the group's pairs in passes
// of NV through BlockGemv. Launched with LaunchDependent: everything it reads but the weights
// comes from the kernels before it, so it waits first.
template <int NV>
__global__ void __launch_bounds__(kGemvWarps * 32, MinBlocks(NV))
    MoeGemvKernel(const uint16_t* const* __restrict__ weights, MoePairs p, const __nv_bfloat16* __restrict__ x,
                  bool gather_x, int in, int out, int ks, __nv_bfloat16* __restrict__ y, bool scatter_y,
                  __nv_bfloat16* __restrict__ y_shared) {
  PdlLaunchDependents();
  PdlWait();
  const int g = blockIdx.y;
  if (g >= *p.n_groups) return;
  const int start = p.group_start[g], count = p.group_count[g];
  const __nv_bfloat16* w = reinterpret_cast<const __nv_bfloat16*>(weights[p.group_expert[g]]);
  __shared__ float partial[kGemvWarps * 32];
  const int row0 = blockIdx.x * (kGemvWarps / ks * kRowsPerWarp);
  for (int pass = 0; pass < count; pass += NV) {
    const int nv = min(NV, count - pass);
    const uint4* xv[NV];
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const int j = start + pass + min(v, nv - 1);
      const int xr = gather_x ? p.src_row[j] : j;
      xv[v] = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(xr) * in);
    }
    BlockGemv<NV>(w, in, out, row0, ks, xv, nv, partial, [&](int row, int v, float value) {
      MoePairOutRow(p, start + pass + v, scatter_y, y, y_shared, out)[row] = __float2bfloat16(value);
    });
  }
}

// Up to kLinearManyMax products of one launch: problem i's blocks are [first_block[i],
// first_block[i + 1]), each a tile of RowsPerBlock(ks[i]) output rows of w[i] [out[i], in[i]],
// all `rows` vectors of x[i]. A problem's sums are those of its own launch (same ks, same tiles).
template <typename Y>
struct GemvSet {
  const __nv_bfloat16* x[kLinearManyMax];
  const __nv_bfloat16* w[kLinearManyMax];
  Y* y[kLinearManyMax];
  int in[kLinearManyMax], out[kLinearManyMax], ks[kLinearManyMax], first_block[kLinearManyMax + 1];
  int n;
};

// GemvBf16 (Y = __nv_bfloat16), LinearBf16Many (a set of them) and GemvBf16F32 (Y = float, times
// alpha): a block takes its problem's tile. Launched with LaunchDependent (it waits before
// reading x). An L2 prefetch of the block's rows of w before the wait was measured slower
// (GLM-5.2 batch-1 step 1.721 vs 1.604 ms): the prefetches and the loads both queue.
__device__ __forceinline__ void StoreY(__nv_bfloat16* y, float v, float) { *y = __float2bfloat16(v); }
__device__ __forceinline__ void StoreY(float* y, float v, float alpha) { *y = v * alpha; }

template <typename Y, int NV>
__global__ void __launch_bounds__(kGemvWarps * 32, MinBlocks(NV)) GemvKernel(GemvSet<Y> set, int rows, float alpha) {
  PdlLaunchDependents();
  __shared__ float partial[kGemvWarps * 32];
  int i = 0;
  while (i + 1 < set.n && static_cast<int>(blockIdx.x) >= set.first_block[i + 1]) ++i;
  const int in = set.in[i], out = set.out[i], ks = set.ks[i];
  const int row0 = (static_cast<int>(blockIdx.x) - set.first_block[i]) * RowsPerBlock(ks);
  const __nv_bfloat16* x = set.x[i];
  Y* y = set.y[i];
  PdlWait();
  const uint4* xv[NV];
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    xv[v] = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(min(v, rows - 1)) * in);
  }
  BlockGemv<NV>(set.w[i], in, out, row0, ks, xv, rows, partial,
               [&](int row, int v, float value) { StoreY(y + static_cast<int64_t>(v) * out + row, value, alpha); });
}

// Adds problem (x, in, w, out, y) to the set; false when it is not a GemvKernel problem.
template <typename Y>
bool AddProblem(GemvSet<Y>& set, const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out, Y* y) {
  if (set.n >= kLinearManyMax || !GemvApplies(x, rows, in, w) || out < 1 || out > INT32_MAX || y == nullptr) {
    return false;
  }
  const int ks = KSplit(in, out), per_block = RowsPerBlock(ks);
  const int64_t blocks = (out + per_block - 1) / per_block;
  if (set.first_block[set.n] + blocks > INT32_MAX) return false;
  set.x[set.n] = reinterpret_cast<const __nv_bfloat16*>(x);
  set.w[set.n] = reinterpret_cast<const __nv_bfloat16*>(w);
  set.y[set.n] = y;
  set.in[set.n] = static_cast<int>(in);
  set.out[set.n] = static_cast<int>(out);
  set.ks[set.n] = ks;
  set.first_block[set.n + 1] = set.first_block[set.n] + static_cast<int>(blocks);
  ++set.n;
  return true;
}

template <typename Y>
absl::Status LaunchGemvSet(const GemvSet<Y>& set, int64_t rows, float alpha, void* stream) {
  static_assert(kGemvMaxRows <= 4, "GemvKernel takes all rows in one pass of at most 4");
  const dim3 grid(static_cast<unsigned>(set.first_block[set.n]));
  const int r = static_cast<int>(rows);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t err;
  if (rows == 1) {
    err = LaunchDependent(GemvKernel<Y, 1>, grid, kGemvWarps * 32, 0, s, set, r, alpha);
  } else if (rows == 2) {
    err = LaunchDependent(GemvKernel<Y, 2>, grid, kGemvWarps * 32, 0, s, set, r, alpha);
  } else {
    err = LaunchDependent(GemvKernel<Y, 4>, grid, kGemvWarps * 32, 0, s, set, r, alpha);
  }
  FERRY_CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

template <typename Y>
absl::Status LaunchGemv(const char* what, const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w,
                        int64_t out, float alpha, Y* y, void* stream) {
  GemvSet<Y> set{};
  if (!AddProblem(set, x, rows, in, w, out, y)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rows ", rows, ", in ", in, ", out ", out,
                                                   " (need 1 <= rows <= ", kGemvMaxRows,
                                                   ", in a multiple of 8, 16-byte-aligned x and w, out >= 1)"));
  }
  return LaunchGemvSet(set, rows, alpha, stream);
}

}  // namespace

absl::Status MoeGroupPairs(const int32_t* experts, int64_t rows, int64_t top_k, int64_t n_experts, bool shared,
                           const MoePairs& p, int32_t* error, void* stream) {
  static_assert(kMoeMaxExperts == kGroupThreads, "MoeGroupPairsKernel scans one expert a thread");
  if (rows < 0 || top_k < 0 || n_experts < 1 || n_experts > kMoeMaxExperts || rows * top_k > kMoeMaxPairs ||
      (shared && rows > kMoeMaxPairs)) {
    return absl::InvalidArgumentError(absl::StrCat("MoeGroupPairs: rows ", rows, ", top_k ", top_k, ", n_experts ",
                                                   n_experts, " (need 1 <= n_experts <= ", kMoeMaxExperts,
                                                   ", rows * top_k <= ", kMoeMaxPairs, ")"));
  }
  if (p.group_expert == nullptr || p.group_start == nullptr || p.group_count == nullptr || p.n_groups == nullptr ||
      p.order == nullptr || p.src_row == nullptr || error == nullptr || (rows * top_k > 0 && experts == nullptr)) {
    return absl::InvalidArgumentError("MoeGroupPairs: a null buffer");
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(MoeGroupPairsKernel, 1, kGroupThreads, 0,
                                             static_cast<cudaStream_t>(stream), experts, static_cast<int>(rows * top_k),
                                             static_cast<int>(std::max<int64_t>(top_k, 1)), static_cast<int>(n_experts),
                                             shared ? static_cast<int>(rows) : 0, p, error));
  return absl::OkStatus();
}

int64_t MoeMaxGroups(int64_t rows, int64_t top_k, int64_t n_experts, bool shared) {
  return std::min(rows * top_k, n_experts) + (shared && rows > 0 ? 1 : 0);
}

absl::Status MoeGemvBf16(const uint16_t* const* weights, const MoePairs& p, int64_t max_groups,
                         int64_t max_group_pairs, const uint16_t* x, bool gather_x, int64_t in, int64_t out,
                         uint16_t* y, bool scatter_y, uint16_t* y_shared,
                         void* stream) {
  if (in < 8 || in % 8 != 0 || in > INT32_MAX || out < 1 || out > INT32_MAX || max_groups < 0 ||
      max_groups > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("MoeGemvBf16: in ", in, ", out ", out, ", max_groups ",
                                                   max_groups, " (need in a positive multiple of 8, out >= 1, "
                                                   "max_groups <= 65535)"));
  }
  if (max_groups == 0) return absl::OkStatus();
  if (weights == nullptr || x == nullptr || y == nullptr || p.n_groups == nullptr) {
    return absl::InvalidArgumentError("MoeGemvBf16: null weights, x, y or groups");
  }
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) {  // its rows are read in 16-byte pieces
    return absl::InvalidArgumentError("MoeGemvBf16: x is not 16-byte aligned");
  }
  const int ks = KSplit(in, out), per_block = RowsPerBlock(ks);
  const dim3 grid(static_cast<unsigned>((out + per_block - 1) / per_block), static_cast<unsigned>(max_groups));
  const auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
  auto* yb = reinterpret_cast<__nv_bfloat16*>(y);
  auto* ysb = reinterpret_cast<__nv_bfloat16*>(y_shared);
  const int i = static_cast<int>(in), o = static_cast<int>(out);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t err;
  if (max_group_pairs <= 1) {
    err = LaunchDependent(MoeGemvKernel<1>, grid, kGemvWarps * 32, 0, s, weights, p, xb, gather_x, i, o, ks, yb,
                          scatter_y, ysb);
  } else if (max_group_pairs == 2) {
    err = LaunchDependent(MoeGemvKernel<2>, grid, kGemvWarps * 32, 0, s, weights, p, xb, gather_x, i, o, ks, yb,
                          scatter_y, ysb);
  } else if (max_group_pairs <= 4) {
    err = LaunchDependent(MoeGemvKernel<4>, grid, kGemvWarps * 32, 0, s, weights, p, xb, gather_x, i, o, ks, yb,
                          scatter_y, ysb);
  } else {
    err = LaunchDependent(MoeGemvKernel<kPassVectors>, grid, kGemvWarps * 32, 0, s, weights, p, xb, gather_x, i, o,
                          ks, yb, scatter_y, ysb);
  }
  FERRY_CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

bool GemvApplies(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w) {
  return rows >= 1 && rows <= kGemvMaxRows && in % 8 == 0 && in <= INT32_MAX &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

absl::Status GemvBf16(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out, uint16_t* y,
                      void* stream) {
  return LaunchGemv("GemvBf16", x, rows, in, w, out, 1.0f, reinterpret_cast<__nv_bfloat16*>(y), stream);
}

absl::Status GemvBf16F32(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out, float alpha,
                         float* y, void* stream) {
  return LaunchGemv("GemvBf16F32", x, rows, in, w, out, alpha, y, stream);
}

absl::Status LinearBf16Many(const LinearProblemBf16* p, int64_t n, int64_t rows, void* stream) {
  if (n < 1 || n > kLinearManyMax || p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("LinearBf16Many: ", n, " problems (need 1 to ", kLinearManyMax, ")"));
  }
  GemvSet<__nv_bfloat16> set{};
  bool one_launch = true;
  for (int64_t i = 0; i < n && one_launch; ++i) {
    one_launch = AddProblem(set, p[i].x, rows, p[i].in, p[i].w, p[i].out, reinterpret_cast<__nv_bfloat16*>(p[i].y));
  }
  if (one_launch) return LaunchGemvSet(set, rows, 1.0f, stream);
  for (int64_t i = 0; i < n; ++i) {
    FERRY_RETURN_IF_ERROR(LinearBf16(p[i].x, rows, p[i].in, p[i].w, p[i].out, p[i].y, stream));
  }
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
