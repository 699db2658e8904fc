#include "model/checkpoint/safetensors.h"

#include <string>

#include "tests/catch.h"
#include "tests/testing/files.h"

namespace ferry::model {
namespace {

using ferry::testing::Bf16Tensor;
using ferry::testing::F32Tensor;
using ferry::testing::TempDir;
using ferry::testing::WriteFile;
using ferry::testing::WriteRawSafetensors;
using ferry::testing::WriteSafetensors;

std::string ErrorOf(const std::string& path) {
  auto f = SafetensorsFile::Open(path);
  REQUIRE_FALSE(f.ok());
  return std::string(f.status().message());
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_CASE("safetensors: a well-formed file reads back in place", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.File("ok.safetensors");
  WriteSafetensors(path, {F32Tensor("a", {2, 3}, {1, 2, 3, 4, 5, 6}), Bf16Tensor("b", {2}, {0.5f, -4.0f})},
                   {{"format", "pt"}});
  auto f = SafetensorsFile::Open(path);
  REQUIRE(f.ok());
  REQUIRE(f->tensors().size() == 2);
  const TensorInfo* a = f->Find("a");
  REQUIRE(a != nullptr);
  CHECK(a->dtype == DType::kF32);
  CHECK(a->shape == std::vector<int64_t>{2, 3});
  CHECK(a->numel() == 6);
  const float* av = reinterpret_cast<const float*>(f->Data(*a));
  CHECK(av[5] == 6.0f);
  const TensorInfo* b = f->Find("b");
  REQUIRE(b != nullptr);
  CHECK(b->dtype == DType::kBF16);
  CHECK(f->Find("c") == nullptr);
  CHECK(f->metadata().at("format") == "pt");
}

TEST_CASE("safetensors: bad files get errors naming the file and the numbers", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.File("bad.safetensors");

  SECTION("missing file") {
    auto f = SafetensorsFile::Open(dir.File("absent.safetensors"));
    REQUIRE_FALSE(f.ok());
    CHECK(f.status().code() == absl::StatusCode::kNotFound);
    CHECK(Contains(std::string(f.status().message()), "absent.safetensors"));
  }
  SECTION("shorter than the length field") {
    WriteFile(path, "abc");
    std::string e = ErrorOf(path);
    CHECK(Contains(e, path));
    CHECK(Contains(e, "file is 3 bytes"));
  }
  SECTION("header length past the end of the file") {
    WriteRawSafetensors(path, "{}", "", /*declared_len=*/1000);
    std::string e = ErrorOf(path);
    CHECK(Contains(e, "header length 1000 runs past the end of the file (10 bytes"));
  }
  SECTION("malformed header JSON") {
    WriteRawSafetensors(path, "{\"a\": {\"dtype\": ", "");
    CHECK(Contains(ErrorOf(path), "malformed header JSON"));
  }
  SECTION("header is not an object") {
    WriteRawSafetensors(path, "[1, 2]", "");
    CHECK(Contains(ErrorOf(path), "not an object"));
  }
  SECTION("unknown dtype") {
    WriteRawSafetensors(path, R"({"w": {"dtype": "F4", "shape": [1], "data_offsets": [0, 1]}})", "x");
    CHECK(Contains(ErrorOf(path), "tensor 'w': unknown dtype 'F4'"));
  }
  SECTION("negative dimension") {
    WriteRawSafetensors(path, R"({"w": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}})", "x");
    CHECK(Contains(ErrorOf(path), "not a non-negative integer"));
  }
  SECTION("offsets outside the data") {
    WriteRawSafetensors(path, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                        std::string(8, '\0'));
    CHECK(Contains(ErrorOf(path), "data_offsets [0, 16] run past the data section of 8 bytes"));
  }
  SECTION("offsets backwards") {
    WriteRawSafetensors(path, R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [4, 2]}})",
                        std::string(8, '\0'));
    CHECK(Contains(ErrorOf(path), "end before they begin"));
  }
  SECTION("size disagrees with dtype and shape") {
    WriteRawSafetensors(path, R"({"w": {"dtype": "BF16", "shape": [3, 2], "data_offsets": [0, 8]}})",
                        std::string(8, '\0'));
    CHECK(Contains(ErrorOf(path), "BF16 [3, 2] needs 12 bytes but data_offsets [0, 8] hold 8"));
  }
  SECTION("a shape whose byte count overflows") {
    WriteRawSafetensors(
        path,
        R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 0]}})", "");
    CHECK(Contains(ErrorOf(path), "needs more than 2^64 bytes but data_offsets [0, 0] hold 0"));
  }
  SECTION("overlapping tensors") {
    WriteRawSafetensors(path,
                        R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                        std::string(12, '\0'));
    CHECK(Contains(ErrorOf(path), "tensors 'a' [0, 8) and 'b' [4, 12) overlap"));
  }
  SECTION("non-string metadata") {
    WriteRawSafetensors(path, R"({"__metadata__": {"k": 3}})", "");
    CHECK(Contains(ErrorOf(path), "'__metadata__' value of 'k' is not a string"));
  }
  SECTION("missing data_offsets") {
    WriteRawSafetensors(path, R"({"w": {"dtype": "F32", "shape": [1]}})", std::string(4, '\0'));
    CHECK(Contains(ErrorOf(path), "'data_offsets' must be two non-negative integers"));
  }
  SECTION("a hole between tensors") {
    WriteRawSafetensors(path,
                        R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},)"
                        R"( "b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}})",
                        std::string(6, '\0'));
    CHECK(Contains(ErrorOf(path), "bytes [2, 4) of the data section belong to no tensor (before 'b')"));
  }
  SECTION("a hole before the first tensor") {
    WriteRawSafetensors(path, R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}})", std::string(3, '\0'));
    CHECK(Contains(ErrorOf(path), "bytes [0, 1) of the data section belong to no tensor (before 'a')"));
  }
  SECTION("trailing bytes") {
    WriteRawSafetensors(path, R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})", std::string(5, '\0'));
    CHECK(Contains(ErrorOf(path), "bytes [2, 5) of the data section belong to no tensor (3 trailing bytes)"));
  }
}

}  // namespace
}  // namespace ferry::model
