// Device queries and memory helpers.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/options.h"
#include "kernels/cuda/pdl.cuh"

namespace ferry::kernels::cuda {

bool PdlEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("FERRY_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

namespace {
KernelOptions g_options;
}  // namespace

void SetKernelOptions(const KernelOptions& options) { g_options = options; }
const KernelOptions& GetKernelOptions() { return g_options; }

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

absl::Status UseDevice(int index) {
  const int n = DeviceCount();
  if (index < 0 || index >= n) {
    return absl::InvalidArgumentError(absl::StrFormat("no CUDA device %d: %d visible", index, n));
  }
  FERRY_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  return absl::OkStatus();
}

absl::StatusOr<int> CurrentDevice() {
  int d = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&d));
  return d;
}

absl::StatusOr<std::string> DeviceName(int index) {
  cudaDeviceProp p{};
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&p, index));
  return absl::StrFormat("%s, sm_%d%d, %.1f GiB", p.name, p.major, p.minor,
                         static_cast<double>(p.totalGlobalMem) / (1ull << 30));
}

absl::StatusOr<DeviceMemory> MemoryInfo() {
  size_t free_bytes = 0, total_bytes = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  int device = 0, integrated = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device));
  return DeviceMemory{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes), integrated != 0};
}

absl::StatusOr<void*> DeviceAlloc(size_t bytes) {
  void* p = nullptr;
  FERRY_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  return p;
}

absl::Status DeviceFree(void* p) {
  FERRY_CUDA_RETURN_IF_ERROR(cudaFree(p));
  return absl::OkStatus();
}

absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) {
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status CopyToHost(void* dst, const void* src, size_t bytes) {
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes) {
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
  return absl::OkStatus();
}

absl::Status DeviceFill(void* dst, uint8_t byte, size_t bytes) {
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemset(dst, byte, bytes));
  return absl::OkStatus();
}

absl::StatusOr<void*> PinnedAlloc(size_t bytes) {
  void* p = nullptr;
  FERRY_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, bytes));
  return p;
}

absl::Status PinnedFree(void* p) {
  FERRY_CUDA_RETURN_IF_ERROR(cudaFreeHost(p));
  return absl::OkStatus();
}

absl::Status CopyToDeviceAsync(void* dst, const void* src, size_t bytes, void* stream) {
  FERRY_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
  return absl::OkStatus();
}

absl::Status CopyToHostAsync(void* dst, const void* src, size_t bytes, void* stream) {
  FERRY_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)));
  return absl::OkStatus();
}

absl::StatusOr<void*> EventCreate() {
  cudaEvent_t e = nullptr;
  FERRY_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return static_cast<void*>(e);
}

absl::Status EventDestroy(void* event) {
  FERRY_CUDA_RETURN_IF_ERROR(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
  return absl::OkStatus();
}

absl::Status EventRecord(void* event, void* stream) {
  FERRY_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
  return absl::OkStatus();
}

absl::Status EventWait(void* event) {
  FERRY_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  return absl::OkStatus();
}

absl::Status Synchronize() {
  FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
