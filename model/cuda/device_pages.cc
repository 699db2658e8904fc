#include "model/cuda/device_pages.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kvpool/page_books.h"

namespace ferry::model::cuda {

namespace cu = ferry::kernels::cuda;

DevicePages::DevicePages(std::vector<int64_t> widths, const CacheOptions& cache, Precision precision)
    : widths_(std::move(widths)), elem_(ElemBytes(precision)), books_(std::vector<int64_t>{}, cache.page_size, cache.capacity_pages) {
  int64_t at = 0;
  for (int64_t w : widths_) {
    offsets_.push_back(at);
    at += w * cache.page_size;
  }
  page_elems_ = at;
}

absl::StatusOr<std::shared_ptr<DevicePages>> DevicePages::Create(std::vector<int64_t> widths,
                                                                 const CacheOptions& cache, Precision precision) {
  FERRY_RETURN_IF_ERROR(ValidateCacheOptions(cache));
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] < 8 || widths[i] % 8 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV region ", i, " is ", widths[i], " values wide; the CUDA pages need a positive multiple of 8"));
    }
  }
  std::shared_ptr<DevicePages> p(new DevicePages(std::move(widths), cache, precision));
  if (cache.capacity_pages > 0) FERRY_RETURN_IF_ERROR(p->EnsureStorage(cache.capacity_pages));
  return p;
}

absl::Status DevicePages::EnsureStorage(int64_t pages) {
  if (pages <= device_pages_) return absl::OkStatus();
  const int64_t grown = books_.capacity() > 0 ? std::max(pages, books_.capacity())
                                              : std::max<int64_t>({pages, 2 * device_pages_, 8});
  absl::StatusOr<DeviceBuffer> block = DeviceBuffer::Alloc(static_cast<size_t>(grown * page_bytes()));
  if (!block.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot hold ", grown, " KV pages of ", page_bytes(),
                                                     " bytes on the device: ", block.status().message()));
  }
  if (device_pages_ > 0) {
    FERRY_RETURN_IF_ERROR(
        cu::CopyDeviceToDevice(block->get(), block_.get(), static_cast<size_t>(device_pages_ * page_bytes())));
  }
  block_ = std::move(*block);
  device_pages_ = grown;
  return absl::OkStatus();
}

absl::Status DevicePages::SetCapacity(int64_t pages) {
  if (books_.capacity() >= 0 || books_.used_pages() > 0) {
    return absl::FailedPreconditionError(absl::StrCat("the device KV arena is sized already (capacity ", books_.capacity(),
                                                      ", ", books_.used_pages(), " pages in use); it is sized once, "
                                                      "before any page is used"));
  }
  if (pages < 1 || pages > int64_t{INT32_MAX}) {
    return absl::InvalidArgumentError(absl::StrCat("a device KV arena of ", pages, " pages: need 1 to ", INT32_MAX));
  }
  absl::StatusOr<DeviceBuffer> block = DeviceBuffer::Alloc(static_cast<size_t>(pages * page_bytes()));
  if (!block.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot hold ", pages, " KV pages of ", page_bytes(),
                                                     " bytes on the device: ", block.status().message()));
  }
  // No page is in use, so nothing needs copying; the books start over at the fixed size.
  block_ = std::move(*block);
  device_pages_ = pages;
  books_ = PageArena(std::vector<int64_t>{}, books_.page_size(), pages);
  return absl::OkStatus();
}

absl::StatusOr<int32_t> DevicePages::Allocate() {
  FERRY_ASSIGN_OR_RETURN(int32_t page, books_.Allocate());
  absl::Status st = EnsureStorage(int64_t{page} + 1);
  if (!st.ok()) {
    books_.Release(page);
    return st;
  }
  return page;
}

absl::Status DevicePages::Take(std::span<const int32_t> pages) {
  int64_t top = 0;
  for (int32_t p : pages) top = std::max<int64_t>(top, int64_t{p} + 1);
  FERRY_RETURN_IF_ERROR(books_.Take(pages));
  absl::Status st = EnsureStorage(top);
  if (!st.ok()) {
    for (int32_t p : pages) books_.Release(p);
  }
  return st;
}

