#include "model/cache/paged_cache.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"

namespace ferry::model {

namespace {

// Host float32 pages: one block a growth, so a page never moves once it exists.
class HostMemory final : public PageMemory {
 public:
  int64_t elem_bytes() const override { return sizeof(float); }
  bool host() const override { return true; }
  int64_t pages() const override { return static_cast<int64_t>(pages_.size()); }

  absl::Status Grow(int64_t pages, int64_t page_bytes) override {
    if (pages <= this->pages()) return absl::OkStatus();
    return AddBlock(pages - this->pages(), page_bytes);
  }
  absl::Status Reset(int64_t pages, int64_t page_bytes) override {
    std::vector<std::unique_ptr<char[]>> blocks = std::move(blocks_);
    std::vector<char*> old = std::move(pages_);
    blocks_.clear();
    pages_.clear();
    absl::Status st = AddBlock(pages, page_bytes);
    if (!st.ok()) {
      blocks_ = std::move(blocks);
      pages_ = std::move(old);
    }
    return st;
  }
  char* Page(int32_t p) const override { return pages_[static_cast<size_t>(p)]; }
  absl::Status CopyPage(int32_t dst, int32_t src, int64_t page_bytes) override {
    std::memcpy(Page(dst), Page(src), static_cast<size_t>(page_bytes));
    return absl::OkStatus();
  }
  absl::Status Read(int32_t p, int64_t offset, void* dst, int64_t bytes) const override {
    std::memcpy(dst, Page(p) + offset, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status Write(int32_t p, int64_t offset, const void* src, int64_t bytes) override {
    std::memcpy(Page(p) + offset, src, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }

 private:
  absl::Status AddBlock(int64_t pages, int64_t page_bytes) {
    const size_t bytes = static_cast<size_t>(pages) * static_cast<size_t>(page_bytes);
    // new char[] without an initialiser leaves the block untouched (not committed yet). Values
    // are floats: the block is aligned for them, and so is every page (page_bytes is a
    // multiple of 4).
    std::unique_ptr<char[]> block(new (std::nothrow) char[std::max<size_t>(bytes, 1)]);
    if (!block) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", pages, " KV pages (",
                                                       static_cast<int64_t>(bytes), " bytes)"));
    }
    for (int64_t p = 0; p < pages; ++p) pages_.push_back(block.get() + p * page_bytes);
    blocks_.push_back(std::move(block));
    return absl::OkStatus();
  }

  std::vector<std::unique_ptr<char[]>> blocks_;
  std::vector<char*> pages_;  // page id -> its first byte
};

std::vector<PageRegion> Undivided(const std::vector<int64_t>& widths) {
  std::vector<PageRegion> out;
  for (int64_t w : widths) out.push_back(PageRegion(w));
  return out;
}

}  // namespace

std::unique_ptr<PageMemory> HostPageMemory() { return std::make_unique<HostMemory>(); }

PageArena::PageArena(std::vector<int64_t> widths, int64_t page_size, int64_t capacity,
                     std::unique_ptr<PageMemory> memory)
    : PageArena(Undivided(widths), page_size, capacity, std::move(memory)) {}

PageArena::PageArena(std::vector<PageRegion> regions, int64_t page_size, int64_t capacity,
                     std::unique_ptr<PageMemory> memory)
    : regions_(std::move(regions)),
      page_size_(page_size),
      capacity_(-1),
      books_(0),
      memory_(memory ? std::move(memory) : HostPageMemory()) {
  for (const PageRegion& r : regions_) {
    if (r.divisor < 1 || page_size_ % r.divisor != 0) {
      FERRY_LOG(ERROR) << "page arena: a region of one row per " << r.divisor << " tokens in pages of " << page_size_;
      std::abort();
    }
    offsets_.push_back(page_elems_);
    page_elems_ += r.width * (page_size_ / r.divisor);
  }
  if (capacity > 0) {
    absl::Status st = SetCapacity(capacity);
    if (!st.ok()) {
      FERRY_LOG(ERROR) << "page arena: " << st.message();
      std::abort();
    }
  }
}

absl::Status PageArena::SetCapacity(int64_t pages) {
  if (capacity_ >= 0 || books_.used_pages() > 0) {
    return absl::FailedPreconditionError(absl::StrCat("the KV arena is sized already (capacity ", capacity_, ", ",
                                                      books_.used_pages(), " pages in use); it is sized once, before "
                                                      "any page is used"));
  }
  if (pages < 1 || pages > int64_t{INT32_MAX}) {
    return absl::InvalidArgumentError(absl::StrCat("a KV arena of ", pages, " pages: need 1 to ", INT32_MAX));
  }
  FERRY_RETURN_IF_ERROR(memory_->Reset(pages, page_bytes()));
  // No page is in use, so nothing was kept; the books start over at the fixed size.
  books_ = kvpool::PageBooks(pages);
  capacity_ = pages;
  return absl::OkStatus();
}

int64_t PageArena::used_pages() const { return books_.used_pages(); }

absl::StatusOr<int32_t> PageArena::Allocate() {
  if (capacity_ < 0 && books_.free_pages() == 0) {
    const int64_t more = std::max<int64_t>(8, books_.num_pages());
    FERRY_RETURN_IF_ERROR(memory_->Grow(books_.num_pages() + more, page_bytes()));
    books_.Grow(more);
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
    if (absl::Status st = arena_->CopyPage(fresh, pages_.back()); !st.ok()) {
      arena_->Release(fresh);
      return st;
    }
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
    fork->pages_.push_back(fresh);  // released by the fork's destructor if the copy fails
    FERRY_RETURN_IF_ERROR(arena_->CopyPage(fresh, pages_[static_cast<size_t>(whole)]));
  }
  return fork;
}

}  // namespace ferry::model
