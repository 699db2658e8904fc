#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "model/causal_lm.h"
#include "model/generate.h"

namespace ferry::cli {
namespace {

bool ParseIds(const std::string& text, const char* what, std::vector<int32_t>* out) {
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t v;
    if (!absl::SimpleAtoi(piece, &v)) {
      fprintf(stderr, "ferry generate: %s: '%s' is not a token id\n", what, std::string(piece).c_str());
      return false;
    }
    out->push_back(v);
  }
  return true;
}

}  // namespace

int RunGenerate() {
  const std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) {
    fprintf(stderr, "ferry generate: --model DIR is required\n");
    return 2;
  }
  model::GenerateOptions opt;
  std::vector<int32_t> prompt;
  if (!ParseIds(absl::GetFlag(FLAGS_prompt_ids), "--prompt-ids", &prompt) ||
      !ParseIds(absl::GetFlag(FLAGS_stop_token_ids), "--stop-token-ids", &opt.stop_token_ids)) {
    return 2;
  }
  if (prompt.empty()) {
    fprintf(stderr, "ferry generate: --prompt-ids is empty; give at least one token id\n");
    return 2;
  }
  opt.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  opt.sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  opt.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  opt.sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  opt.seed = absl::GetFlag(FLAGS_seed);
  opt.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  opt.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  if (opt.max_tokens < 1 || opt.sampling.temperature < 0 || opt.sampling.top_k < 0 ||
      !(opt.sampling.top_p > 0 && opt.sampling.top_p <= 1)) {
    fprintf(stderr,
            "ferry generate: need --max-tokens >= 1 (got %lld), --temperature >= 0 (got %g), "
            "--top-k >= 0 (got %d), --top-p in (0, 1] (got %g)\n",
            static_cast<long long>(opt.max_tokens), opt.sampling.temperature, opt.sampling.top_k,
            opt.sampling.top_p);
    return 2;
  }
  auto model = model::LoadCausalLM(dir);
  if (!model.ok()) {
    fprintf(stderr, "ferry generate: %s\n", std::string(model.status().message()).c_str());
    return 2;
  }
  auto res = model::Generate(**model, prompt, opt);
  if (!res.ok()) {
    fprintf(stderr, "ferry generate: %s\n", std::string(res.status().message()).c_str());
    return 2;
  }
  printf("%s\n", absl::StrJoin(res->tokens, ",").c_str());
  fprintf(stderr, "finish_reason: %s, %zu tokens\n", res->finish_reason.c_str(), res->tokens.size());
  return 0;
}

}  // namespace ferry::cli
