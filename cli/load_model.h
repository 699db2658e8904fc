// Loading a model in-process on the device --device names (check-golden, generate --model).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/families/causal_lm.h"
#include "model/parallel/tensor_parallel.h"

namespace ferry::cli {

// device "cpu": model::LoadCausalLM (float32); "cuda": model::cuda::LoadCausalLMCuda (on the
// current GPU) in `precision` "bf16" or "f32", FP8 experts kept in FP8 when `fp8_experts` and
// NVFP4 experts kept packed when `nvfp4_experts` (those two ignored on cpu); NVFP4 weights computed
// as `nvfp4` ("w4a16" or "w4a4", --nvfp4_numerics; model/checkpoint/quantization.h) says. `tp`: this rank's shard of a tensor-parallel
// group (dataplane/process_group.h).
// Errors: INVALID_ARGUMENT for another device, precision or numerics name; UNIMPLEMENTED for "cuda" in a
// build made without nvcc; the loaders' errors.
absl::StatusOr<std::unique_ptr<model::CausalLM>> LoadModelOn(const std::string& device, const std::string& dir,
                                                             const std::string& precision = "bf16",
                                                             bool fp8_experts = true,
                                                             const model::TensorParallel& tp = {},
                                                             bool nvfp4_experts = true,
                                                             const std::string& nvfp4 = "w4a16");

// The --tolerance check-golden uses: the flag when >= 0, else the default for the device,
// precision and family (float32 on cpu or cuda f32: 1e-3 logits; cuda bf16 with the decisions
// pinned: 0.5 for glm_moe_dsa, 1.5 for glm5_next; see load_model.cc).
double GoldenTolerance(const std::string& device, const std::string& precision, model::Family family, double flag);

}  // namespace ferry::cli
