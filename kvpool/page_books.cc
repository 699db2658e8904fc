#include "kvpool/page_books.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace ferry::kvpool {

PageBooks::PageBooks(int64_t num_pages) : refs_(static_cast<size_t>(num_pages), 0) {
  for (int64_t p = 0; p < num_pages; ++p) free_.insert(free_.end(), static_cast<int32_t>(p));
}

void PageBooks::Grow(int64_t more) {
  const int64_t first = num_pages();
  refs_.resize(static_cast<size_t>(first + more), 0);
  for (int64_t p = first; p < first + more; ++p) free_.insert(free_.end(), static_cast<int32_t>(p));
}

absl::StatusOr<std::vector<int32_t>> PageBooks::Allocate(int64_t n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("cannot allocate ", n, " pages"));
  if (n > free_pages()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("need ", n, " pages, ", free_pages(), " of ", num_pages(), " are free"));
  }
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t p = *free_.begin();
    free_.erase(free_.begin());
    refs_[static_cast<size_t>(p)] = 1;
    out.push_back(p);
  }
  return out;
}

absl::Status PageBooks::CheckUsed(std::span<const int32_t> pages, const char* what) const {
  std::map<int32_t, int32_t> drops;
  for (int32_t p : pages) {
    if (p < 0 || p >= num_pages()) {
      return absl::FailedPreconditionError(absl::StrCat(what, " page ", p, ": outside [0, ", num_pages(), ")"));
    }
    if (refs_[static_cast<size_t>(p)] == 0) {
      return absl::FailedPreconditionError(absl::StrCat(what, " page ", p, ": it is free"));
    }
    if (++drops[p] > refs_[static_cast<size_t>(p)] && what[0] == 'r') {
      return absl::FailedPreconditionError(absl::StrCat("release page ", p, ": released ", drops[p],
                                                        " times but it has ", refs_[static_cast<size_t>(p)],
                                                        " holders"));
    }
  }
  return absl::OkStatus();
}

absl::Status PageBooks::Take(std::span<const int32_t> pages) {
  std::set<int32_t> seen;
  for (int32_t p : pages) {
    if (p < 0 || p >= num_pages() || refs_[static_cast<size_t>(p)] != 0 || !seen.insert(p).second) {
      return absl::FailedPreconditionError(absl::StrCat("take page ", p, ": not a free page of ", num_pages(), " (",
                                                        free_pages(), " free)"));
    }
  }
  for (int32_t p : pages) {
    free_.erase(p);
    refs_[static_cast<size_t>(p)] = 1;
  }
  return absl::OkStatus();
}

absl::Status PageBooks::AddRef(std::span<const int32_t> pages) {
  if (absl::Status st = CheckUsed(pages, "add a holder to"); !st.ok()) return st;
  for (int32_t p : pages) ++refs_[static_cast<size_t>(p)];
  return absl::OkStatus();
}

absl::Status PageBooks::Release(std::span<const int32_t> pages) {
  if (absl::Status st = CheckUsed(pages, "release"); !st.ok()) return st;
  for (int32_t p : pages) {
    if (--refs_[static_cast<size_t>(p)] == 0) free_.insert(p);
  }
  return absl::OkStatus();
}

absl::Status PageBooks::CheckInvariants() const {
  int64_t zero = 0;
  for (size_t p = 0; p < refs_.size(); ++p) {
    const bool is_free = free_.count(static_cast<int32_t>(p)) > 0;
    if (refs_[p] < 0) return absl::InternalError(absl::StrCat("page ", p, " has ", refs_[p], " holders"));
    if ((refs_[p] == 0) != is_free) {
      return absl::InternalError(absl::StrCat("page ", p, " has ", refs_[p], " holders but is ",
                                              is_free ? "" : "not ", "in the free list"));
    }
    zero += refs_[p] == 0;
  }
  if (zero != free_pages()) return absl::InternalError("free list and refcounts disagree");
  return absl::OkStatus();
}

}  // namespace ferry::kvpool
