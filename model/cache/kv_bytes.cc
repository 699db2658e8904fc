#include "model/cache/kv_bytes.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ferry::model {

absl::StatusOr<kvpool::BytesPerToken> BytesPerTokenPerRank(const ModelConfig& config, kvpool::CacheDtype dtype,
                                                           int64_t mtp_layers) {
  if (mtp_layers < 0 || mtp_layers > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mtp-layers is ", mtp_layers, "; use 0 to 16 (GLM-5.x checkpoints ship 1)"));
  }
  int64_t mla_layers = mtp_layers;
  int64_t full_indexer_layers = mtp_layers;  // an MTP layer runs its own (full) indexer
  for (size_t i = 0; i < config.layer_types.size(); ++i) {
    if (config.layer_types[i] != AttentionType::kMla) continue;
    ++mla_layers;
    // A missing indexer list means every layer is full (as the config parser fills it in).
    if (i >= config.indexer_types.size() || config.indexer_types[i] == IndexerType::kFull) {
      ++full_indexer_layers;
    }
  }
  if (mla_layers == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", FamilyName(config.family),
                     " config has no MLA layer and --mtp-layers is 0: a token caches no row"));
  }
  const int64_t row_values = config.latent_row_width();
  const int64_t latent_row = dtype == kvpool::CacheDtype::kBf16
                                 ? row_values * kvpool::kBf16Bytes
                                 : row_values * kvpool::kFp8Bytes + kvpool::kFp8RowScaleBytes;
  const int64_t kpool = config.index_kpool < 1 ? 1 : config.index_kpool;
  const int64_t key_bytes = config.index_head_dim * kvpool::kBf16Bytes;
  if (key_bytes % kpool != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("an indexer key of ", key_bytes, " bytes (index_head_dim ", config.index_head_dim,
                     " x 2) pooled over index_kpool ", kpool,
                     " tokens is not a whole number of bytes a token"));
  }
  kvpool::BytesPerToken b;
  b.latent = mla_layers * latent_row;
  b.replicated = full_indexer_layers * (key_bytes / kpool);
  return b;
}

absl::StatusOr<int64_t> FixedBytesPerStreamPerRank(const ModelConfig& config, int64_t ranks) {
  if (ranks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--ranks is ", ranks, "; use 1 or more"));
  }
  int64_t kda_layers = 0;
  for (AttentionType t : config.layer_types) {
    if (t == AttentionType::kKda) ++kda_layers;
  }
  // Heads are split across ranks; with an uneven split the rank holding the extra head decides.
  const int64_t heads = (config.linear_num_heads + ranks - 1) / ranks;
  const int64_t d = config.linear_head_dim;
  const int64_t state = heads * d * d * kvpool::kF32Bytes;
  const int64_t conv_taps = config.linear_conv_kernel_dim > 1 ? config.linear_conv_kernel_dim - 1 : 0;
  const int64_t conv_tails = conv_taps * 3 * heads * d * kvpool::kF32Bytes;
  return kda_layers * (state + conv_tails);
}

}  // namespace ferry::model
