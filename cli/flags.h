// The `ferry` CLI's options, one table for every subcommand (defined in flags.cc).
// Dashes and underscores are interchangeable on the command line (--max-tokens == --max_tokens).
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "coordinator/options.h"
#include "worker/options.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, golden);
ABSL_DECLARE_FLAG(double, tolerance);
ABSL_DECLARE_FLAG(int64_t, prefill_chunk);
ABSL_DECLARE_FLAG(bool, pin_decisions);
ABSL_DECLARE_FLAG(std::string, prompt_ids);
ABSL_DECLARE_FLAG(std::string, prompt);
ABSL_DECLARE_FLAG(int64_t, max_tokens);
ABSL_DECLARE_FLAG(double, temperature);
ABSL_DECLARE_FLAG(int32_t, top_k);
ABSL_DECLARE_FLAG(double, top_p);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(int32_t, logprobs);
ABSL_DECLARE_FLAG(std::string, stop_token_ids);
ABSL_DECLARE_FLAG(bool, ignore_eos);
// plan
ABSL_DECLARE_FLAG(std::string, config);
ABSL_DECLARE_FLAG(std::string, format);
ABSL_DECLARE_FLAG(std::string, calibration);
ABSL_DECLARE_FLAG(std::string, calibration_ids);
ABSL_DECLARE_FLAG(int64_t, ranks);
ABSL_DECLARE_FLAG(std::string, gpus);
ABSL_DECLARE_FLAG(std::string, logits_out);
ABSL_DECLARE_FLAG(std::string, logits_against);
ABSL_DECLARE_FLAG(double, logits_within);
ABSL_DECLARE_FLAG(double, room_gib);
ABSL_DECLARE_FLAG(double, reserve_gib);
ABSL_DECLARE_FLAG(int64_t, mtp_layers);
ABSL_DECLARE_FLAG(std::string, kv_cache);
ABSL_DECLARE_FLAG(double, fixed_mib);
ABSL_DECLARE_FLAG(std::string, server);
ABSL_DECLARE_FLAG(double, wait_s);
ABSL_DECLARE_FLAG(bool, stream);
ABSL_DECLARE_FLAG(std::string, system);
ABSL_DECLARE_FLAG(bool, think);
ABSL_DECLARE_FLAG(std::string, request_id);
ABSL_DECLARE_FLAG(double, timeout_s);
