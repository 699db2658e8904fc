#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ferry {

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::FailedPreconditionError(msg);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return absl::FailedPreconditionError(absl::StrCat(path, ": mmap of ", file.size_,
                                                        " bytes failed: ", std::strerror(err)));
    }
    file.data_ = static_cast<const uint8_t*>(p);
  }
  file.fd_ = fd;
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_), fd_(other.fd_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.fd_ = -1;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    fd_ = other.fd_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.fd_ = -1;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

void MappedFile::DropPages(const uint8_t* begin, size_t bytes) const {
  if (data_ == nullptr || begin < data_ || bytes == 0 || bytes > size_ ||
      static_cast<size_t>(begin - data_) > size_ - bytes) {
    return;
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t first = static_cast<size_t>(begin - data_) / page * page;
  const size_t end = std::min(size_, (static_cast<size_t>(begin - data_) + bytes + page - 1) / page * page);
  // This process's mapping first (the kernel keeps mapped pages cached), then the cache. The
  // mapping is private and never written, so its pages come back from the file if read again.
  ::madvise(const_cast<uint8_t*>(data_) + first, end - first, MADV_DONTNEED);
  if (fd_ >= 0) ::posix_fadvise(fd_, static_cast<off_t>(first), static_cast<off_t>(end - first), POSIX_FADV_DONTNEED);
}

}  // namespace ferry
