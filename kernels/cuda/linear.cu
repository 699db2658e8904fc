// bf16 Linear: y = x · w^T with float32 compute, through GemvBf16 for decode-sized batches and
// cuBLAS otherwise, one handle per host thread and device (see LinearBf16 in ops.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/ops.h"

namespace ferry::kernels::cuda {
namespace {

__device__ float g_device_zero = 0.0f;  // LinearBf16Scaled's beta

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

// The bf16 Linear's one cuBLAS call on `handle` (already bound to its stream). Column-major view:
// y^T [out, rows] = (w viewed as [in, out])^T · (x viewed as [in, rows]).
absl::Status GemmBf16(cublasHandle_t handle, const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w,
                      int64_t out, uint16_t* y) {
  const float alpha = 1.0f, beta = 0.0f;
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                                            static_cast<int>(rows), static_cast<int>(in), &alpha, w, CUDA_R_16BF,
                                            static_cast<int>(in), x, CUDA_R_16BF, static_cast<int>(in), &beta, y,
                                            CUDA_R_16BF, static_cast<int>(out), CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

// LinearBf16's choice for one problem on `stream` (`handle` bound to it): GemvBf16 for a
// decode-sized batch, else the cuBLAS call. GroupedLinearBf16 makes the same choice per problem.
absl::Status LinearOn(cublasHandle_t handle, cudaStream_t stream, const uint16_t* x, int64_t rows, int64_t in,
                      const uint16_t* w, int64_t out, uint16_t* y) {
  if (GemvApplies(x, rows, in, w)) return GemvBf16(x, rows, in, w, out, y, stream);
  return GemmBf16(handle, x, rows, in, w, out, y);
}

// GroupedLinearBf16's side streams of one thread on one device: each stream with its own handle
// (a handle's workspace must not be shared by kernels running at once), a fork event and one
// join event a stream. Created on first use, destroyed at thread exit like ThreadHandles.
struct GroupStreams {
  int device = -1;
  cudaStream_t streams[kGroupedLinearStreams] = {};
  cublasHandle_t handles[kGroupedLinearStreams] = {};
  cudaEvent_t fork = nullptr;
  cudaEvent_t joins[kGroupedLinearStreams] = {};
  ~GroupStreams() {
    for (int s = 0; s < kGroupedLinearStreams; ++s) {
      if (handles[s] != nullptr) (void)cublasDestroy(handles[s]);
      if (streams[s] != nullptr) (void)cudaStreamDestroy(streams[s]);
      if (joins[s] != nullptr) (void)cudaEventDestroy(joins[s]);
    }
    if (fork != nullptr) (void)cudaEventDestroy(fork);
  }
};

struct ThreadStreams {
  std::vector<std::unique_ptr<GroupStreams>> by_device;
};

absl::StatusOr<GroupStreams*> ThreadGroupStreams() {
  thread_local ThreadStreams all;
  int device = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  for (const auto& g : all.by_device) {
    if (g->device == device) return g.get();
  }
  auto g = std::make_unique<GroupStreams>();
  g->device = device;
  FERRY_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming));
  for (int s = 0; s < kGroupedLinearStreams; ++s) {
    FERRY_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&g->streams[s], cudaStreamNonBlocking));
    FERRY_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&g->joins[s], cudaEventDisableTiming));
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasCreate(&g->handles[s]));
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasSetStream(g->handles[s], g->streams[s]));
  }
  all.by_device.push_back(std::move(g));
  return all.by_device.back().get();
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
  return LinearOn(*handle, static_cast<cudaStream_t>(stream), x, rows, in, w, out, y);
}

