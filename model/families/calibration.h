// Activation calibration: the input scales a ModelOpt NVFP4 checkpoint stores for W4A4 kernels
// (X.input_scale = amax / (6 * 448), amax the largest |x| that reaches projection X over the
// calibration prompts), measured by running prompts through a model with an FfnObserver
// (model/blocks/ffn.h) attached. On the CPU reference every routed expert sees every token, as
// calibration tools route all tokens to all experts, so no expert goes unmeasured; layers the
// forward does not run (MTP layers) are not measured. `ferry quantize --calibration` uses it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/blocks/ffn.h"
#include "model/families/causal_lm.h"

namespace ferry::model {

// Where an MLP projection sits: layer, expert (FfnObserver::kDenseMlp, kSharedExpert, or the
// routed expert's id) and which input it reads.
struct MlpSite {
  int64_t layer = 0;
  int64_t expert = FfnObserver::kDenseMlp;
  MlpInput input = MlpInput::kGateUp;
  auto key() const { return std::tuple(layer, expert, input); }
  bool operator<(const MlpSite& o) const { return key() < o.key(); }
  bool operator==(const MlpSite& o) const { return key() == o.key(); }
};

// The site of weight tensor `name` when it is an MLP projection as the GLM checkpoints name them
// ("<prefix>layers.<l>.mlp.[experts.<e>.|shared_experts.]{gate,up,down}_proj.weight"); nullopt
// for every other tensor.
std::optional<MlpSite> ParseMlpProjection(absl::string_view name);

// The largest |x| at each site over `prompts` (token ids), each prefilled in a fresh sequence of
// `model` (which it leaves with no observer attached). Errors: Forward()'s (a token id outside
// the vocabulary names it) with the prompt's number, and INVALID_ARGUMENT for no prompts or an
// empty one.
absl::StatusOr<std::map<MlpSite, float>> CalibrateMlpInputs(CausalLM& model,
                                                           const std::vector<std::vector<int32_t>>& prompts);

}  // namespace ferry::model
