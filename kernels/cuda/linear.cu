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

absl::Status LinearBf16F32(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                           float alpha, float* y, void* stream) {
  if (rows < 0 || in < 1 || out < 1 || rows > INT_MAX || in > INT_MAX || out > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("LinearBf16F32: rows ", rows, ", in ", in, ", out ", out,
                                                   " (need rows >= 0, in >= 1, out >= 1, each <= ", INT_MAX,
                                                   ")"));
  }
  if (rows == 0) return absl::OkStatus();
  if (x == nullptr || w == nullptr || y == nullptr) {
    return absl::InvalidArgumentError("LinearBf16F32: null x, w or y");
  }
  absl::StatusOr<cublasHandle_t> handle = ThreadHandle();
  if (!handle.ok()) return handle.status();
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasSetStream(*handle, static_cast<cudaStream_t>(stream)));
  const float beta = 0.0f;
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(*handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                                            static_cast<int>(rows), static_cast<int>(in), &alpha, w, CUDA_R_16BF,
                                            static_cast<int>(in), x, CUDA_R_16BF, static_cast<int>(in), &beta, y,
                                            CUDA_R_32F, static_cast<int>(out), CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status BatchedLinearBf16(const uint16_t* x, int64_t x_batch, int64_t x_row, int64_t rows, int64_t in,
                               const uint16_t* w, int64_t w_batch, int64_t out, uint16_t* y, int64_t y_batch,
                               int64_t y_row, int64_t batch, void* stream) {
  const bool fits = rows <= INT_MAX && in <= INT_MAX && out <= INT_MAX && x_row <= INT_MAX && y_row <= INT_MAX &&
                    batch <= INT_MAX;
  if (rows < 0 || in < 1 || out < 1 || batch < 1 || x_row < in || y_row < out || x_batch < 0 || w_batch < 0 ||
      y_batch < 0 || !fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchedLinearBf16: rows ", rows, ", in ", in, ", out ", out, ", batch ", batch, ", x_row ", x_row, ", y_row ",
        y_row, " (need in, out, batch >= 1, x_row >= in, y_row >= out, non-negative batch strides, ints)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (x == nullptr || w == nullptr || y == nullptr) {
    return absl::InvalidArgumentError("BatchedLinearBf16: null x, w or y");
  }
  absl::StatusOr<cublasHandle_t> handle = ThreadHandle();
  if (!handle.ok()) return handle.status();
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasSetStream(*handle, static_cast<cudaStream_t>(stream)));
  // Column-major, per batch: y_b^T [out, rows] (ld y_row) = (w_b as [in, out])^T · (x_b as [in, rows], ld x_row).
  const float alpha = 1.0f, beta = 0.0f;
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
      *handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(rows), static_cast<int>(in), &alpha,
      w, CUDA_R_16BF, static_cast<int>(in), w_batch, x, CUDA_R_16BF, static_cast<int>(x_row), x_batch, &beta, y,
      CUDA_R_16BF, static_cast<int>(y_row), y_batch, static_cast<int>(batch), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status LinearF32(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float alpha, float* y,
                       void* stream) {
  if (rows < 0 || in < 1 || out < 1 || rows > INT_MAX || in > INT_MAX || out > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("LinearF32: rows ", rows, ", in ", in, ", out ", out,
                                                   " (need rows >= 0, in >= 1, out >= 1, each <= ", INT_MAX, ")"));
  }
  if (rows == 0) return absl::OkStatus();
  if (x == nullptr || w == nullptr || y == nullptr) return absl::InvalidArgumentError("LinearF32: null x, w or y");
  absl::StatusOr<cublasHandle_t> handle = ThreadHandle();
  if (!handle.ok()) return handle.status();
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasSetStream(*handle, static_cast<cudaStream_t>(stream)));
  const float beta = 0.0f;
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(*handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                                            static_cast<int>(rows), static_cast<int>(in), &alpha, w, CUDA_R_32F,
                                            static_cast<int>(in), x, CUDA_R_32F, static_cast<int>(in), &beta, y,
                                            CUDA_R_32F, static_cast<int>(out), CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

absl::Status BatchedLinearF32(const float* x, int64_t x_batch, int64_t x_row, int64_t rows, int64_t in, const float* w,
                              int64_t w_batch, int64_t out, float* y, int64_t y_batch, int64_t y_row, int64_t batch,
                              void* stream) {
  const bool fits = rows <= INT_MAX && in <= INT_MAX && out <= INT_MAX && x_row <= INT_MAX && y_row <= INT_MAX &&
                    batch <= INT_MAX;
  if (rows < 0 || in < 1 || out < 1 || batch < 1 || x_row < in || y_row < out || x_batch < 0 || w_batch < 0 ||
      y_batch < 0 || !fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchedLinearF32: rows ", rows, ", in ", in, ", out ", out, ", batch ", batch, ", x_row ", x_row, ", y_row ",
        y_row, " (need in, out, batch >= 1, x_row >= in, y_row >= out, non-negative batch strides, ints)"));
  }
  if (rows == 0) return absl::OkStatus();
  if (x == nullptr || w == nullptr || y == nullptr) return absl::InvalidArgumentError("BatchedLinearF32: null x, w or y");
  absl::StatusOr<cublasHandle_t> handle = ThreadHandle();
  if (!handle.ok()) return handle.status();
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasSetStream(*handle, static_cast<cudaStream_t>(stream)));
  const float alpha = 1.0f, beta = 0.0f;
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
      *handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(rows), static_cast<int>(in), &alpha,
      w, CUDA_R_32F, static_cast<int>(in), w_batch, x, CUDA_R_32F, static_cast<int>(x_row), x_batch, &beta, y,
      CUDA_R_32F, static_cast<int>(y_row), y_batch, static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
