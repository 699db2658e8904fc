#include "bench/roofline_cuda.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"

namespace ferry::bench {
namespace {

__global__ void StreamReadKernel(const uint4* __restrict__ src, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Four independent 16-byte loads in flight per thread before their first use.
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = src[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  // Written only on an (all but) impossible value: the loads stay, the store traffic does not.
  if (acc == 0x9e3779b9u) *sink = acc;
}

__device__ __forceinline__ float HashUniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float v = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return (2.0f * v - 1.0f) * 1.7320508f;
}

__global__ void FillBf16Kernel(__nv_bfloat16* dst, int64_t n, uint64_t seed, float scale, float offset) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = __float2bfloat16_rn(offset + scale * HashUniform(seed, static_cast<uint64_t>(i)));
  }
}

__global__ void FillF32Kernel(float* dst, int64_t n, uint64_t seed, float scale, float offset) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = offset + scale * HashUniform(seed, static_cast<uint64_t>(i));
  }
}

__global__ void FillFp8Kernel(uint8_t* dst, int64_t n, uint64_t seed, float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = __nv_cvt_float_to_fp8(scale * HashUniform(seed, static_cast<uint64_t>(i)), __NV_SATFINITE, __NV_E4M3);
  }
}

int FillBlocks(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return static_cast<int>(want < 65536 ? (want < 1 ? 1 : want) : 65536);
}

}  // namespace

absl::Status StreamRead(const void* src, size_t bytes, uint32_t* sink) {
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0 || bytes % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("StreamRead: ", bytes, " bytes at a pointer that is not 16-byte "
                                                   "aligned, or not a multiple of 16"));
  }
  int device = 0, sms = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  StreamReadKernel<<<sms * 8, 512>>>(static_cast<const uint4*>(src), bytes / 16, sink);
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status FillRandomBf16(uint16_t* dst, int64_t n, uint64_t seed, float scale, float offset) {
  if (n <= 0) return absl::OkStatus();
  FillBf16Kernel<<<FillBlocks(n), 256>>>(reinterpret_cast<__nv_bfloat16*>(dst), n, seed, scale, offset);
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status FillRandomFp8(uint8_t* dst, int64_t n, uint64_t seed, float scale) {
  if (n <= 0) return absl::OkStatus();
  FillFp8Kernel<<<FillBlocks(n), 256>>>(dst, n, seed, scale);
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status FillRandomF32(float* dst, int64_t n, uint64_t seed, float scale, float offset) {
  if (n <= 0) return absl::OkStatus();
  FillF32Kernel<<<FillBlocks(n), 256>>>(dst, n, seed, scale, offset);
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status GroupedBatchedGemmBf16(const std::vector<GemmProblem>& problems, int64_t in, int64_t out, void** ptrs) {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    return cublasCreate(&h) == CUBLAS_STATUS_SUCCESS ? h : nullptr;
  }();
  if (handle == nullptr) return absl::InternalError("GroupedBatchedGemmBf16: cublasCreate failed");
  std::vector<const void*> host_ptrs;
  std::vector<int> m, n, k, lda, ldb, ldc, size;
  std::vector<cublasOperation_t> ta, tb;
  std::vector<float> alpha, beta;
  int count = 0;
  for (const GemmProblem& p : problems) count += p.rows > 0;
  if (count == 0) return absl::OkStatus();
  host_ptrs.resize(3 * static_cast<size_t>(count));
  int g = 0;
  for (const GemmProblem& p : problems) {
    if (p.rows == 0) continue;
    // Column-major, as LinearBf16: y^T [out, rows] = (w as [in, out])^T · (x as [in, rows]).
    host_ptrs[g] = p.w;
    host_ptrs[count + g] = p.x;
    host_ptrs[2 * count + g] = p.y;
    ta.push_back(CUBLAS_OP_T);
    tb.push_back(CUBLAS_OP_N);
    m.push_back(static_cast<int>(out));
    n.push_back(static_cast<int>(p.rows));
    k.push_back(static_cast<int>(in));
    lda.push_back(static_cast<int>(in));
    ldb.push_back(static_cast<int>(in));
    ldc.push_back(static_cast<int>(out));
    size.push_back(1);
    alpha.push_back(1.0f);
    beta.push_back(0.0f);
    ++g;
  }
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ptrs, host_ptrs.data(), host_ptrs.size() * sizeof(void*),
                                             cudaMemcpyHostToDevice, nullptr));
  if (cublasSetStream(handle, nullptr) != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError("GroupedBatchedGemmBf16: cublasSetStream failed");
  }
  const cublasStatus_t st = cublasGemmGroupedBatchedEx(
      handle, ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(), ptrs, CUDA_R_16BF, lda.data(),
      ptrs + count, CUDA_R_16BF, ldb.data(), beta.data(), ptrs + 2 * count, CUDA_R_16BF, ldc.data(), count,
      size.data(), CUBLAS_COMPUTE_32F);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cublasGemmGroupedBatchedEx: ", cublasGetStatusString(st)));
  }
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::StatusOr<void*> HostAllocPinned(size_t bytes) {
  void* p = nullptr;
  FERRY_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, bytes));
  return p;
}

void HostFreePinned(void* p) {
  if (p != nullptr) (void)cudaFreeHost(p);
}

absl::StatusOr<DeviceShape> CurrentDeviceShape() {
  int device = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  DeviceShape s;
  int l2 = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, device));
  s.l2_bytes = l2;
  return s;
}

absl::StatusOr<std::vector<double>> TimeEvents(const std::function<absl::Status()>& fn, int warmup, int reps,
                                               const std::function<absl::Status()>& between) {
  for (int i = 0; i < warmup; ++i) {
    absl::Status st = fn();
    if (!st.ok()) return st;
  }
  FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(reps));
  for (cudaEvent_t& e : ev) FERRY_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  absl::Status st;
  for (int r = 0; r < reps && st.ok(); ++r) {
    if (between) st = between();
    if (!st.ok()) break;
    (void)cudaEventRecord(ev[2 * r]);
    st = fn();
    (void)cudaEventRecord(ev[2 * r + 1]);
  }
  std::vector<double> ms;
  if (st.ok()) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) st = absl::InternalError(absl::StrCat("timed work failed: ", cudaGetErrorString(e)));
  }
  for (int r = 0; r < reps && st.ok(); ++r) {
    float t = 0.0f;
    cudaError_t e = cudaEventElapsedTime(&t, ev[2 * r], ev[2 * r + 1]);
    if (e != cudaSuccess) st = absl::InternalError(absl::StrCat("cudaEventElapsedTime: ", cudaGetErrorString(e)));
    ms.push_back(t);
  }
  for (cudaEvent_t& e : ev) (void)cudaEventDestroy(e);
  if (!st.ok()) return st;
  return ms;
}

}  // namespace ferry::bench
