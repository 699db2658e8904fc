#include "cli/flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, model, "", "Checkpoint directory (config.json + safetensors)");
ABSL_FLAG(std::string, golden, "",
          "check-golden: reference file (default: <model>/golden.safetensors)");
ABSL_FLAG(double, tolerance, 1e-3, "check-golden: largest |logit error| that passes (logit units)");
ABSL_FLAG(int64_t, prefill_chunk, 0,
          "Feed the prompt in pieces of this many tokens (0: one piece)");
ABSL_FLAG(std::string, prompt_ids, "", "generate: prompt token ids, comma-separated");
ABSL_FLAG(int64_t, max_tokens, 16, "generate: most tokens to generate");
ABSL_FLAG(double, temperature, 0.0, "generate: sampling temperature (0: greedy)");
ABSL_FLAG(int32_t, top_k, 0, "generate: sample among the k most likely tokens (0: all)");
ABSL_FLAG(double, top_p, 1.0, "generate: nucleus mass in (0, 1] (1: all)");
ABSL_FLAG(uint64_t, seed, 0, "generate: random seed for sampling");
ABSL_FLAG(std::string, stop_token_ids, "", "generate: extra stop token ids, comma-separated");
ABSL_FLAG(bool, ignore_eos, false, "generate: do not stop at the model's end-of-sequence tokens");
ABSL_FLAG(bool, verbose, false, "Log debug lines to stderr");
