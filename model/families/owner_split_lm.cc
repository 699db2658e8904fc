#include "model/families/owner_split_lm.h"

#include "common/status.h"

namespace ferry::model {

absl::Status OwnerSplitLM::SizeArenas(int64_t pages, int64_t latent_pages) {
  FERRY_RETURN_IF_ERROR(keys_arena_->SetCapacity(pages));
  return latent_arena_->SetCapacity(latent_pages);
}

absl::Status OwnerSplitLM::CarryLatent(std::span<const LatentCarry> carries) {
  return CarryLatentRows(carries, tp_, &split_stats_);
}

std::unique_ptr<SequenceState> OwnerSplitLM::NewConversation(int64_t fixed_bytes,
                                                             std::shared_ptr<StateMemory> memory) const {
  return std::make_unique<Conversation>(SplitRows(keys_arena_, latent_arena_, tp_.rank), fixed_bytes, std::move(memory));
}

}  // namespace ferry::model
