#include "model/families/next_step.h"

namespace ferry::model {

std::vector<PageRegion> NextKeyRegions(const ModelConfig& c) {
  std::vector<PageRegion> out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const bool full = c.layer_types[static_cast<size_t>(l)] == AttentionType::kMla &&
                      c.indexer_types[static_cast<size_t>(l)] == IndexerType::kFull;
    const int64_t Di = full ? c.index_head_dim : 0;
    out.emplace_back(Di);
    out.emplace_back(Di);
    out.emplace_back(Di, full ? c.index_kpool : 1);
  }
  return out;
}

std::vector<PageRegion> NextLatentRegions(const ModelConfig& c) {
  std::vector<PageRegion> out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    out.emplace_back(c.layer_types[static_cast<size_t>(l)] == AttentionType::kMla ? c.latent_row_width() : 0);
  }
  return out;
}

absl::Status CheckNextConfig(const ModelConfig& c, const std::string& where, int64_t page_size) {
  if (!c.index_kpool_always_select_tail) {
    return absl::UnimplementedError(absl::StrCat(where, ": text_config.index_kpool_always_select_tail is false; only "
                                                 "the always-selected tail is implemented"));
  }
  if (c.qk_rope_head_dim != 0 || c.hc_mult < 1 || c.hc_mult > 8) {
    return absl::UnimplementedError(absl::StrCat(where, ": glm5_next expects NoPE MLA and 1 to 8 streams; got rope ",
                                                 c.qk_rope_head_dim, ", hc_mult ", c.hc_mult));
  }
  if (c.index_kpool < 1 || page_size % c.index_kpool != 0) {
    return absl::InvalidArgumentError(absl::StrCat("index_kpool ", c.index_kpool, " does not divide the page size ",
                                                   page_size, " (a pool's tokens share a page)"));
  }
  return absl::OkStatus();
}

}  // namespace ferry::model
