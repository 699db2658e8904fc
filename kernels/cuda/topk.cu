// Exact per-row top-k over float32 scores (TopK in ops.h): one block of 1024 threads per row.
//
// 1. Radix select: each score maps to a 32-bit key whose unsigned order is the selection order
//    by value (NaN lowest, -0 == +0). Four 8-bit passes of shared-memory histograms find the key
//    T of the k-th largest element and `need`, how many of the elements equal to T belong to the
//    answer (every element with a larger key does).
// 2. Ordered compaction: the row is walked in ascending index, a chunk of 1024 at a time, with
//    two block scans per chunk; an element is taken if its key is > T, or if it equals T and
//    fewer than `need` equal ones came before it. So ties go to the lower index, the output is
//    ascending by construction, and the set is exactly cpu::TopKIndices's.
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include <climits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 1024;

// Order-preserving key: a > b in the selection order (by value) iff Key(a) > Key(b). NaN maps
// to 0, below every number (-inf maps to 0x007fffff); -0 maps like +0.
__device__ __forceinline__ uint32_t Key(float x) {
  if (isnan(x)) return 0u;
  if (x == 0.0f) return 0x80000000u;  // +0 and -0
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__global__ void __launch_bounds__(kThreads)
    TopKKernel(const float* __restrict__ scores, int64_t cols, const int32_t* __restrict__ lengths, int k,
               int32_t* __restrict__ ids, int32_t* __restrict__ counts) {
  PdlLaunchDependents();
  PdlWait();
  using BlockScan = cub::BlockScan<int, kThreads>;
  __shared__ typename BlockScan::TempStorage scan_gt;
  __shared__ typename BlockScan::TempStorage scan_eq;
  __shared__ int hist[256];
  __shared__ int digit_found, need_found;

  const int64_t r = blockIdx.x;
  const int tid = threadIdx.x;
  const float* row = scores + r * cols;
  int32_t* out = ids + r * static_cast<int64_t>(k);
  int64_t n = lengths != nullptr ? lengths[r] : cols;
  if (n < 0 || n > cols) n = 0;  // selects nothing
  const int keff = static_cast<int>(n < k ? n : k);

  if (keff > 0) {
    // Radix select of the keff-th largest key, 8 bits a pass from the top.
    uint32_t prefix = 0, mask = 0;
    int need = keff;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += kThreads) hist[b] = 0;
      __syncthreads();
      for (int64_t base = 0; base < n; base += kThreads) {
        // Warp-aggregated: the lanes with the same bin add their count once (scores of one row
        // share their top bits, and 1024 atomics on one bin serialize). The trip count is the
        // block's, so every lane of a warp reaches the full-mask match (lanes past n carry -1).
        const int64_t i = base + tid;
        int bin = -1;
        if (i < n) {
          const uint32_t key = Key(row[i]);
          if ((key & mask) == prefix) bin = static_cast<int>((key >> shift) & 255u);
        }
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        if (bin >= 0 && (tid & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
      }
      __syncthreads();
      if (tid < 32) {
        // The digit: the highest bin b where the count of keys in bins >= b reaches `need`. Lane l
        // holds bins 255 - 8l down to 248 - 8l; a warp scan gives each lane the count above its
        // bins, and the one lane whose range crosses `need` walks its eight (one thread walking
        // all 256 bins was most of the kernel: ~15 us of a 20 us row).
        const int lane = tid;
        int c[8], sum = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) sum += (c[j] = hist[255 - 8 * lane - j]);
        int incl = sum;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
          const int t = __shfl_up_sync(0xffffffffu, incl, off);
          if (lane >= off) incl += t;
        }
        int above = incl - sum;
        if (above < need && need <= incl) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            if (above + c[j] >= need) {
              digit_found = 255 - 8 * lane - j;
              need_found = need - above;
              break;
            }
            above += c[j];
          }
        }
      }
      __syncthreads();
      prefix |= static_cast<uint32_t>(digit_found) << shift;
      mask |= 255u << shift;
      need = need_found;
      __syncthreads();  // hist, digit_found and need_found are rewritten by the next pass
    }
    const uint32_t threshold = prefix;

    // Ordered compaction: ascending index, all keys above the threshold, the first `need` equal.
    int taken = 0, equal_seen = 0;
    for (int64_t c0 = 0; c0 < n; c0 += kThreads) {
      const int64_t i = c0 + tid;
      const uint32_t key = i < n ? Key(row[i]) : 0u;
      const int eq = (i < n && key == threshold) ? 1 : 0;
      int eq_before = 0, eq_total = 0;
      BlockScan(scan_eq).ExclusiveSum(eq, eq_before, eq_total);
      const int take = (i < n && (key > threshold || (eq && equal_seen + eq_before < need))) ? 1 : 0;
      int pos = 0, take_total = 0;
      BlockScan(scan_gt).ExclusiveSum(take, pos, take_total);
      if (take) out[taken + pos] = static_cast<int32_t>(i);
      taken += take_total;
      equal_seen += eq_total;
      __syncthreads();  // the scan storage is reused by the next chunk
    }
  }
  for (int64_t j = keff + tid; j < k; j += kThreads) out[j] = -1;
  if (counts != nullptr && tid == 0) counts[r] = keff;
}

}  // namespace

absl::Status TopK(const float* scores, int64_t rows, int64_t cols, const int32_t* lengths, int64_t k,
                  int32_t* ids, int32_t* counts, void* stream) {
  if (rows < 0 || rows > INT_MAX || cols < 1 || cols > INT_MAX || k < 0 || k > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("TopK: rows ", rows, ", cols ", cols, ", k ", k,
                                                   " (need 0 <= rows, 1 <= cols, 0 <= k, each <= ", INT_MAX, ")"));
  }
  if (rows == 0 || (k == 0 && counts == nullptr)) return absl::OkStatus();
  if (scores == nullptr || (k > 0 && ids == nullptr)) {
    return absl::InvalidArgumentError("TopK: null scores or ids");
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(TopKKernel, static_cast<unsigned>(rows), kThreads, 0,
                                             static_cast<cudaStream_t>(stream), scores, cols, lengths,
                                             static_cast<int>(k), ids, counts));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
