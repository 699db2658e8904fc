#include "tests/testing/workload.h"

#include <random>
#include <stdexcept>

#include "model/families/causal_lm.h"
#include "model/families/generate.h"

namespace ferry::testing {

Workload MakeWorkload(const std::string& dir, int n, uint32_t seed, int prompt_min, int prompt_span, int tokens_min,
                      int tokens_span) {
  auto model = model::LoadCausalLM(dir);
  if (!model.ok()) throw std::runtime_error(std::string(model.status().message()));
  const int64_t vocab = (*model)->config().vocab_size;
  std::mt19937 rng(seed);
  Workload w;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_min + static_cast<int>(rng() % prompt_span)));
    for (int32_t& t : prompt) t = static_cast<int32_t>(2 + rng() % (vocab - 4));
    model::GenerateOptions opt;
    opt.max_tokens = tokens_min + static_cast<int>(rng() % tokens_span);
    opt.ignore_eos = true;
    auto res = model::Generate(**model, prompt, opt);
    if (!res.ok()) throw std::runtime_error(std::string(res.status().message()));
    w.prompts.push_back(std::move(prompt));
    w.max_tokens.push_back(opt.max_tokens);
    w.alone.push_back(res->tokens);
  }
  return w;
}

}  // namespace ferry::testing
