#include "model/cache/split_rows.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/blocks/mla.h"
#include "model/families/step_rows.h"

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

absl::StatusOr<SplitRows> SplitRows::ForkCarried(int64_t n, int32_t copy_page, int new_owner) const {
  if (!split() || new_owner < 0 || new_owner == owner_) {
    return absl::FailedPreconditionError(absl::StrCat("cannot carry a conversation owned by ", owner_,
                                                      borrowed_ ? " (borrowed)" : "", " to rank ", new_owner));
  }
  SplitRows copy(nullptr, nullptr, rank_);
  FERRY_ASSIGN_OR_RETURN(copy.keys_, keys_->Fork(n, copy_page));
  copy.latent_ = std::make_unique<PagedRows>(latent_->shared_arena());
  copy.owner_ = new_owner;
  copy.borrowed_ = false;
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

namespace {

// Where a walk over a stream of carried rows stands: the carries of one (from, to) pair in
// order, each carry's first `tokens` rows of every cached layer, layer by layer in token order.
// The stream is in 4-byte words: a row of layer l is words[l] of them (its values as the arena
// stores them: float32 on the host, bf16 or float32 on a device).
struct StreamCursor {
  size_t carry = 0;
  int64_t layer = 0, token = 0, offset = 0;
};

// Visits the next n words of the stream (fewer at its end) as runs within one row:
// visit(carry, layer, token, offset in the row, count).
template <typename Visit>
absl::Status WalkStream(const std::vector<const LatentCarry*>& list, const std::vector<int64_t>& words, int64_t n,
                        StreamCursor* at, Visit visit) {
  while (n > 0 && at->carry < list.size()) {
    const LatentCarry& c = *list[at->carry];
    if (at->layer >= static_cast<int64_t>(words.size())) {
      *at = StreamCursor{at->carry + 1};
      continue;
    }
    const int64_t w = words[static_cast<size_t>(at->layer)];
    if (w == 0 || at->token >= c.tokens) {
      ++at->layer;
      at->token = at->offset = 0;
      continue;
    }
    const int64_t k = std::min(n, w - at->offset);
    FERRY_RETURN_IF_ERROR(visit(c, at->layer, at->token, at->offset, k));
    n -= k;
    at->offset += k;
    if (at->offset == w) {
      at->offset = 0;
      ++at->token;
    }
  }
  return absl::OkStatus();
}

// Rows of a conversation's latent table as the host reaches them: a pointer into host pages, or
// for device pages one (page, region) block staged in host memory, loaded when first touched and
// written back (when written) before another block is touched and at Flush().
class RowStage {
 public:
  absl::StatusOr<char*> Row(const PagedRows& rows, int64_t region, int64_t t, bool write) {
    PageArena& a = rows.arena();
    const int64_t elem = a.memory().elem_bytes(), width = a.width(region), divisor = a.divisor(region);
    const int32_t page = rows.pages()[static_cast<size_t>(t / a.page_size())];
    const int64_t slot = (t % a.page_size()) / divisor;
    const int64_t begin = a.region_offset(region) * elem, row_bytes = width * elem;
    if (a.memory().host()) return a.memory().Page(page) + begin + slot * row_bytes;
    if (&a != arena_ || page != page_ || region != region_) {
      FERRY_RETURN_IF_ERROR(Flush());
      block_.resize(static_cast<size_t>(a.rows(region) * row_bytes));
      FERRY_RETURN_IF_ERROR(a.memory().Read(page, begin, block_.data(), static_cast<int64_t>(block_.size())));
      arena_ = &a;
      page_ = page;
      region_ = region;
      begin_ = begin;
    }
    dirty_ |= write;
    return block_.data() + slot * row_bytes;
  }
  absl::Status Flush() {
    if (dirty_) FERRY_RETURN_IF_ERROR(arena_->memory().Write(page_, begin_, block_.data(), static_cast<int64_t>(block_.size())));
    dirty_ = false;
    return absl::OkStatus();
  }

 private:
  PageArena* arena_ = nullptr;
  int32_t page_ = -1;
  int64_t region_ = -1, begin_ = 0;
  bool dirty_ = false;
  std::vector<char> block_;
};

}  // namespace

absl::Status CarryLatentRows(std::span<const LatentCarry> carries, const TensorParallel& tp, OwnerSplitStats* stats) {
  if (carries.empty()) return absl::OkStatus();
  const int world = tp.world, me = tp.rank;
  const size_t Wn = static_cast<size_t>(world);
  std::vector<std::vector<int64_t>> pair_words(Wn, std::vector<int64_t>(Wn, 0));
  for (const LatentCarry& c : carries) {
    if (c.from < 0 || c.from >= world || c.to < 0 || c.to >= world || c.from == c.to || c.tokens < 0) {
      return absl::InvalidArgumentError(absl::StrCat("a carry of ", c.tokens, " tokens from rank ", c.from, " to rank ",
                                                     c.to, " in a group of ", world));
    }
  }
  // Words a carry moves: its tokens' rows at every layer the latent arena caches. The arena's
  // widths and value size are the same on every rank (the same model and backend), so every
  // rank computes every size; take them from any carry's table this rank has.
  const PageArena* arena = nullptr;
  auto rows_of = [](const SequenceState* s) { return s ? s->split_rows() : nullptr; };
  for (const LatentCarry& c : carries) {
    if (const SplitRows* r = rows_of(c.src)) arena = &r->latent().arena();
    if (const SplitRows* r = rows_of(c.dst); !arena && r) arena = &r->latent().arena();
    if (arena) break;
  }
  if (arena == nullptr) return absl::InvalidArgumentError("carries without any conversation's tables on this rank");
  const int64_t layers = arena->num_regions(), elem = arena->memory().elem_bytes();
  std::vector<int64_t> words(static_cast<size_t>(layers));
  int64_t per_token = 0;
  for (int64_t l = 0; l < layers; ++l) {
    if (arena->width(l) * elem % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot carry latent rows of ", arena->width(l), " values of ",
                                                     elem, " bytes (not whole 4-byte words)"));
    }
    words[static_cast<size_t>(l)] = arena->width(l) * elem / 4;
    per_token += words[static_cast<size_t>(l)];
  }
  for (const LatentCarry& c : carries) {
    pair_words[static_cast<size_t>(c.from)][static_cast<size_t>(c.to)] += c.tokens * per_token;
    const SplitRows* src = rows_of(c.src);
    const SplitRows* dst = rows_of(c.dst);
    if (c.from == me && (src == nullptr || src->latent().reserved_tokens() < c.tokens)) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", me, " cannot carry ", c.tokens, " tokens: it holds ",
                                                     src ? src->latent().reserved_tokens() : 0, " latent rows"));
    }
    if (c.to == me && (dst == nullptr || dst->latent().reserved_tokens() < c.tokens)) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", me, " cannot take ", c.tokens,
                                                     " carried tokens: its latent table has room for ",
                                                     dst ? dst->latent().reserved_tokens() : 0));
    }
  }
  int64_t most = 0;
  for (size_t a = 0; a < Wn; ++a) {
    for (size_t b = 0; b < Wn; ++b) most = std::max(most, pair_words[a][b]);
  }
  // Each (from, to) stream is packed and unpacked one piece at a time (a carry of a long
  // conversation is gigabytes at the real widths): a cursor per peer walks its carries.
  std::vector<std::vector<const LatentCarry*>> to_peer(Wn), from_peer(Wn);
  for (const LatentCarry& c : carries) {
    if (c.from == me) to_peer[static_cast<size_t>(c.to)].push_back(&c);
    if (c.to == me) from_peer[static_cast<size_t>(c.from)].push_back(&c);
  }
  std::vector<StreamCursor> out_at(Wn), in_at(Wn);
  std::vector<std::vector<float>> out(Wn), in(Wn);
  RowStage stage;
  const int64_t piece = FetchPieceFloats();
  for (int64_t at = 0; at < most; at += piece) {
    for (size_t q = 0; q < Wn; ++q) {
      if (static_cast<int>(q) == me) continue;
      const int64_t n_out = std::clamp<int64_t>(pair_words[static_cast<size_t>(me)][q] - at, 0, piece);
      out[q].resize(static_cast<size_t>(n_out));
      size_t i = 0;
      FERRY_RETURN_IF_ERROR(WalkStream(to_peer[q], words, n_out, &out_at[q],
                                       [&](const LatentCarry& c, int64_t l, int64_t t, int64_t off,
                                           int64_t k) -> absl::Status {
                                         FERRY_ASSIGN_OR_RETURN(
                                             char* row, stage.Row(c.src->split_rows()->latent(), l, t, false));
                                         std::memcpy(out[q].data() + i, row + off * 4, static_cast<size_t>(k) * 4);
                                         i += static_cast<size_t>(k);
                                         return absl::OkStatus();
                                       }));
      in[q].resize(static_cast<size_t>(std::clamp<int64_t>(pair_words[q][static_cast<size_t>(me)] - at, 0, piece)));
    }
    // Every rank computes the same piece count from `most`: one exchange each.
    std::vector<std::span<const float>> send(out.begin(), out.end());
    std::vector<std::span<float>> recv(in.begin(), in.end());
    FERRY_RETURN_IF_ERROR(ExchangeInPieces(tp, send, recv, std::min(piece, most - at), piece, stats, nullptr));
    for (size_t q = 0; q < Wn; ++q) {
      if (static_cast<int>(q) == me) continue;
      size_t i = 0;
      FERRY_RETURN_IF_ERROR(WalkStream(from_peer[q], words, static_cast<int64_t>(in[q].size()), &in_at[q],
                                       [&](const LatentCarry& c, int64_t l, int64_t t, int64_t off,
                                           int64_t k) -> absl::Status {
                                         FERRY_ASSIGN_OR_RETURN(
                                             char* row, stage.Row(c.dst->split_rows()->latent(), l, t, true));
                                         std::memcpy(row + off * 4, in[q].data() + i, static_cast<size_t>(k) * 4);
                                         i += static_cast<size_t>(k);
                                         return absl::OkStatus();
                                       }));
    }
  }
  FERRY_RETURN_IF_ERROR(stage.Flush());
  for (const LatentCarry& c : carries) {
    if (c.to == me) stats->rows_carried += c.tokens;
  }
  return absl::OkStatus();
}

}  // namespace ferry::model
