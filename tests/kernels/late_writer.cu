// RunBehindLateCopy (late_writer.h).
#include "tests/kernels/late_writer.h"

#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
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

// dst = 0, the late copy, then op, all queued on `stream`.
absl::Status Enqueue(int32_t* dst, const int32_t* src, int64_t n, int64_t spin_ns,
                     const std::function<absl::Status(void*)>& op, cudaStream_t stream) {
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, 0, n * sizeof(int32_t), stream));
  LateCopyKernel<<<1, 256, 0, stream>>>(dst, src, n, static_cast<uint64_t>(spin_ns));
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return op(stream);
}

// Waits for the stream and destroys it (both, whatever the wait gives).
absl::Status Finish(cudaStream_t stream) {
  const cudaError_t sync = cudaStreamSynchronize(stream);
  FERRY_CUDA_RETURN_IF_ERROR(cudaStreamDestroy(stream));
  FERRY_CUDA_RETURN_IF_ERROR(sync);
  return absl::OkStatus();
}

}  // namespace

absl::Status RunBehindLateCopy(int32_t* dst, const int32_t* src, int64_t n, int64_t spin_ns,
                               const std::function<absl::Status(void*)>& op) {
  // The caller's earlier work (uploads, fills on the default stream) done first: the new stream
  // is not ordered after the default one.
  FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  cudaStream_t stream = nullptr;
  FERRY_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  absl::Status s = Enqueue(dst, src, n, spin_ns, op, stream);
  s.Update(Finish(stream));
  return s;
}

}  // namespace ferry::harness
