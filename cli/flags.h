// The `ferry` CLI's options, one table for every subcommand (defined in flags.cc).
// Dashes and underscores are interchangeable on the command line (--max-tokens == --max_tokens).
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, golden);
ABSL_DECLARE_FLAG(double, tolerance);
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(std::string, precision);
ABSL_DECLARE_FLAG(int64_t, prefill_chunk);
ABSL_DECLARE_FLAG(bool, pin_decisions);
ABSL_DECLARE_FLAG(std::string, prompt_ids);
ABSL_DECLARE_FLAG(int64_t, max_tokens);
ABSL_DECLARE_FLAG(double, temperature);
ABSL_DECLARE_FLAG(int32_t, top_k);
ABSL_DECLARE_FLAG(double, top_p);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, stop_token_ids);
ABSL_DECLARE_FLAG(bool, ignore_eos);
// plan
ABSL_DECLARE_FLAG(std::string, config);
ABSL_DECLARE_FLAG(int64_t, ranks);
ABSL_DECLARE_FLAG(std::string, gpus);
ABSL_DECLARE_FLAG(std::string, logits_out);
ABSL_DECLARE_FLAG(std::string, logits_against);
ABSL_DECLARE_FLAG(double, logits_within);
ABSL_DECLARE_FLAG(int64_t, context);
ABSL_DECLARE_FLAG(int64_t, parallel);
ABSL_DECLARE_FLAG(double, room_gib);
ABSL_DECLARE_FLAG(std::string, kv_pages);
ABSL_DECLARE_FLAG(int64_t, page_size);
ABSL_DECLARE_FLAG(double, cache_gib);
ABSL_DECLARE_FLAG(int64_t, mtp_layers);
ABSL_DECLARE_FLAG(std::string, kv_cache);
ABSL_DECLARE_FLAG(double, fixed_mib);
ABSL_DECLARE_FLAG(std::string, server);
ABSL_DECLARE_FLAG(bool, stream);
ABSL_DECLARE_FLAG(std::string, request_id);
ABSL_DECLARE_FLAG(double, timeout_s);
ABSL_DECLARE_FLAG(std::string, host);
ABSL_DECLARE_FLAG(int32_t, port);
ABSL_DECLARE_FLAG(int32_t, metrics_port);
ABSL_DECLARE_FLAG(int64_t, max_batch_tokens);
ABSL_DECLARE_FLAG(int64_t, max_queue);
ABSL_DECLARE_FLAG(double, ready_timeout_s);
ABSL_DECLARE_FLAG(double, step_timeout);
ABSL_DECLARE_FLAG(bool, fp8_experts);
ABSL_DECLARE_FLAG(int64_t, kv_pool_pages);
ABSL_DECLARE_FLAG(int64_t, prompt_cache_tokens);
ABSL_DECLARE_FLAG(double, memory_gib);
ABSL_DECLARE_FLAG(std::string, owner_split);
ABSL_DECLARE_FLAG(int64_t, carry_min_tokens);
ABSL_DECLARE_FLAG(bool, verbose);
