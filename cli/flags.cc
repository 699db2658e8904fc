#include "cli/flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, model, "", "Checkpoint directory (config.json + safetensors)");
ABSL_FLAG(std::string, golden, "",
          "check-golden: reference file (default: <model>/golden.safetensors)");
ABSL_FLAG(double, tolerance, -1,
          "check-golden: largest |logit error| that passes (logit units; -1: 1e-3 in float32; cuda bf16: 0.5 glm_moe_dsa, "
          "1.5 glm5_next)");
ABSL_FLAG(std::string, device, "cpu", "check-golden, generate --model, serve: where the model runs: cpu, or cuda (one GPU a rank)");
ABSL_FLAG(std::string, precision, "bf16",
          "check-golden, generate --model with --device cuda: bf16 (serving) or f32 (float32 activations, "
          "to verify against the goldens)");
ABSL_FLAG(bool, fp8_experts, true,
          "generate --model, serve (--device cuda, bf16): keep experts a checkpoint stores in block-scaled FP8 in "
          "FP8 and run them as W8A8 (false: upcast them to bf16, the CPU reference's numerics)");
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
ABSL_FLAG(std::string, gpus, "",
          "serve --device cuda: the GPUs of the ranks, comma-separated (rank r on the (r mod n)-th; several ranks may "
          "share one); empty: rank modulo the visible GPUs");
ABSL_FLAG(int64_t, ranks, 1,
          "plan, serve, check-golden: tensor-parallel width W (ranks, one GPU each; check-golden runs them as "
          "processes on this machine, rank r on GPU r modulo the visible ones)");
ABSL_FLAG(int64_t, context, 0, "plan, serve: window, tokens a stream (0: the model's max_position_embeddings)");
ABSL_FLAG(int64_t, parallel, 0,
          "plan: lanes, streams served at once (the engine's own included; 0: 1); serve: requests at once (0: 16)");
ABSL_FLAG(double, room_gib, -1, "plan: GiB a rank has for KV after weights and workspace (smallest rank)");
ABSL_FLAG(std::string, kv_pages, "auto", "plan, serve: KV layout: auto (pages from 2 ranks, bf16), on, off");
ABSL_FLAG(int64_t, page_size, 512, "plan: tokens a KV page, a power of two from 16 to 1024");
ABSL_FLAG(double, cache_gib, 16, "plan, serve: prompt cache budget, GiB a rank (0: no prompt cache)");
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
ABSL_FLAG(std::string, host, "127.0.0.1", "serve: address the coordinator binds to");
ABSL_FLAG(int32_t, port, 50051, "serve: gRPC port of the coordinator's public API");
ABSL_FLAG(int32_t, control_port, 0,
          "serve: gRPC port of the coordinator's control service, where the workers register (0: --port + 1)");
ABSL_FLAG(int32_t, metrics_port, 9400, "serve: HTTP port of /metrics (0: none)");
ABSL_FLAG(int32_t, http_port, 8000,
          "serve: HTTP port of the OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models, "
          "/health) on --host (0: none)");
ABSL_FLAG(std::string, api_key_file, "",
          "serve: file (mode 0600) whose first line is the key HTTP clients send as Authorization: Bearer KEY "
          "(empty: none; required when --host is not loopback)");
ABSL_FLAG(int64_t, max_batch_tokens, 256, "serve: tokens one step may carry");
ABSL_FLAG(int64_t, max_queue, 64, "serve: requests that may wait for a lane");
ABSL_FLAG(int64_t, kv_pool_pages, 0,
          "serve: pages of --page-size tokens in each rank's KV pool (0: the memory plan sizes it)");
ABSL_FLAG(int64_t, prompt_cache_tokens, -1,
          "serve: the prompt cache's budget in token rows (-1: the plan's share of --cache-gib; 0: none)");
ABSL_FLAG(std::string, owner_split, "auto",
          "plan, serve, check-golden: each conversation's latent rows on one owner rank, queries shipped to it: auto "
          "(on from two ranks with KV pages; off for check-golden), on (check-golden: prompt k's rows on rank k "
          "modulo W), off");
ABSL_FLAG(int64_t, carry_min_tokens, 2048,
          "serve: with the latent split, a resume whose owner lacks room carries its kept rows to a new owner from "
          "this many tokens (shorter ones are recomputed)");
ABSL_FLAG(double, memory_gib, 0,
          "serve: memory a rank may use, weights included, GiB (0: the host's available memory over the ranks)");
ABSL_FLAG(double, step_timeout, 60,
          "serve, check-golden: seconds a step's data-plane transfers may wait for a peer before the step is aborted and the "
          "worker exits, naming the peer (seconds)");
ABSL_FLAG(std::string, served_model_name, "",
          "serve: the name the model is served under (the metrics' model_name label); empty: --model's last path part");
ABSL_FLAG(double, keepalive_s, 10,
          "serve: seconds between keepalive pings on the control streams, and to wait for their answer (a "
          "stopped coordinator or worker is found within about twice this)");
ABSL_FLAG(double, ready_timeout_s, 300, "serve: seconds to wait for the server to come up (seconds)");
ABSL_FLAG(bool, verbose, false, "Log debug lines to stderr");
