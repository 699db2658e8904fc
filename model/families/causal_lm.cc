#include "model/families/causal_lm.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "model/checkpoint/checkpoint.h"
#include "model/families/glm5_next.h"
#include "model/families/glm_moe_dsa.h"

namespace ferry::model {

absl::Status ValidateSegments(std::span<const ForwardSegment> segments, int64_t vocab) {
  std::set<const SequenceState*> seen;
  for (size_t s = 0; s < segments.size(); ++s) {
    const ForwardSegment& seg = segments[s];
    if (seg.state == nullptr) return absl::InvalidArgumentError(absl::StrCat("segment ", s, ": no state"));
    if (seg.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("segment ", s, ": no tokens"));
    }
    if (!seen.insert(seg.state).second) {
      return absl::InvalidArgumentError(absl::StrCat("segment ", s, ": its state is already in this step"));
    }
    for (size_t i = 0; i < seg.tokens.size(); ++i) {
      if (seg.tokens[i] < 0 || seg.tokens[i] >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("segment ", s, ": token ", i, " is ", seg.tokens[i],
                                                       ", outside the vocabulary [0, ", vocab, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status SequenceState::SetLatentOwner(int owner, bool) {
  if (owner < 0) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat("this family keeps its latent rows on every rank (owner ", owner,
                                               " asked)"));
}

absl::StatusOr<std::unique_ptr<SequenceState>> SequenceState::ForkSplitAt(int64_t length, int32_t copy_page,
                                                                          int32_t) const {
  if (latent_owner() < 0) return ForkAt(length, copy_page);
  return absl::UnimplementedError("this family has no latent split to fork");
}

absl::StatusOr<std::unique_ptr<SequenceState>> SequenceState::ForkCarriedAt(int64_t, int32_t, int new_owner) const {
  return absl::UnimplementedError(absl::StrCat("this family has no latent split to carry (to rank ", new_owner, ")"));
}

absl::Status SequenceState::AdoptLatentPages(std::span<const int32_t> pages) {
  return absl::UnimplementedError(absl::StrCat("this family has no latent pages of their own (", pages.size(),
                                               " offered)"));
}

absl::Status ValidateCacheOptions(const CacheOptions& o) {
  if (o.page_size < 16 || o.page_size > 1024 || (o.page_size & (o.page_size - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("page size ", o.page_size,
                                                   " is not a power of two from 16 to 1024"));
  }
  if (o.capacity_pages == 0 || o.capacity_pages < -1) {
    return absl::InvalidArgumentError(absl::StrCat("an arena of ", o.capacity_pages, " pages holds nothing"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CausalLM>> LoadCausalLM(const std::string& dir, const TensorParallel& tp,
                                                       const CacheOptions& cache, Nvfp4Numerics nvfp4) {
  FERRY_RETURN_IF_ERROR(ValidateCacheOptions(cache));
  FERRY_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(dir));
  FERRY_ASSIGN_OR_RETURN(ModelConfig cfg, ParseModelConfig(ck.config_json(), ck.config_path()));
  std::unique_ptr<CausalLM> model;
  switch (cfg.family) {
    case Family::kGlmMoeDsa: {
      FERRY_ASSIGN_OR_RETURN(model, GlmMoeDsa::Load(ck, cfg, tp, cache, nvfp4));
      break;
    }
    case Family::kGlm5Next: {
      FERRY_ASSIGN_OR_RETURN(model, Glm5Next::Load(ck, cfg, tp, cache, nvfp4));
      break;
    }
  }
  model->set_weight_bytes(ck.loaded_bytes());
  if (nvfp4 == Nvfp4Numerics::kW4A4 && !ck.nvfp4()) {
    FERRY_LOG(WARNING) << dir << " stores no NVFP4 weights: --nvfp4-numerics w4a4 changes nothing";
  }
  FERRY_LOG(INFO) << "loaded " << FamilyName(cfg.family) << " from " << dir << ": " << cfg.num_layers
                  << " layers, hidden " << cfg.hidden_size << ", vocab " << cfg.vocab_size
                  << (tp.world > 1 ? absl::StrCat(", tensor-parallel rank ", tp.rank, " of ", tp.world) : "");
  return model;
}

}  // namespace ferry::model
