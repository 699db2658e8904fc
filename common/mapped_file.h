// A read-only memory mapping of a whole file (RAII). Checkpoint tensors are read through it
// without copying.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ferry {

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to size() == 0 and data() == nullptr.
  // Errors: NOT_FOUND when the file is missing, FAILED_PRECONDITION for other open/map failures.
  static absl::StatusOr<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Gives the pages of [begin, begin + bytes) back: this mapping's and the kernel's page cache of
  // them (rounded out to whole pages), so a copy of the bytes elsewhere (on a GPU that shares the
  // host's memory) does not leave a second copy cached. Reading them later reads the file again.
  // Best effort: a range outside the mapping is ignored, as are the kernel's refusals.
  void DropPages(const uint8_t* begin, size_t bytes) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;  // kept for DropPages (posix_fadvise)
};

}  // namespace ferry
