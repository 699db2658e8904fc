// Programmatic dependent launch (sm_90 and up): a kernel launched with LaunchDependent may begin
// while the kernel before it in the stream still runs, do work that reads nothing an earlier
// kernel writes (start its weight reads), then wait in PdlWait for the earlier grids to finish.
// The earlier kernel lets it begin by calling PdlLaunchDependents (else at its own end). Both
// device calls do nothing where the launch did not ask for it, so any kernel may call them.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace ferry::kernels::cuda {

// The next kernel in the stream, if launched with LaunchDependent, may be scheduled once every
// block of this grid has called this (or exited). Its blocks still wait in PdlWait for all of
// this grid, writes included, so calling it first thing is always safe.
__device__ __forceinline__ void PdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits until the grids before this one in the stream have completed and their writes are
// visible. A kernel launched with LaunchDependent calls it before it reads anything an earlier
// kernel writes and before it writes anything an earlier kernel reads or writes.
__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether LaunchDependent asks for the early start (FERRY_PDL=0 in the environment turns it off;
// read once). runtime.cu.
bool PdlEnabled();

// kernel<<<grid, block, smem, stream>>>(args...) in clusters of `cluster` blocks along x (0: no
// clusters; grid.x a multiple of it), allowed to begin before the previous kernel in the stream
// ends when programmatic dependent launch is on.
template <typename... Params, typename... Args>
cudaError_t LaunchEx(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, unsigned cluster,
                     cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (cluster > 0) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (PdlEnabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = n;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// kernel<<<grid, block, smem, stream>>>(args...) allowed to begin before the previous kernel in
// the stream ends (the kernel must call PdlWait as its contract above says).
template <typename... Params, typename... Args>
cudaError_t LaunchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                            Args&&... args) {
  return LaunchEx(kernel, grid, block, smem, /*cluster=*/0, stream, std::forward<Args>(args)...);
}

// LaunchDependent for a grid of clusters of `cluster` blocks along x (grid.x a multiple of it).
template <typename... Params, typename... Args>
cudaError_t LaunchClusterDependent(void (*kernel)(Params...), dim3 grid, dim3 block, unsigned cluster,
                                   cudaStream_t stream, Args&&... args) {
  return LaunchEx(kernel, grid, block, /*smem=*/0, cluster, stream, std::forward<Args>(args)...);
}

}  // namespace ferry::kernels::cuda
