// What one token and one stream cost a rank in KV memory: the formats and the two numbers the
// memory plan (kvpool/plan.h) takes. model/cache/kv_bytes.h computes them from a model's
// configuration (kvpool/ reads no model; the model's paged cache keeps its pages with
// kvpool/page_books.h). Nothing here touches a device.
//
// A token's rows, per rank, for every layer that caches attention rows (the config's MLA layers,
// i.e. layer_types == deepseek_sparse_attention, plus the MTP layers the caller names):
//   latent:     one MLA latent row, kv_lora_rank + qk_rope_head_dim values
//               (bf16: 2 bytes a value; fp8: 1 byte a value + one float32 scale a row);
//   replicated: on layers whose indexer is "full", the indexer key, index_head_dim bf16 values,
//               pooled over index_kpool tokens (glm5_next pools 4; glm_moe_dsa does not pool).
//               "shared" indexer layers reuse a full layer's top-k and cache no keys.
// Tensor parallelism splits neither today: every rank keeps every row. The two parts are kept
// apart because the latent split divides only the latent part by the TP width;
// the pooled keys stay replicated so every rank can run the token selection.
//
// Seed 000's GLM-5.3-Flash figure, 13,056 bytes a token a rank with 12,288 of them latent, is
// 12 rows = 11 MLA layers (3, 7, ..., 43) + 1 MTP layer: 12 x 512 x 2 = 12,288 latent and
// 12 x 128 x 2 / 4 = 768 of pooled keys.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry::kvpool {

// The cache's element format for latent rows (--kv-cache). Indexer keys stay bf16 either way.
enum class CacheDtype { kBf16, kFp8 };

const char* CacheDtypeName(CacheDtype d);  // "bf16" / "fp8"
// Errors: INVALID_ARGUMENT naming the accepted spellings.
absl::StatusOr<CacheDtype> ParseCacheDtype(absl::string_view s);

// Byte formats of the rows (FlashMLA's kv_cache_format.h style: constexpr, checked below).
inline constexpr int64_t kBf16Bytes = 2;
inline constexpr int64_t kFp8Bytes = 1;
inline constexpr int64_t kF32Bytes = 4;
// An fp8 latent row carries one float32 scale after its values, as the design's FP8 cache format has it for
// FP8 rows on pages ("516 bytes a row and cache instead of 1,024" for GLM's 512-value latent).
inline constexpr int64_t kFp8RowScaleBytes = kF32Bytes;
static_assert(512 * kFp8Bytes + kFp8RowScaleBytes == 516, "an fp8 GLM latent row is 516 B");
static_assert(512 * kBf16Bytes == 1024, "a bf16 GLM latent row is 1,024 B");

// Bytes a token costs each rank. Invariants: latent >= 0, replicated >= 0.
struct BytesPerToken {
  int64_t latent = 0;      // MLA latent rows: what the latent split (step 2) would divide by W
  int64_t replicated = 0;  // pooled indexer keys: kept on every rank in every design
  int64_t total() const { return latent + replicated; }
};

}  // namespace ferry::kvpool