absl::Status GroupedLinearBf16(const LinearGroupBf16* groups, int64_t n, int64_t in, int64_t out, void* stream) {
  if (n < 0 || in < 1 || out < 1 || in > INT_MAX || out > INT_MAX || (n > 0 && groups == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("GroupedLinearBf16: ", n, " groups, in ", in, ", out ", out,
                                                   " (need in, out >= 1 and <= ", INT_MAX, ", a group array)"));
  }
  int64_t busy = 0, last = -1;
  for (int64_t g = 0; g < n; ++g) {
    const LinearGroupBf16& p = groups[g];
    if (p.rows < 0 || p.rows > INT_MAX || (p.rows > 0 && (p.x == nullptr || p.w == nullptr || p.y == nullptr))) {
      return absl::InvalidArgumentError(absl::StrCat("GroupedLinearBf16: group ", g, " has ", p.rows,
                                                     " rows (need 0 to ", INT_MAX, ") or a null x, w or y"));
    }
    if (p.rows > 0) ++busy, last = g;
  }
  if (busy == 0) return absl::OkStatus();
  if (busy == 1) return LinearBf16(groups[last].x, groups[last].rows, in, groups[last].w, out, groups[last].y, stream);
  absl::StatusOr<GroupStreams*> gs = ThreadGroupStreams();
  if (!gs.ok()) return gs.status();
  GroupStreams& G = **gs;
  const cudaStream_t caller = static_cast<cudaStream_t>(stream);
  const int used = static_cast<int>(std::min<int64_t>(busy, kGroupedLinearStreams));
  FERRY_CUDA_RETURN_IF_ERROR(cudaEventRecord(G.fork, caller));
  for (int s = 0; s < used; ++s) FERRY_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(G.streams[s], G.fork, 0));
  absl::Status st;
  int next = 0;
  for (int64_t g = 0; g < n && st.ok(); ++g) {
    const LinearGroupBf16& p = groups[g];
    if (p.rows == 0) continue;
    st.Update(LinearOn(G.handles[next], G.streams[next], p.x, p.rows, in, p.w, out, p.y));
    next = (next + 1) % used;
  }
  // Join even after an error, so `stream` never runs ahead of work already queued.
  for (int s = 0; s < used; ++s) {
    FERRY_CUDA_RETURN_IF_ERROR(cudaEventRecord(G.joins[s], G.streams[s]));
    FERRY_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(caller, G.joins[s], 0));
  }
  return st;
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
  if (GemvApplies(x, rows, in, w) && out <= kGemvMaxOutF32) {
    return GemvBf16F32(x, rows, in, w, out, alpha, y, stream);
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

absl::Status LinearBf16Scaled(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                              const float* alpha, uint16_t* y, int64_t y_row, void* stream) {
  if (rows < 0 || in < 1 || out < 1 || y_row < out || rows > INT_MAX || in > INT_MAX || out > INT_MAX ||
      y_row > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("LinearBf16Scaled: rows ", rows, ", in ", in, ", out ", out,
                                                   ", y_row ", y_row, " (need rows >= 0, in >= 1, out >= 1, y_row >= "
                                                   "out, each <= ", INT_MAX, ")"));
  }
  if (rows == 0) return absl::OkStatus();
  if (x == nullptr || w == nullptr || y == nullptr || alpha == nullptr) {
    return absl::InvalidArgumentError("LinearBf16Scaled: null x, w, y or alpha");
  }
  absl::StatusOr<cublasHandle_t> handle = ThreadHandle();
  if (!handle.ok()) return handle.status();
  // beta: a device zero (in device pointer mode beta is read there too); cuBLAS reads no C when
  // beta is 0, so y's old contents (NaN poison in the harness) never enter the result.
  float* beta = nullptr;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetSymbolAddress(reinterpret_cast<void**>(&beta), g_device_zero));
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasSetStream(*handle, static_cast<cudaStream_t>(stream)));
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_HOST;
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasGetPointerMode(*handle, &mode));
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasSetPointerMode(*handle, CUBLAS_POINTER_MODE_DEVICE));
  const cublasStatus_t st = cublasGemmEx(*handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                                         static_cast<int>(rows), static_cast<int>(in), alpha, w, CUDA_R_16BF,
                                         static_cast<int>(in), x, CUDA_R_16BF, static_cast<int>(in), beta, y,
                                         CUDA_R_16BF, static_cast<int>(y_row), CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT);
  // The thread's handle serves every other call in the mode it had (host pointers).
  const cublasStatus_t restored = cublasSetPointerMode(*handle, mode);
  FERRY_CUBLAS_RETURN_IF_ERROR(st);
  FERRY_CUBLAS_RETURN_IF_ERROR(restored);
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
