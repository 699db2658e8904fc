#include "model/families/calibration.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/families/generate.h"

namespace ferry::model {
namespace {

// The non-negative integer at the start of `s` (its digits consumed), or nullopt.
std::optional<int64_t> TakeIndex(absl::string_view* s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
  if (ec != std::errc() || end == s->data() || v < 0) return std::nullopt;
  s->remove_prefix(static_cast<size_t>(end - s->data()));
  return v;
}

// Whether `s` starts with `prefix`, consuming it.
bool Take(absl::string_view* s, absl::string_view prefix) {
  if (!absl::StartsWith(*s, prefix)) return false;
  s->remove_prefix(prefix.size());
  return true;
}

class AmaxObserver final : public FfnObserver {
 public:
  void See(int64_t layer, int64_t expert, MlpInput input, const float* x, int64_t rows,
           int64_t cols) override {
    float& amax = amax_[MlpSite{layer, expert, input}];
    for (int64_t i = 0; i < rows * cols; ++i) amax = std::max(amax, std::fabs(x[i]));
  }
  std::map<MlpSite, float> Result() { return std::move(amax_); }

 private:
  std::map<MlpSite, float> amax_;
};

}  // namespace

std::optional<MlpSite> ParseMlpProjection(absl::string_view name) {
  const size_t at = name.find("layers.");
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view s = name.substr(at + 7);
  MlpSite site;
  const std::optional<int64_t> layer = TakeIndex(&s);
  if (!layer || !Take(&s, ".mlp.")) return std::nullopt;
  site.layer = *layer;
  if (Take(&s, "experts.")) {
    const std::optional<int64_t> e = TakeIndex(&s);
    if (!e || !Take(&s, ".")) return std::nullopt;
    site.expert = *e;
  } else if (Take(&s, "shared_experts.")) {
    site.expert = FfnObserver::kSharedExpert;
  }
  if (s == "gate_proj.weight" || s == "up_proj.weight") {
    site.input = MlpInput::kGateUp;
  } else if (s == "down_proj.weight") {
    site.input = MlpInput::kDown;
  } else {
    return std::nullopt;
  }
  return site;
}

absl::StatusOr<std::map<MlpSite, float>> CalibrateMlpInputs(CausalLM& model,
                                                           const std::vector<std::vector<int32_t>>& prompts) {
  if (prompts.empty()) return absl::InvalidArgumentError("calibration needs at least one prompt");
  AmaxObserver observer;
  model.set_ffn_observer(&observer);
  GenerateOptions prefill_only;
  prefill_only.max_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) {
      model.set_ffn_observer(nullptr);
      return absl::InvalidArgumentError(absl::StrCat("calibration prompt ", i + 1, " is empty"));
    }
    absl::StatusOr<GenerateResult> r = Generate(model, prompts[i], prefill_only);
    if (!r.ok()) {
      model.set_ffn_observer(nullptr);
      return WithContext(absl::StrCat("calibration prompt ", i + 1), r.status());
    }
  }
  model.set_ffn_observer(nullptr);
  return observer.Result();
}

}  // namespace ferry::model
