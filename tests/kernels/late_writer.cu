// RunBehindLateCopy (late_writer.h).
#include "tests/kernels/late_writer.h"

#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/pdl.cuh"

namespace ferry::harness {
namespace {

__global__ void LateCopyKernel(int32_t* __restrict__ dst, const int32_t* __restrict__ src, int64_t n,
                               uint64_t spin_ns) {
  kernels::cuda::PdlLaunchDependents();  // the next kernel may start now, long before dst is written
  uint64_t t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < spin_ns);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

absl::Status RunBehindLateCopy(int32_t* dst, const int32_t* src, int64_t n, int64_t spin_ns,
                               const std::function<absl::Status(void*)>& op) {
  // The caller's earlier work (uploads, fills on the default stream) done first: the new stream
  // is not ordered after the default one.
  const absl::Status before = CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (!before.ok()) return before;
  cudaStream_t stream = nullptr;
  const absl::Status created =
      CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (!created.ok()) return created;
  absl::Status s = CudaStatus(cudaMemsetAsync(dst, 0, n * sizeof(int32_t), stream), "cudaMemsetAsync");
  if (s.ok()) {
    LateCopyKernel<<<1, 256, 0, stream>>>(dst, src, n, static_cast<uint64_t>(spin_ns));
    s.Update(CudaStatus(cudaGetLastError(), "LateCopyKernel"));
  }
  if (s.ok()) s.Update(op(stream));
  s.Update(CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  s.Update(CudaStatus(cudaStreamDestroy(stream), "cudaStreamDestroy"));
  return s;
}

}  // namespace ferry::harness
