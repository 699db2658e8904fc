// The coordinator's options (common/options.h: defined by ferry-coordinator and by `ferry`,
// whose serve hands them all to the coordinator it starts, and whose plan reads the KV ones).
#pragma once

#include <cstdint>
#include <string>

#include "common/options.h"

#define FERRY_COORDINATOR_OPTIONS(X)                                                                        \
  X(std::string, host, "127.0.0.1",                                                                         \
    "Address the coordinator's servers (gRPC API and control, OpenAI HTTP, /metrics) bind to")              \
  X(int32_t, port, 50051, "gRPC port of the public API (ferry.v1.Ferry and health)")                        \
  X(int32_t, control_port, 0, "gRPC port of the control service the workers register on (0: --port + 1)")   \
  X(int32_t, metrics_port, 9400, "HTTP port of the coordinator's /metrics (0: none); serve: rank r's is +1+r") \
  X(int32_t, http_port, 8000,                                                                               \
    "HTTP port of the OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models, /health) "  \
    "(0: none)")                                                                                            \
  X(std::string, api_key_file, "",                                                                          \
    "File (mode 0600) whose first line is the key HTTP clients send as Authorization: Bearer KEY "          \
    "(empty: none; required when --http-port listens beyond loopback)")                                    \
  X(int64_t, max_batch_tokens, 256, "Tokens one step may carry (decode rows + prefill chunks)")            \
  X(int64_t, parallel, 16, "Requests holding a lane at once (plan: streams served at once)")               \
  X(int64_t, max_queue, 64, "Requests that may wait for a lane; past it requests get RESOURCE_EXHAUSTED")   \
  X(int64_t, context, 0, "Context length in tokens, prompt + generated (0: the model's max_position_embeddings)") \
  X(int64_t, kv_pool_pages, 0,                                                                              \
    "Pages in each rank's KV pool (0: the memory plan sizes the pool from the room the workers report)")    \
  X(std::string, kv_pages, "auto", "KV layout: auto (pages from two ranks, windows at one), on (pages), off") \
  X(int64_t, page_size, 512, "Tokens a KV page holds (a power of two from 16 to 1024)")                     \
  X(double, prompt_cache_gib, 16.0, "The prompt cache's budget a rank, GiB (0: no prompt cache)")          \
  X(int64_t, prompt_cache_tokens, -1,                                                                       \
    "The prompt cache's budget in token rows (-1: the plan's share of --prompt-cache-gib; 0: none)")        \
  X(std::string, owner_split, "auto",                                                                       \
    "Keep each conversation's MLA latent rows on one owner rank, the others shipping their queries to it "  \
    "(docs/owner-split.md): auto (on from two ranks with KV pages; check-golden: off), on (check-golden: "  \
    "prompt k's rows on rank k modulo W), off")                                                             \
  X(int64_t, carry_min_tokens, 2048,                                                                        \
    "Owner split: a resume whose owner lacks room moves its kept rows to a new owner from this many "       \
    "tokens; shorter ones are recomputed")                                                                  \
  X(double, ready_timeout_s, 300, "Seconds to wait for every worker to register and load")                  \
  X(std::string, served_model_name, "",                                                                     \
    "The name the model is served under (the API's model, the metrics' model_name); empty: --model's last " \
    "path part")

FERRY_COORDINATOR_OPTIONS(FERRY_DECLARE_OPTION)
