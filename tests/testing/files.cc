#include "tests/testing/files.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "model/checkpoint/safetensors.h"

namespace ferry::testing {

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/ferry-test-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

RawTensor F32Tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  RawTensor t{name, DType::kF32, std::move(shape), std::string(values.size() * 4, '\0')};
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

RawTensor Bf16Tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  RawTensor t{name, DType::kBF16, std::move(shape), std::string(values.size() * 2, '\0')};
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t b = F32ToBf16(values[i]);
    std::memcpy(t.bytes.data() + 2 * i, &b, 2);
  }
  return t;
}

void WriteSafetensors(const std::string& path, const std::vector<RawTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<model::TensorBytes> out;
  for (const RawTensor& t : tensors) out.push_back({t.name, t.dtype, t.shape, t.bytes});
  const absl::Status st = model::WriteSafetensors(path, out, metadata);
  if (!st.ok()) throw std::runtime_error(std::string(st.message()));
}

void WriteRawSafetensors(const std::string& path, const std::string& header, const std::string& data,
                         int64_t declared_len) {
  uint64_t len = declared_len < 0 ? header.size() : static_cast<uint64_t>(declared_len);
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  WriteFile(path, bytes + header + data);
}

}  // namespace ferry::testing
