#include "model/paged_cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"

namespace ferry::model {

PageArena::PageArena(std::vector<int64_t> widths, int64_t page_size, int64_t capacity)
    : widths_(std::move(widths)), page_size_(page_size), capacity_(capacity), books_(0) {
  int64_t per_token = 0;
  for (int64_t w : widths_) {
    offsets_.push_back(per_token);
    per_token += w;
  }
  page_floats_ = per_token * page_size_;
  if (capacity_ > 0) {
    const int64_t n = capacity_;
    capacity_ = -1;
    absl::Status st = SetCapacity(n);
    if (!st.ok()) {
      FERRY_LOG(ERROR) << "page arena: " << st.message();
      std::abort();
    }
  }
}

absl::Status PageArena::AddBlock(int64_t pages) {
  const size_t floats = static_cast<size_t>(pages) * static_cast<size_t>(page_floats_);
  // new float[] without an initialiser leaves the block untouched (not committed yet).
  std::unique_ptr<float[]> block(new (std::nothrow) float[std::max<size_t>(floats, 1)]);
  if (!block) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", pages, " KV pages (",
                                                     static_cast<int64_t>(floats * sizeof(float)), " bytes)"));
  }
  for (int64_t p = 0; p < pages; ++p) pages_.push_back(block.get() + p * page_floats_);
  blocks_.push_back(std::move(block));
  books_.Grow(pages);
  return absl::OkStatus();
}

absl::Status PageArena::SetCapacity(int64_t pages) {
  if (capacity_ >= 0 || books_.num_pages() > 0) {
    return absl::FailedPreconditionError(absl::StrCat("the KV arena is sized already (", books_.num_pages(),
                                                      " pages); it is sized once, before any page is used"));
  }
  if (pages < 1 || pages > int64_t{INT32_MAX}) {
    return absl::InvalidArgumentError(absl::StrCat("a KV arena of ", pages, " pages: need 1 to ", INT32_MAX));
  }
  FERRY_RETURN_IF_ERROR(AddBlock(pages));
  capacity_ = pages;
  return absl::OkStatus();
}

int64_t PageArena::used_pages() const { return books_.used_pages(); }

absl::StatusOr<int32_t> PageArena::Allocate() {
  if (capacity_ < 0 && books_.free_pages() == 0) {
    // Growing adds pages; pointers into earlier pages stay valid (each page is its own block).
    FERRY_RETURN_IF_ERROR(AddBlock(std::max<int64_t>(8, books_.num_pages())));
  }
  FERRY_ASSIGN_OR_RETURN(std::vector<int32_t> one, books_.Allocate(1));
  return one[0];
}

absl::Status PageArena::Take(std::span<const int32_t> pages) {
  absl::Status st = books_.Take(pages);
  if (!st.ok()) return absl::InvalidArgumentError(st.message());
  return absl::OkStatus();
}

void PageArena::AddRef(int32_t page) { (void)books_.AddRef(std::span<const int32_t>(&page, 1)); }
void PageArena::Release(int32_t page) { (void)books_.Release(std::span<const int32_t>(&page, 1)); }
int32_t PageArena::refcount(int32_t page) const { return books_.refcount(page); }

PagedRows::~PagedRows() {
  for (int32_t p : pages_) arena_->Release(p);
}

absl::Status PagedRows::Reserve(int64_t n) {
  const int64_t need = kvpool::PagesFor(n, arena_->page_size());
  std::vector<int32_t> added;
  while (static_cast<int64_t>(pages_.size() + added.size()) < need) {
    absl::StatusOr<int32_t> p = arena_->Allocate();
    if (!p.ok()) {
      for (int32_t q : added) arena_->Release(q);
      return absl::ResourceExhaustedError(absl::StrCat("cannot hold ", n, " tokens: ", p.status().message()));
    }
    added.push_back(*p);
  }
  pages_.insert(pages_.end(), added.begin(), added.end());
  return absl::OkStatus();
}

absl::Status PagedRows::Adopt(std::span<const int32_t> pages) {
  FERRY_RETURN_IF_ERROR(arena_->Take(pages));
  pages_.insert(pages_.end(), pages.begin(), pages.end());
  return absl::OkStatus();
}

absl::Status PagedRows::Truncate(int64_t n) {
  const int64_t P = arena_->page_size();
  const int64_t keep = kvpool::PagesFor(n, P);
  while (static_cast<int64_t>(pages_.size()) > keep) {
    arena_->Release(pages_.back());
    pages_.pop_back();
  }
  // A kept page that n cuts, shared with another holder, becomes this table's own copy.
  if (n % P != 0 && keep > 0 && arena_->refcount(pages_.back()) > 1) {
    FERRY_ASSIGN_OR_RETURN(int32_t fresh, arena_->Allocate());
    std::memcpy(arena_->Row(fresh, 0, 0), arena_->Row(pages_.back(), 0, 0),
                static_cast<size_t>(arena_->page_floats()) * sizeof(float));
    arena_->Release(pages_.back());
    pages_.back() = fresh;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PagedRows>> PagedRows::Fork(int64_t n, int32_t copy_page) const {
  const int64_t P = arena_->page_size();
  auto fork = std::make_unique<PagedRows>(arena_);
  const int64_t whole = n / P;
  for (int64_t i = 0; i < whole; ++i) {
    arena_->AddRef(pages_[static_cast<size_t>(i)]);
    fork->pages_.push_back(pages_[static_cast<size_t>(i)]);
  }
  if (n % P != 0) {
    int32_t fresh = copy_page;
    if (fresh < 0) {
      FERRY_ASSIGN_OR_RETURN(fresh, arena_->Allocate());
    } else {
      FERRY_RETURN_IF_ERROR(arena_->Take(std::span<const int32_t>(&fresh, 1)));
    }
    std::memcpy(arena_->Row(fresh, 0, 0), arena_->Row(pages_[static_cast<size_t>(whole)], 0, 0),
                static_cast<size_t>(arena_->page_floats()) * sizeof(float));
    fork->pages_.push_back(fresh);
  }
  return fork;
}

}  // namespace ferry::model
