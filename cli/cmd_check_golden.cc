#include <cstdio>

#include "absl/flags/flag.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/load_model.h"
#include "model/causal_lm.h"
#include "model/golden.h"

namespace ferry::cli {

// cpu: the float32 backend must reproduce transformers' greedy tokens exactly and its logits
// within 1e-3 (model::CheckGoldenPrompt). cuda: bf16 rounds differently, so the continuation is
// teacher-forced and a token may differ only where the golden's top-1/top-2 margin is within
// the tolerance (model::CheckGoldenPromptForced).
int RunCheckGolden() {
  const std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) {
    fprintf(stderr, "ferry check-golden: --model DIR is required\n");
    return 2;
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  const std::string precision = device == "cpu" ? "f32" : absl::GetFlag(FLAGS_precision);
  std::string golden_path = absl::GetFlag(FLAGS_golden);
  if (golden_path.empty()) golden_path = dir + "/golden.safetensors";
  const float tol = static_cast<float>(GoldenTolerance(device, precision, absl::GetFlag(FLAGS_tolerance)));
  const bool forced = device != "cpu";

  auto model = LoadModelOn(device, dir, precision);
  if (!model.ok()) {
    fprintf(stderr, "ferry check-golden: %s\n", std::string(model.status().message()).c_str());
    return 2;
  }
  auto prompts = model::ReadGolden(golden_path);
  if (!prompts.ok()) {
    fprintf(stderr, "ferry check-golden: %s\n", std::string(prompts.status().message()).c_str());
    return 2;
  }
  printf("device %s, precision %s, tolerance %.3g logits%s\n", device.c_str(), precision.c_str(), tol,
         forced ? " (teacher-forced continuation; tokens may differ only at golden margins <= tolerance)" : "");
  int passed = 0, failed = 0;
  for (const model::GoldenPrompt& g : *prompts) {
    const int64_t chunk = absl::GetFlag(FLAGS_prefill_chunk);
    auto r = forced ? model::CheckGoldenPromptForced(**model, g, tol, chunk)
                    : model::CheckGoldenPrompt(**model, g, tol, chunk);
    if (!r.ok()) {
      printf("%s: error: %s\n", g.name.c_str(), std::string(r.status().message()).c_str());
      ++failed;
      continue;
    }
    printf("%s: prompt %lld tokens, %zu generated, tokens %s, max |logit error| prefill %.3g decode %.3g",
           g.name.c_str(), static_cast<long long>(r->prompt_len), r->generated.size(),
           r->tokens_equal ? "equal" : "DIFFER", r->max_prefill_error, r->max_decode_error);
    if (forced) {
      printf(", near ties %lld (flipped %lld)", static_cast<long long>(r->near_ties),
             static_cast<long long>(r->near_tie_flips));
    }
    printf(": %s\n", r->passed ? "pass" : "FAIL");
    if (!r->tokens_equal) {
      printf("  expected:");
      for (int32_t t : g.greedy) printf(" %d", t);
      printf("\n  got:     ");
      for (int32_t t : r->generated) printf(" %d", t);
      printf("\n");
    }
    (r->passed ? passed : failed)++;
  }
  printf("golden: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace ferry::cli
