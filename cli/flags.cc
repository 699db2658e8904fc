#include "cli/flags.h"

#include "absl/flags/flag.h"

// The coordinator's and the workers' option tables (serve hands them on; plan, check-golden and
// generate read some), and what every serving process takes.
FERRY_COORDINATOR_OPTIONS(FERRY_DEFINE_OPTION)
FERRY_WORKER_OPTIONS(FERRY_DEFINE_OPTION)
FERRY_PROCESS_OPTIONS(FERRY_DEFINE_OPTION)

ABSL_FLAG(std::string, model, "", "Checkpoint directory (config.json + safetensors)");
ABSL_FLAG(std::string, golden, "",
          "check-golden: reference file (default: <model>/golden.safetensors)");
ABSL_FLAG(double, tolerance, -1,
          "check-golden: largest |logit error| that passes (logit units; -1: 1e-3 in float32; cuda bf16: 0.5 glm_moe_dsa, "
          "1.5 glm5_next)");
ABSL_FLAG(int64_t, prefill_chunk, 0,
          "Feed the prompt in pieces of this many tokens (0: one piece)");
ABSL_FLAG(bool, pin_decisions, true,
          "check-golden: replay the reference's indexer top-k and MoE routing selections when the golden records "
          "them (float32 runs fail an own choice that differs beyond a near tie); without them, --device cuda "
          "--precision bf16 replays the float32 CUDA run's (the unpinned run is reported too); false: no pinning");
ABSL_FLAG(std::string, logits_out, "",
          "check-golden: write every prompt's logits there (float32, prompt by prompt, [positions, vocab] each)");
ABSL_FLAG(std::string, logits_against, "",
          "check-golden: compare the logits with a --logits-out file of another run (e.g. another width)");
ABSL_FLAG(double, logits_within, 0,
          "check-golden --logits-against: the largest |difference| allowed (0: bit-identical)");
ABSL_FLAG(std::string, prompt_ids, "", "generate: prompt token ids, comma-separated");
ABSL_FLAG(std::string, prompt, "",
          "generate: the prompt as text (tokenized with the model's tokenizer.json; the output is text too)");
ABSL_FLAG(int64_t, max_tokens, 16, "generate: most tokens to generate");
ABSL_FLAG(double, temperature, 0.0, "generate: sampling temperature (0: greedy)");
ABSL_FLAG(int32_t, top_k, 0, "generate: sample among the k most likely tokens (0: all)");
ABSL_FLAG(double, top_p, 1.0, "generate: nucleus mass in (0, 1] (1: all)");
ABSL_FLAG(uint64_t, seed, 0, "generate: random seed for sampling");
ABSL_FLAG(int32_t, logprobs, -1,
          "generate: print each token's log-probability and those of the N most likely tokens (0 to 20; -1: none)");
ABSL_FLAG(std::string, stop_token_ids, "", "generate: extra stop token ids, comma-separated");
ABSL_FLAG(bool, ignore_eos, false, "generate: do not stop at the model's end-of-sequence tokens");
ABSL_FLAG(std::string, config, "", "plan: a config.json to read instead of --model DIR's");
ABSL_FLAG(std::string, format, "",
          "quantize: nvfp4 (MLP and expert projections as ModelOpt NVFP4), bf16 or f32 (every weight decoded)");
ABSL_FLAG(std::string, calibration, "",
          "quantize --format nvfp4: a text file of calibration prompts, one a line, encoded with IN's tokenizer: "
          "each MLP projection gets its input_scale (static activation scales, for W4A4 kernels)");
ABSL_FLAG(std::string, calibration_ids, "",
          "quantize --format nvfp4: calibration prompts as token ids, one prompt a line (for checkpoints without "
          "a tokenizer)");
ABSL_FLAG(std::string, gpus, "",
          "serve --device cuda: the GPUs of the ranks, comma-separated (rank r on the (r mod n)-th; several ranks may "
          "share one); empty: rank modulo the visible GPUs");
ABSL_FLAG(int64_t, ranks, 1,
          "plan, serve, check-golden: tensor-parallel width W (ranks, one GPU each; check-golden runs them as "
          "processes on this machine, rank r on GPU r modulo the visible ones)");
ABSL_FLAG(double, room_gib, -1,
          "plan: GiB a rank has for KV after weights and workspace (smallest rank); instead of --memory-gib");
ABSL_FLAG(double, reserve_gib, -1,
          "plan --memory-gib: GiB of a rank's memory kept for the OS, the runtime and the engine's workspace (-1: 28, "
          "a GB10's: of its 128 GiB Linux sees 121.7, and CUDA can allocate about 102 at boot, less 2 GiB of "
          "workspace)");
ABSL_FLAG(int64_t, mtp_layers, 0, "plan: MTP layers served (each caches rows like an MLA layer)");
ABSL_FLAG(std::string, kv_cache, "bf16", "plan: latent cache format: bf16 or fp8");
ABSL_FLAG(double, fixed_mib, -1,
          "plan: fixed state a stream, MiB a rank (-1: the model's KDA state over --ranks)");
ABSL_FLAG(std::string, server, "",
          "generate, check-golden, status: the coordinator's address (host:port); empty (generate, check-golden): "
          "run --model in-process");
ABSL_FLAG(double, wait_s, 0, "status: seconds to wait for the server to be serving (0: look once)");
ABSL_FLAG(bool, stream, false, "generate --server: stream tokens as they are generated");
ABSL_FLAG(std::string, system, "", "chat: a system message opening the conversation");
ABSL_FLAG(bool, think, false, "chat: let the model reason first (the chat template's enable_thinking; /think on|off)");
ABSL_FLAG(std::string, request_id, "", "generate --server: client request id (default: assigned by the server)");
ABSL_FLAG(double, timeout_s, 600, "generate --server: deadline of the request (seconds)");
