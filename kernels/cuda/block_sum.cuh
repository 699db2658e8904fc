// The wide block sum of the row norms (RmsNormF32 and the normed row dot of mHC), in one place so
// that both sum a row's squares in the same order (the fused mHC input kernel matches the
// separate RMSNorm bit for bit).
#pragma once

namespace ferry::kernels::cuda {

inline constexpr int kNormThreads = 1024;  // a row's block

// Sum over a block of kNormThreads threads; every thread gets the total. `scratch` holds 32 floats;
// the trailing barrier lets the caller reuse it.
__device__ __forceinline__ float BlockSumWide(float v, float* scratch) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = scratch[threadIdx.x & 31];  // every warp sums the 32 warp sums alike
  for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
  __syncthreads();
  return total;
}

// 1 / RMS of the row xr [dim] (rsqrt(mean(x^2) + eps)) as RmsNormF32 computes it: thread t sums the
// squares of its 4-element pieces t, t + kNormThreads, ... (`vec`: dim % 4 == 0 and xr 16-byte
// aligned; else its elements t, t + kNormThreads, ...), then BlockSumWide. Block-uniform call.
__device__ __forceinline__ float RowInvRms(const float* xr, int64_t dim, bool vec, float eps, float* scratch) {
  const int64_t pieces = vec ? dim / 4 : 0;
  float sum = 0.0f;
#pragma unroll 4
  for (int64_t p = threadIdx.x; p < pieces; p += kNormThreads) {
    const float4 v = reinterpret_cast<const float4*>(xr)[p];
    sum += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  for (int64_t i = 4 * pieces + threadIdx.x; i < dim; i += kNormThreads) sum += xr[i] * xr[i];
  return rsqrtf(BlockSumWide(sum, scratch) / static_cast<float>(dim) + eps);
}

}  // namespace ferry::kernels::cuda
