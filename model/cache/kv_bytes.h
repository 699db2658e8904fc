// What a model's caches cost a rank, from its configuration (the figures kvpool/bytes_per_token.h
// describes and the memory plan, kvpool/plan.h, takes): bytes a token and bytes a stream.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "kvpool/bytes_per_token.h"
#include "model/checkpoint/config.h"

namespace ferry::model {

// REQUIRES: 0 <= mtp_layers <= 16 (each MTP layer is one more MLA layer with a full indexer;
//           the count is an input because config.json does not say how many are served).
// Errors: INVALID_ARGUMENT for mtp_layers out of range, a config with no MLA layer and no MTP
//         layer (a token would cost nothing), or a pooled key that is not a whole number of
//         bytes a token (index_head_dim x 2 not divisible by index_kpool).
absl::StatusOr<kvpool::BytesPerToken> BytesPerTokenPerRank(const ModelConfig& config, kvpool::CacheDtype dtype,
                                                           int64_t mtp_layers);

// Bytes a stream holds on each rank whatever its length: for glm5_next the KDA state of every
// linear_attention layer, float32, its heads split over the ranks (a rank holds
// ceil(linear_num_heads / ranks) heads, so the fullest rank decides):
//   S:          heads x linear_head_dim x linear_head_dim
//   conv tails: (linear_conv_kernel_dim - 1) x 3 (q, k, v) x heads x linear_head_dim
// glm_moe_dsa has no such state: 0.
// REQUIRES: ranks >= 1. Errors: INVALID_ARGUMENT when ranks < 1.
absl::StatusOr<int64_t> FixedBytesPerStreamPerRank(const ModelConfig& config, int64_t ranks);

}  // namespace ferry::model
