#include "model/split_rows.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/step_rows.h"

namespace ferry::model {

int64_t SplitRows::bytes() const {
  return static_cast<int64_t>(keys_->pages().size()) * keys_->arena().page_bytes() +
         static_cast<int64_t>(latent_->pages().size()) * latent_->arena().page_bytes();
}

absl::Status SplitRows::SetOwner(int owner, bool borrowed, int64_t length) {
  if (owner == owner_ && borrowed == borrowed_) return absl::OkStatus();
  if (length == 0 && keys_->pages().empty() && latent_->pages().empty()) {
    owner_ = owner;
    borrowed_ = owner >= 0 && borrowed;
    return absl::OkStatus();
  }
  if (owner_ >= 0 && owner == owner_ && borrowed_ && !borrowed) {
    // The fill is over: the borrowers give their copies back.
    borrowed_ = false;
    if (owner_ != rank_) FERRY_RETURN_IF_ERROR(latent_->Truncate(0));
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat("cannot move a conversation of ", length, " tokens from owner ",
                                                    owner_, borrowed_ ? " (borrowed)" : "", " to owner ", owner,
                                                    borrowed ? " (borrowed)" : ""));
}

absl::Status SplitRows::Adopt(std::span<const int32_t> pages) {
  if (owner_ >= 0) return keys_->Adopt(pages);
  // The replicated layout: one page id for both parts.
  FERRY_RETURN_IF_ERROR(latent_->Adopt(pages));
  absl::Status st = keys_->Adopt(pages);
  if (!st.ok()) {
    // Give back what the latent table just took.
    (void)latent_->Truncate((static_cast<int64_t>(latent_->pages().size()) - static_cast<int64_t>(pages.size())) *
                            latent_->arena().page_size());
  }
  return st;
}

absl::Status SplitRows::AdoptLatent(std::span<const int32_t> pages) {
  if (owner_ < 0 || !holds_latent()) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, " does not hold this conversation's latent rows (owner ",
                                                      owner_, borrowed_ ? ", borrowed" : "", "): ", pages.size(),
                                                      " latent pages refused"));
  }
  return latent_->Adopt(pages);
}

absl::Status SplitRows::Truncate(int64_t n) {
  FERRY_RETURN_IF_ERROR(keys_->Truncate(n));
  if (holds_latent()) FERRY_RETURN_IF_ERROR(latent_->Truncate(n));
  return absl::OkStatus();
}

absl::StatusOr<SplitRows> SplitRows::Fork(int64_t n, int32_t copy_page, int32_t latent_copy_page) const {
  SplitRows copy(nullptr, nullptr, rank_);
  FERRY_ASSIGN_OR_RETURN(copy.keys_, keys_->Fork(n, copy_page));
  if (holds_latent()) {
    FERRY_ASSIGN_OR_RETURN(copy.latent_, latent_->Fork(n, latent_copy_page));
  } else {
    copy.latent_ = std::make_unique<PagedRows>(latent_->shared_arena());
  }
  copy.owner_ = owner_;
  copy.borrowed_ = borrowed_;
  return copy;
}

void SplitRows::AppendTables(std::vector<PagedRows*>* tables) {
  tables->push_back(keys_.get());
  if (holds_latent()) tables->push_back(latent_.get());
}

absl::Status ReserveSplitRows(std::span<SplitRows* const> rows, std::span<const int64_t> lengths,
                              std::span<const int64_t> adds, std::span<const int64_t> seg_of, int world,
                              RowOwners* owners) {
  std::vector<PagedRows*> tables;
  std::vector<int64_t> from, more;
  for (size_t s = 0; s < rows.size(); ++s) {
    rows[s]->AppendTables(&tables);
    from.resize(tables.size(), lengths[s]);
    more.resize(tables.size(), adds[s]);
  }
  FERRY_RETURN_IF_ERROR(ReserveRows(tables, from, more));
  owners->owner.assign(seg_of.size(), -1);
  owners->held.assign(seg_of.size(), 1);
  owners->fetch.assign(seg_of.size(), 0);
  owners->group.assign(seg_of.begin(), seg_of.end());
  owners->split = false;
  for (size_t r = 0; r < seg_of.size(); ++r) {
    const size_t s = static_cast<size_t>(seg_of[r]);
    const SplitRows& sr = *rows[s];
    owners->owner[r] = sr.split() && world > 1 ? sr.owner() : -1;
    owners->held[r] = sr.holds_latent();
    owners->fetch[r] = owners->owner[r] >= 0 && adds[s] >= 2;
    owners->split |= owners->owner[r] >= 0;
  }
  return absl::OkStatus();
}

}  // namespace ferry::model
