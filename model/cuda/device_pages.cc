#include "model/cuda/device_pages.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ferry::model::cuda {

namespace cu = ferry::kernels::cuda;

namespace {

class DeviceMemory final : public PageMemory {
 public:
  explicit DeviceMemory(Precision p) : elem_(ElemBytes(p)) {}
  int64_t elem_bytes() const override { return elem_; }
  bool host() const override { return false; }
  int64_t pages() const override { return pages_; }

  absl::Status Grow(int64_t pages, int64_t page_bytes) override {
    if (pages <= pages_) return absl::OkStatus();
    const int64_t grown = std::max<int64_t>({pages, 2 * pages_, 8});
    FERRY_ASSIGN_OR_RETURN(DeviceBuffer block, Alloc(grown, page_bytes));
    if (pages_ > 0) {
      FERRY_RETURN_IF_ERROR(cu::CopyDeviceToDevice(block.get(), block_.get(), static_cast<size_t>(pages_ * page_bytes)));
    }
    block_ = std::move(block);
    pages_ = grown;
    return absl::OkStatus();
  }
  absl::Status Reset(int64_t pages, int64_t page_bytes) override {
    FERRY_ASSIGN_OR_RETURN(DeviceBuffer block, Alloc(pages, page_bytes));
    block_ = std::move(block);
    pages_ = pages;
    return absl::OkStatus();
  }
  char* Page(int32_t p) const override { return block_.as<char>() + int64_t{p} * page_bytes_; }
  absl::Status CopyPage(int32_t dst, int32_t src, int64_t page_bytes) override {
    char* base = block_.as<char>();
    return cu::CopyDeviceToDevice(base + int64_t{dst} * page_bytes, base + int64_t{src} * page_bytes,
                                  static_cast<size_t>(page_bytes));
  }
  absl::Status Read(int32_t p, int64_t offset, void* dst, int64_t bytes) const override {
    return cu::CopyToHost(dst, Page(p) + offset, static_cast<size_t>(bytes));
  }
  absl::Status Write(int32_t p, int64_t offset, const void* src, int64_t bytes) override {
    return cu::CopyToDevice(Page(p) + offset, src, static_cast<size_t>(bytes));
  }

 private:
  absl::StatusOr<DeviceBuffer> Alloc(int64_t pages, int64_t page_bytes) {
    page_bytes_ = page_bytes;
    absl::StatusOr<DeviceBuffer> block = DeviceBuffer::Alloc(static_cast<size_t>(pages * page_bytes));
    if (!block.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot hold ", pages, " KV pages of ", page_bytes,
                                                       " bytes on the device: ", block.status().message()));
    }
    return block;
  }

  int64_t elem_;
  int64_t page_bytes_ = 0;
  int64_t pages_ = 0;
  DeviceBuffer block_;
};

class DeviceState final : public StateMemory {
 public:
  absl::StatusOr<std::shared_ptr<void>> Zeroed(int64_t bytes) override {
    FERRY_ASSIGN_OR_RETURN(std::shared_ptr<void> p, Alloc(bytes));
    FERRY_RETURN_IF_ERROR(cu::DeviceFill(p.get(), 0, static_cast<size_t>(bytes)));
    return p;
  }
  absl::StatusOr<std::shared_ptr<void>> Copy(const void* src, int64_t bytes) override {
    FERRY_ASSIGN_OR_RETURN(std::shared_ptr<void> p, Alloc(bytes));
    FERRY_RETURN_IF_ERROR(cu::CopyDeviceToDevice(p.get(), src, static_cast<size_t>(bytes)));
    return p;
  }
  absl::Status CopyInto(void* dst, const void* src, int64_t bytes) override {
    return cu::CopyDeviceToDevice(dst, src, static_cast<size_t>(bytes));
  }

 private:
  static absl::StatusOr<std::shared_ptr<void>> Alloc(int64_t bytes) {
    absl::StatusOr<void*> p = cu::DeviceAlloc(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
    if (!p.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot hold ", bytes, " bytes of conversation state on the "
                                                       "device: ", p.status().message()));
    }
    return std::shared_ptr<void>(*p, [](void* q) { (void)cu::DeviceFree(q); });
  }
};

}  // namespace

std::unique_ptr<PageMemory> DevicePageMemory(Precision precision) { return std::make_unique<DeviceMemory>(precision); }

std::shared_ptr<StateMemory> DeviceStateMemory() {
  static const std::shared_ptr<StateMemory> device = std::make_shared<DeviceState>();
  return device;
}

absl::StatusOr<std::shared_ptr<PageArena>> DeviceArena(std::vector<PageRegion> regions, const CacheOptions& cache,
                                                       Precision precision) {
  FERRY_RETURN_IF_ERROR(ValidateCacheOptions(cache));
  for (size_t i = 0; i < regions.size(); ++i) {
    const PageRegion& r = regions[i];
    if (r.width < 0 || r.width % 8 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV region ", i, " is ", r.width, " values wide; the CUDA pages need a multiple of 8"));
    }
    const int64_t rows = r.divisor >= 1 && cache.page_size % r.divisor == 0 ? cache.page_size / r.divisor : 0;
    if (rows < 1 || (rows & (rows - 1)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("KV region ", i, " keeps a row per ", r.divisor,
                                                     " tokens; pages of ", cache.page_size,
                                                     " tokens need a power of two of such rows"));
    }
  }
  // The arena allocates a fixed capacity at once; report a failure rather than abort.
  auto arena = std::make_shared<PageArena>(std::move(regions), cache.page_size, -1, DevicePageMemory(precision));
  if (cache.capacity_pages > 0) FERRY_RETURN_IF_ERROR(arena->SetCapacity(cache.capacity_pages));
  return arena;
}

cu::PagedCacheBf16 View(const PageArena& arena, int64_t region, const int32_t* table, int64_t table_stride) {
  cu::PagedCacheBf16 v;
  v.arena = reinterpret_cast<const uint16_t*>(arena.memory().pages() > 0 ? arena.memory().Page(0) : nullptr) +
            arena.region_offset(region);
  v.n_pages = arena.memory().pages();
  v.page_rows = arena.rows(region);
  v.page_stride = arena.page_elems();
  v.width = arena.width(region);
  v.page_table = table;
  v.table_stride = table_stride;
  return v;
}

cu::PagedCacheF32 ViewF32(const PageArena& arena, int64_t region, const int32_t* table, int64_t table_stride) {
  const cu::PagedCacheBf16 b = View(arena, region, table, table_stride);
  return cu::PagedCacheF32{reinterpret_cast<const float*>(arena.memory().pages() > 0 ? arena.memory().Page(0) : nullptr) +
                               arena.region_offset(region),
                           b.n_pages, b.page_rows, b.page_stride, b.width, table, table_stride};
}

}  // namespace ferry::model::cuda
