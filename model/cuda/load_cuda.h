// Loading a model onto one CUDA device (the CUDA twin of model::LoadCausalLM).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/families/causal_lm.h"
#include "model/cuda/device_buffer.h"
#include "model/golden/decision_log.h"
#include "model/parallel/tensor_parallel.h"

namespace ferry::model::cuda {

// Opens the checkpoint at `dir` and uploads this rank's tensor-parallel shard (all of it on one
// rank) to the current CUDA device in opts.precision
// (bf16 weights and activations to serve; float32 to verify against the goldens,
// device_buffer.h). FP8 block-scaled weights are upcast on load, the experts kept in FP8 where
// opts.fp8_experts allows; NVFP4 ones likewise, the experts kept packed where opts.nvfp4_experts
// allows (CudaLoadOptions). The returned model's Forward() runs on that
// device and its cache pages live there (device_pages.h).
// Errors: FAILED_PRECONDITION without a CUDA device; INVALID_ARGUMENT for widths that do not
// split over tp's ranks; the checkpoint's and the device allocator's errors as they come.
absl::StatusOr<std::unique_ptr<CausalLM>> LoadCausalLMCuda(const std::string& dir, const TensorParallel& tp = {},
                                                           const CacheOptions& cache = {},
                                                           const CudaLoadOptions& opts = {});

}  // namespace ferry::model::cuda
