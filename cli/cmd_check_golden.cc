#include <cstdio>

#include "absl/flags/flag.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "model/causal_lm.h"
#include "model/golden.h"

namespace ferry::cli {

int RunCheckGolden() {
  const std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) {
    fprintf(stderr, "ferry check-golden: --model DIR is required\n");
    return 2;
  }
  std::string golden_path = absl::GetFlag(FLAGS_golden);
  if (golden_path.empty()) golden_path = dir + "/golden.safetensors";
  const float tol = static_cast<float>(absl::GetFlag(FLAGS_tolerance));

  auto model = model::LoadCausalLM(dir);
  if (!model.ok()) {
    fprintf(stderr, "ferry check-golden: %s\n", std::string(model.status().message()).c_str());
    return 2;
  }
  auto prompts = model::ReadGolden(golden_path);
  if (!prompts.ok()) {
    fprintf(stderr, "ferry check-golden: %s\n", std::string(prompts.status().message()).c_str());
    return 2;
  }
  int passed = 0, failed = 0;
  for (const model::GoldenPrompt& g : *prompts) {
    auto r = model::CheckGoldenPrompt(**model, g, tol, absl::GetFlag(FLAGS_prefill_chunk));
    if (!r.ok()) {
      printf("%s: error: %s\n", g.name.c_str(), std::string(r.status().message()).c_str());
      ++failed;
      continue;
    }
    printf("%s: prompt %lld tokens, %zu generated, tokens %s, max |logit error| prefill %.3g decode %.3g: %s\n",
           g.name.c_str(), static_cast<long long>(r->prompt_len), r->generated.size(),
           r->tokens_equal ? "equal" : "DIFFER", r->max_prefill_error, r->max_decode_error,
           r->passed ? "pass" : "FAIL");
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
