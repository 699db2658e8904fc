// Greedy sampling (SampleGreedy in ops.h): one block of 1024 threads per row. Each thread scans
// its strided share of the logits keeping the best under the CPU's strict order (rank.cuh), then
// warps and the block reduce; the result is the unique maximum of that order, cpu::ArgMax's.
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rank.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads)
    ArgMaxKernel(const float* __restrict__ logits, int64_t vocab, int32_t* __restrict__ ids) {
  PdlLaunchDependents();
  PdlWait();
  __shared__ Ranked warp_best[kWarps];
  const int64_t r = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* row = logits + r * vocab;
  Ranked best{0.0f, -1};
  for (int64_t i = tid; i < vocab; i += kThreads) best = Better(best, Ranked{row[i], static_cast<int32_t>(i)});
  best = WarpBest(best);
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (warp == 0) {
    best = WarpBest(warp_best[lane]);  // kWarps == 32: one entry a lane
    if (lane == 0) ids[r] = best.i;
  }
}
static_assert(kWarps == 32, "the final reduction gives one warp's result to each lane");

}  // namespace

absl::Status SampleGreedy(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, void* stream) {
  if (rows < 0 || rows > 0x7fffffff || vocab < 1 || vocab > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("SampleGreedy: rows ", rows, ", vocab ", vocab,
                                                   " (need 0 <= rows, 1 <= vocab, each <= 2^31 - 1)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (logits == nullptr || ids == nullptr) return absl::InvalidArgumentError("SampleGreedy: null logits or ids");
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(ArgMaxKernel, static_cast<unsigned>(rows), kThreads, 0,
                                             static_cast<cudaStream_t>(stream), logits, vocab, ids));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
