// Test helpers: scratch directories and safetensors files written byte by byte, so tests can
// build both valid checkpoints and every kind of broken one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/dtype.h"

namespace ferry::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& bytes);

// A tensor to write: raw little-endian bytes of `dtype`, `shape`.
struct RawTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string bytes;
};

RawTensor F32Tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values);
RawTensor Bf16Tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values);

// Writes a well-formed safetensors file holding `tensors` back to back in the given order.
void WriteSafetensors(const std::string& path, const std::vector<RawTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Writes an 8-byte header length `declared_len` (defaults to header.size()), then `header`,
// then `data`: the raw form for malformed files.
void WriteRawSafetensors(const std::string& path, const std::string& header, const std::string& data,
                         int64_t declared_len = -1);

}  // namespace ferry::testing