absl::Status DevicePages::CopyPage(int32_t dst, int32_t src) {
  char* base = block_.as<char>();
  return cu::CopyDeviceToDevice(base + int64_t{dst} * page_bytes(), base + int64_t{src} * page_bytes(),
                                static_cast<size_t>(page_bytes()));
}

cu::PagedCacheBf16 DevicePages::View(int region, const int32_t* table, int64_t table_stride) const {
  cu::PagedCacheBf16 v;
  v.arena = block_.as<const uint16_t>() + region_offset(region);
  v.n_pages = device_pages_;
  v.page_rows = page_size();
  v.page_stride = page_elems_;
  v.width = width(region);
  v.page_table = table;
  v.table_stride = table_stride;
  return v;
}

cu::PagedCacheF32 DevicePages::ViewF32(int region, const int32_t* table, int64_t table_stride) const {
  const cu::PagedCacheBf16 b = View(region, nullptr, table_stride);
  return cu::PagedCacheF32{block_.as<const float>() + region_offset(region), b.n_pages, b.page_rows, b.page_stride,
                           b.width, table, table_stride};
}

DevicePageTable::~DevicePageTable() {
  for (int32_t p : ids_) pages_->Release(p);
}

absl::Status DevicePageTable::Reserve(int64_t n) {
  const int64_t need = kvpool::PagesFor(n, pages_->page_size());
  std::vector<int32_t> added;
  while (static_cast<int64_t>(ids_.size() + added.size()) < need) {
    absl::StatusOr<int32_t> p = pages_->Allocate();
    if (!p.ok()) {
      for (int32_t q : added) pages_->Release(q);
      return absl::ResourceExhaustedError(absl::StrCat("cannot hold ", n, " tokens: ", p.status().message()));
    }
    added.push_back(*p);
  }
  ids_.insert(ids_.end(), added.begin(), added.end());
  return absl::OkStatus();
}

absl::Status DevicePageTable::Adopt(std::span<const int32_t> pages) {
  FERRY_RETURN_IF_ERROR(pages_->Take(pages));
  ids_.insert(ids_.end(), pages.begin(), pages.end());
  return absl::OkStatus();
}

absl::Status DevicePageTable::Truncate(int64_t n) {
  const int64_t P = pages_->page_size();
  const int64_t keep = kvpool::PagesFor(n, P);
  while (static_cast<int64_t>(ids_.size()) > keep) {
    pages_->Release(ids_.back());
    ids_.pop_back();
  }
  // A kept page that n cuts, shared with another holder, becomes this table's own copy.
  if (n % P != 0 && keep > 0 && pages_->refcount(ids_.back()) > 1) {
    FERRY_ASSIGN_OR_RETURN(int32_t fresh, pages_->Allocate());
    absl::Status st = pages_->CopyPage(fresh, ids_.back());
    if (!st.ok()) {
      pages_->Release(fresh);
      return st;
    }
    pages_->Release(ids_.back());
    ids_.back() = fresh;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DevicePageTable>> DevicePageTable::Fork(int64_t n, int32_t copy_page) const {
  const int64_t P = pages_->page_size();
  auto fork = std::make_unique<DevicePageTable>(pages_);
  const int64_t whole = n / P;
  for (int64_t i = 0; i < whole; ++i) {
    pages_->AddRef(ids_[static_cast<size_t>(i)]);
    fork->ids_.push_back(ids_[static_cast<size_t>(i)]);
  }
  if (n % P != 0) {
    int32_t fresh = copy_page;
    if (fresh < 0) {
      FERRY_ASSIGN_OR_RETURN(fresh, pages_->Allocate());
    } else {
      FERRY_RETURN_IF_ERROR(pages_->Take(std::span<const int32_t>(&fresh, 1)));
    }
    fork->ids_.push_back(fresh);  // released by fork's destructor if the copy fails
    FERRY_RETURN_IF_ERROR(pages_->CopyPage(fresh, ids_[static_cast<size_t>(whole)]));
  }
  return fork;
}

}  // namespace ferry::model::cuda
