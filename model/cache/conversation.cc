#include "model/cache/conversation.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"

namespace ferry::model {

namespace {

class HostMemory final : public StateMemory {
 public:
  absl::StatusOr<std::shared_ptr<void>> Zeroed(int64_t bytes) override {
    void* p = std::calloc(static_cast<size_t>(std::max<int64_t>(bytes, 1)), 1);
    if (p == nullptr) return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes of state"));
    return std::shared_ptr<void>(p, std::free);
  }
  absl::StatusOr<std::shared_ptr<void>> Copy(const void* src, int64_t bytes) override {
    FERRY_ASSIGN_OR_RETURN(std::shared_ptr<void> p, Zeroed(bytes));
    std::memcpy(p.get(), src, static_cast<size_t>(bytes));
    return p;
  }
  absl::Status CopyInto(void* dst, const void* src, int64_t bytes) override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
};

}  // namespace

std::shared_ptr<StateMemory> HostStateMemory() {
  static const std::shared_ptr<StateMemory> host = std::make_shared<HostMemory>();
  return host;
}

Conversation::Conversation(SplitRows rows, int64_t fixed_bytes, std::shared_ptr<StateMemory> memory)
    : rows_(std::move(rows)), fixed_bytes_(fixed_bytes), memory_(std::move(memory)) {
  if (fixed_bytes_ == 0) return;
  absl::StatusOr<std::shared_ptr<void>> block = memory_->Zeroed(fixed_bytes_);
  if (block.ok()) {
    state_ = std::move(*block);
  } else {
    FERRY_LOG(ERROR) << "no memory for a conversation's fixed state: " << block.status().message();
  }
}

int64_t Conversation::bytes() const {
  return rows_.bytes() + (state_ ? fixed_bytes_ : 0) * (1 + static_cast<int64_t>(snapshots_.size()));
}

void Conversation::KeepSnapshot() {
  if (fixed_bytes_ == 0 || state_ == nullptr) return;
  absl::StatusOr<std::shared_ptr<void>> copy = memory_->Copy(state_.get(), fixed_bytes_);
  if (!copy.ok()) {
    FERRY_LOG(WARNING) << "no snapshot of the fixed state at position " << length_ << ": " << copy.status().message();
    return;
  }
  snapshots_[length_] = std::move(*copy);
}

std::vector<int64_t> Conversation::SnapshotPositions() const {
  std::vector<int64_t> out;
  for (const auto& [pos, snap] : snapshots_) out.push_back(pos);
  return out;
}

absl::Status Conversation::RewindTo(int64_t position) {
  if (position < 0 || position > length_) {
    return absl::OutOfRangeError(absl::StrCat("cannot rewind to position ", position, ": the sequence holds ",
                                              length_, " tokens"));
  }
  if (position == length_) return absl::OkStatus();
  if (fixed_bytes_ == 0) {
    FERRY_RETURN_IF_ERROR(rows_.Truncate(position));
    length_ = position;
    return absl::OkStatus();
  }
  auto it = snapshots_.find(position);
  if (it == snapshots_.end() || state_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot rewind to position ", position, ": the KDA recurrent state cannot be rewound and has "
        "snapshots only at [", absl::StrJoin(SnapshotPositions(), ", "), "]"));
  }
  FERRY_RETURN_IF_ERROR(rows_.Truncate(position));
  FERRY_RETURN_IF_ERROR(memory_->CopyInto(state_.get(), it->second.get(), fixed_bytes_));
  snapshots_.erase(std::next(it), snapshots_.end());
  // Pooled rows of pools that are no longer complete are stale; they are rewritten when their
  // pools complete again, and nothing reads them before.
  length_ = position;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SequenceState>> Conversation::ForkWith(
    int64_t length, const std::function<absl::StatusOr<SplitRows>()>& fork_rows) const {
  if (length < 0 || length > length_) {
    return absl::OutOfRangeError(absl::StrCat("cannot fork at ", length, ": the sequence holds ", length_, " tokens"));
  }
  std::shared_ptr<void> state;
  if (fixed_bytes_ > 0) {
    const void* from = state_.get();
    if (length != length_) {
      auto it = snapshots_.find(length);
      if (it == snapshots_.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot fork at ", length, ": the KDA recurrent state exists only at ", length_, " and at the snapshots [",
            absl::StrJoin(SnapshotPositions(), ", "), "]"));
      }
      from = it->second.get();
    }
    if (from == nullptr) {
      return absl::ResourceExhaustedError("cannot fork a conversation whose fixed state could not be allocated");
    }
    FERRY_ASSIGN_OR_RETURN(state, memory_->Copy(from, fixed_bytes_));
  }
  FERRY_ASSIGN_OR_RETURN(SplitRows rows, fork_rows());
  std::unique_ptr<Conversation> copy(new Conversation(std::move(rows), length, fixed_bytes_, memory_, std::move(state)));
  for (const auto& [pos, snap] : snapshots_) {
    if (pos > length) continue;
    FERRY_ASSIGN_OR_RETURN(copy->snapshots_[pos], memory_->Copy(snap.get(), fixed_bytes_));
  }
  return std::unique_ptr<SequenceState>(std::move(copy));
}

