// CUDA error handling for .cu files: every runtime call's result becomes an absl::Status.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#define FERRY_CUDA_RETURN_IF_ERROR(expr)                                                      \
  do {                                                                                        \
    cudaError_t ferry_cuda_err_ = (expr);                                                     \
    if (ferry_cuda_err_ != cudaSuccess) {                                                     \
      return ::absl::InternalError(::absl::StrCat(#expr, " failed at ", __FILE__, ":", __LINE__, \
                                                  ": ", cudaGetErrorString(ferry_cuda_err_))); \
    }                                                                                         \
  } while (0)

// After a launch: the launch configuration error, if any.
#define FERRY_CUDA_RETURN_IF_LAUNCH_ERROR() FERRY_CUDA_RETURN_IF_ERROR(cudaGetLastError())
