// bf16 Linear through cuBLAS: y = x · w^T with float32 compute, one handle per host thread and
// device (see LinearBf16 in ops.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace ferry::kernels::cuda {
namespace {

#define FERRY_CUBLAS_RETURN_IF_ERROR(expr)                                                          \
  do {                                                                                              \
    cublasStatus_t ferry_cublas_st_ = (expr);                                                       \
    if (ferry_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                                \
      return ::absl::InternalError(::absl::StrCat(#expr, " failed at ", __FILE__, ":", __LINE__, ": ", \
                                                  cublasGetStatusString(ferry_cublas_st_)));        \
    }                                                                                               \
  } while (0)

// The calling thread's handles, one per device. Destroyed at thread exit; for the main thread
// that is before the static destructors and atexit handlers that tear the CUDA runtime down.
struct ThreadHandles {
  std::vector<std::pair<int, cublasHandle_t>> by_device;
  ~ThreadHandles() {
    for (auto& [device, handle] : by_device) (void)cublasDestroy(handle);
  }
};

absl::StatusOr<cublasHandle_t> ThreadHandle() {
  thread_local ThreadHandles handles;
  int device = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  for (auto& [d, h] : handles.by_device) {
    if (d == device) return h;
  }
  cublasHandle_t h = nullptr;
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasCreate(&h));
  handles.by_device.emplace_back(device, h);
  return h;
}

}  // namespace

absl::Status LinearBf16(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                        uint16_t* y, void* stream) {
  if (rows < 0 || in < 1 || out < 1 || rows > INT_MAX || in > INT_MAX || out > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("LinearBf16: rows ", rows, ", in ", in, ", out ", out,
                                                   " (need rows >= 0, in >= 1, out >= 1, each <= ", INT_MAX,
                                                   ")"));
  }
  if (rows == 0) return absl::OkStatus();
  if (x == nullptr || w == nullptr || y == nullptr) {
    return absl::InvalidArgumentError("LinearBf16: null x, w or y");
  }
  absl::StatusOr<cublasHandle_t> handle = ThreadHandle();
  if (!handle.ok()) return handle.status();
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasSetStream(*handle, static_cast<cudaStream_t>(stream)));
  // Column-major view: y^T [out, rows] = (w viewed as [in, out])^T · (x viewed as [in, rows]).
  const float alpha = 1.0f, beta = 0.0f;
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(*handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                                            static_cast<int>(rows), static_cast<int>(in), &alpha, w, CUDA_R_16BF,
                                            static_cast<int>(in), x, CUDA_R_16BF, static_cast<int>(in), &beta, y,
                                            CUDA_R_16BF, static_cast<int>(out), CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
