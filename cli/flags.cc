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
ABSL_FLAG(std::string, config, "", "plan: a config.json to read instead of --model DIR's");
ABSL_FLAG(int64_t, ranks, 1, "plan: tensor-parallel width W (ranks, one GPU each)");
ABSL_FLAG(int64_t, context, 0, "plan: window, tokens a stream (0: the model's max_position_embeddings)");
ABSL_FLAG(int64_t, parallel, 1, "plan: lanes, streams served at once (the engine's own included)");
ABSL_FLAG(double, room_gib, -1, "plan: GiB a rank has for KV after weights and workspace (smallest rank)");
ABSL_FLAG(std::string, kv_pages, "auto", "plan: KV layout: auto (pages from 2 ranks, bf16), on, off");
ABSL_FLAG(int64_t, page_size, 512, "plan: tokens a KV page, a power of two from 16 to 1024");
ABSL_FLAG(double, cache_gib, 16, "plan: prompt cache budget, GiB a rank");
ABSL_FLAG(int64_t, mtp_layers, 0, "plan: MTP layers served (each caches rows like an MLA layer)");
ABSL_FLAG(std::string, kv_cache, "bf16", "plan: latent cache format: bf16 or fp8");
ABSL_FLAG(double, fixed_mib, -1,
          "plan: fixed state a stream, MiB a rank (-1: the model's KDA state over --ranks)");
ABSL_FLAG(bool, verbose, false, "Log debug lines to stderr");
