// One safetensors file, memory-mapped and validated at open.
//
// Format: an 8-byte little-endian header length N, then N bytes of JSON
//   {"<name>": {"dtype": "BF16", "shape": [r, c], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>"}}
// then the data section; offsets are relative to its start (byte 8 + N).
//
// Invariants after Open() succeeds: every tensor's dtype is known, its byte range lies inside the
// data section and matches numel * dtype size exactly, and no two ranges overlap. Tensor data is
// read in place from the mapping (never copied here).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/mapped_file.h"

namespace ferry::model {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offset into the data section
  uint64_t end = 0;    // one past the last byte

  int64_t numel() const;
  std::string ShapeString() const;  // "[384, 128]"
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. Every error names the file and the problem with its numbers.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // Tensors in the order of their data offsets.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr when the file has no tensor of that name.
  const TensorInfo* Find(absl::string_view name) const;
  // Start of a tensor's bytes inside the mapping. REQUIRES: `info` came from this file.
  const uint8_t* Data(const TensorInfo& info) const { return data_ + info.begin; }
  // Gives the cached pages of a tensor's bytes back (MappedFile::DropPages). REQUIRES: as Data.
  void DropPages(const TensorInfo& info) const { file_.DropPages(Data(info), info.end - info.begin); }
  // The string map under "__metadata__" (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  const uint8_t* data_ = nullptr;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: raw little-endian bytes (numel * DTypeSize(dtype) of them).
struct TensorBytes {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Writes `tensors` as one safetensors file, back to back in the given order (the header padded
// with spaces to a multiple of 8 bytes, as the format recommends), through a temporary file
// renamed into place. INVALID_ARGUMENT for a tensor whose bytes disagree with its shape or a
// duplicate name; UNAVAILABLE naming the file when it cannot be written.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorBytes>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace ferry::model
