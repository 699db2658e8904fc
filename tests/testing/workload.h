// Random greedy workloads for batching tests, with each request's tokens when run alone
// in-process (the reference a batched or served run must reproduce exactly).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::testing {

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> max_tokens;
  std::vector<std::vector<int32_t>> alone;  // greedy tokens of each request run alone
};

// n requests for the checkpoint at `dir`: prompts of prompt_min + [0, prompt_span) random ids,
// max_tokens of tokens_min + [0, tokens_span), end-of-sequence ignored.
Workload MakeWorkload(const std::string& dir, int n, uint32_t seed, int prompt_min, int prompt_span, int tokens_min,
                      int tokens_span);

}  // namespace ferry::testing
