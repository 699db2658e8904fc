#include "cli/load_model.h"

#include "absl/strings/str_cat.h"

#ifdef FERRY_WITH_CUDA
#include "model/cuda/load_cuda.h"
#endif

namespace ferry::cli {

absl::StatusOr<std::unique_ptr<model::CausalLM>> LoadModelOn(const std::string& device, const std::string& dir,
                                                             const std::string& precision) {
  if (precision != "bf16" && precision != "f32") {
    return absl::InvalidArgumentError(absl::StrCat("--precision ", precision, ": expected bf16 or f32"));
  }
  if (device == "cpu") return model::LoadCausalLM(dir);
  if (device == "cuda") {
#ifdef FERRY_WITH_CUDA
    return model::cuda::LoadCausalLMCuda(
        dir, {}, {}, precision == "f32" ? model::cuda::Precision::kF32 : model::cuda::Precision::kBf16);
#else
    return absl::UnimplementedError("--device cuda: this ferry was built without CUDA (nvcc was not found when "
                                    "CMake configured it)");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat("--device ", device, ": expected cpu or cuda"));
}

double GoldenTolerance(const std::string& device, const std::string& precision, model::Family family, double flag) {
  if (flag >= 0) return flag;
  // Float32 arithmetic like the reference: 1e-3 logits (measured <= 1.2e-4).
  if (device != "cuda" || precision != "bf16") return 1e-3;
  // bf16 activations with the indexer and routing decisions pinned to the float32 run's
  // (bench/results/h200-check-golden-cuda.md). Measured on the tiny checkpoints (logits about
  // -6..6), every position of every golden prompt: at most 0.39 (glm-dsa-tiny) and 1.14
  // (glm5next-tiny). Rounding error accumulates over glm5_next's 8 layers of 4 hyper-connected
  // streams faster than over glm_moe_dsa's 4 layers: the float32 runs' stream error grows from
  // layer 0 to the last 6.8x there (1.07e-6 to 7.3e-6) against 3.0x (1.02e-6 to 3.0e-6), and the
  // pinned bf16 maxima stand in about that ratio. Each bound is the measured maximum with ~30%
  // to spare; the unpinned bf16 runs are off by 3..8 logits.
  return family == model::Family::kGlm5Next ? 1.5 : 0.5;
}

}  // namespace ferry::cli