absl::StatusOr<std::unique_ptr<SequenceState>> Conversation::ForkAt(int64_t length, int32_t copy_page) const {
  return ForkSplitAt(length, copy_page, copy_page);
}

absl::StatusOr<std::unique_ptr<SequenceState>> Conversation::ForkSplitAt(int64_t length, int32_t copy_page,
                                                                         int32_t latent_copy_page) const {
  return ForkWith(length, [&] { return rows_.Fork(length, copy_page, latent_copy_page); });
}

absl::StatusOr<std::unique_ptr<SequenceState>> Conversation::ForkCarriedAt(int64_t length, int32_t copy_page,
                                                                           int new_owner) const {
  return ForkWith(length, [&] { return rows_.ForkCarried(length, copy_page, new_owner); });
}

absl::StatusOr<std::vector<Conversation*>> ConversationsOf(std::span<const ForwardSegment> segments,
                                                           const PageArena& keys, const char* family) {
  std::vector<Conversation*> out;
  for (size_t s = 0; s < segments.size(); ++s) {
    auto* c = dynamic_cast<Conversation*>(segments[s].state);
    if (c == nullptr || &c->rows().keys().arena() != &keys) {
      return absl::InvalidArgumentError(absl::StrCat("segment ", s, ": state is not a ", family,
                                                     " sequence of this model"));
    }
    out.push_back(c);
  }
  return out;
}

absl::Status ReserveConversations(std::span<const ForwardSegment> segments, std::span<Conversation* const> seqs,
                                  std::span<const int64_t> lengths, const StepRows& rows, int world,
                                  RowOwners* owners) {
  std::vector<SplitRows*> tables;
  std::vector<int64_t> adds;
  for (size_t s = 0; s < seqs.size(); ++s) {
    tables.push_back(&seqs[s]->rows());
    adds.push_back(static_cast<int64_t>(segments[s].tokens.size()));
  }
  return ReserveSplitRows(tables, lengths, adds, rows.seg_of, world, owners);
}

int64_t TableWidth(std::span<Conversation* const> seqs) {
  int64_t w = 0;
  for (const Conversation* s : seqs) {
    w = std::max<int64_t>(w, static_cast<int64_t>(s->rows().keys().pages().size()));
    w = std::max<int64_t>(w, static_cast<int64_t>(s->rows().latent().pages().size()));
  }
  return w;
}

void RowTables(std::span<Conversation* const> seqs, const StepRows& rows, int64_t width, std::vector<int32_t>* keys,
               std::vector<int32_t>* latent) {
  const int64_t R = rows.count();
  keys->assign(static_cast<size_t>(R * width), -1);
  latent->assign(static_cast<size_t>(R * width), -1);
  for (int64_t r = 0; r < R; ++r) {
    const SplitRows& t = seqs[static_cast<size_t>(rows.seg_of[r])]->rows();
    std::copy(t.keys().pages().begin(), t.keys().pages().end(), keys->begin() + r * width);
    std::copy(t.latent().pages().begin(), t.latent().pages().end(), latent->begin() + r * width);
  }
}

}  // namespace ferry::model
