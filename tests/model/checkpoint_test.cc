#include "model/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/catch.h"
#include "tests/testing/files.h"

namespace ferry::model {
namespace {

using ferry::testing::Bf16Tensor;
using ferry::testing::F32Tensor;
using ferry::testing::RawTensor;
using ferry::testing::TempDir;
using ferry::testing::WriteFile;
using ferry::testing::WriteSafetensors;

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_CASE("checkpoint: a single-file directory", "[checkpoint]") {
  TempDir dir;
  WriteFile(dir.File("config.json"), R"({"model_type": "glm_moe_dsa"})");
  WriteSafetensors(dir.File("model.safetensors"),
                   {Bf16Tensor("w", {2, 2}, {1, 2, 3, 4}), F32Tensor("v", {3}, {0.25f, 0.5f, 0.75f})});
  auto ck = Checkpoint::Open(dir.path());
  REQUIRE(ck.ok());
  CHECK(ck->config_json().at("model_type") == "glm_moe_dsa");
  CHECK(ck->TensorNames() == std::vector<std::string>{"v", "w"});
  auto w = ck->LoadF32("w", {2, 2});
  REQUIRE(w.ok());
  CHECK(*w == std::vector<float>{1, 2, 3, 4});

  SECTION("slices") {
    auto s = ck->LoadF32("w", {2, 2}, Slice{1, 2, 0, -1});
    REQUIRE(s.ok());
    CHECK(*s == std::vector<float>{3, 4});
    auto c = ck->LoadF32("w", {2, 2}, Slice{0, -1, 1, 2});
    REQUIRE(c.ok());
    CHECK(*c == std::vector<float>{2, 4});
    auto bad = ck->LoadF32("w", {2, 2}, Slice{0, 3, 0, -1});
    REQUIRE_FALSE(bad.ok());
    CHECK(Contains(std::string(bad.status().message()), "lies outside its 2 x 2 elements"));
  }
  SECTION("a shape that disagrees with the config") {
    auto bad = ck->LoadF32("w", {4, 1});
    REQUIRE_FALSE(bad.ok());
    const std::string e(bad.status().message());
    CHECK(Contains(e, "model.safetensors"));
    CHECK(Contains(e, "tensor 'w' has shape [2, 2] but the config implies [4, 1]"));
  }
  SECTION("a missing tensor") {
    auto bad = ck->LoadF32("model.norm.weight", {2});
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().code() == absl::StatusCode::kNotFound);
    CHECK(Contains(std::string(bad.status().message()), "tensor 'model.norm.weight' is missing"));
  }
}

TEST_CASE("checkpoint: a non-float weight is refused with its dtype", "[checkpoint]") {
  TempDir dir;
  WriteFile(dir.File("config.json"), "{}");
  WriteSafetensors(dir.File("model.safetensors"), {RawTensor{"ids", DType::kI32, {1}, std::string(4, '\0')}});
  auto ck = Checkpoint::Open(dir.path());
  REQUIRE(ck.ok());
  auto bad = ck->LoadF32("ids", {1});
  REQUIRE_FALSE(bad.ok());
  CHECK(Contains(std::string(bad.status().message()), "tensor 'ids' has dtype I32"));
}

TEST_CASE("checkpoint: f16 upcast", "[checkpoint]") {
  TempDir dir;
  WriteFile(dir.File("config.json"), "{}");
  RawTensor t{"h", DType::kF16, {2}, std::string(4, '\0')};
  const uint16_t v[2] = {0x3c00, 0xc400};  // 1, -4
  std::memcpy(t.bytes.data(), v, 4);
  WriteSafetensors(dir.File("model.safetensors"), {t});
  auto ck = Checkpoint::Open(dir.path());
  REQUIRE(ck.ok());
  auto h = ck->LoadF32("h", {2});
  REQUIRE(h.ok());
  CHECK(*h == std::vector<float>{1.0f, -4.0f});
}

TEST_CASE("checkpoint: fp8 e4m3 weights with block scales", "[checkpoint]") {
  TempDir dir;
  // 3 x 5 weight in 2 x 2 blocks: scales [2, 3].
  WriteFile(dir.File("config.json"),
            R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [2, 2]}})");
  RawTensor w{"layer.weight", DType::kF8E4M3, {3, 5}, std::string(15, '\0')};
  for (int i = 0; i < 15; ++i) w.bytes[i] = static_cast<char>(0x38);  // every element 1.0
  w.bytes[14] = static_cast<char>(0x3c);                              // last element 1.5
  const std::vector<float> scales = {1, 2, 3, 4, 5, 6};
  WriteSafetensors(dir.File("model.safetensors"), {w, F32Tensor("layer.weight_scale_inv", {2, 3}, scales)});
  auto ck = Checkpoint::Open(dir.path());
  REQUIRE(ck.ok());
  auto f = ck->LoadF32("layer.weight", {3, 5});
  REQUIRE(f.ok());
  const std::vector<float> want = {1, 1, 2, 2, 3,  //
                                   1, 1, 2, 2, 3,  //
                                   4, 4, 5, 5, 9};
  CHECK(*f == want);
  auto part = ck->LoadF32("layer.weight", {3, 5}, Slice{2, 3, 3, 5});
  REQUIRE(part.ok());
  CHECK(*part == std::vector<float>{5, 9});
  // As stored, for a backend that keeps FP8: the bytes and the scales.
  auto raw = ck->Fp8Data("layer.weight", {3, 5});
  REQUIRE(raw.ok());
  REQUIRE(raw->bytes != nullptr);
  CHECK(std::string(reinterpret_cast<const char*>(raw->bytes), 15) == w.bytes);
  CHECK(raw->scales == scales);
  CHECK(raw->block_rows == 2);
  CHECK(raw->block_cols == 2);
  auto wrong_shape = ck->Fp8Data("layer.weight", {5, 3});
  REQUIRE_FALSE(wrong_shape.ok());
  CHECK(Contains(std::string(wrong_shape.status().message()), "has shape [3, 5] but the config implies [5, 3]"));
  auto scale_itself = ck->Fp8Data("layer.weight_scale_inv", {2, 3});  // stored F32: no FP8 bytes
  REQUIRE(scale_itself.ok());
  CHECK(scale_itself->bytes == nullptr);

  SECTION("a host checkpoint reads the block size too (and refuses a bad one)") {
    const std::vector<float> sc = scales;
    nlohmann::json config = {{"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {2, 2}}}}};
    std::vector<Checkpoint::HostTensor> host = {
        {"layer.weight", DType::kF8E4M3, {3, 5}, reinterpret_cast<const uint8_t*>(w.bytes.data())},
        {"layer.weight_scale_inv", DType::kF32, {2, 3}, reinterpret_cast<const uint8_t*>(sc.data())}};
    auto hc = Checkpoint::FromHost(config, host, "host");
    REQUIRE(hc.ok());
    auto hf = hc->LoadF32("layer.weight", {3, 5});
    REQUIRE(hf.ok());
    CHECK(*hf == want);
    auto hraw = hc->Fp8Data("layer.weight", {3, 5});
    REQUIRE(hraw.ok());
    CHECK(hraw->block_rows == 2);
    config["quantization_config"]["weight_block_size"] = {2, 0};
    auto bad = Checkpoint::FromHost(config, host, "host");
    REQUIRE_FALSE(bad.ok());
    CHECK(Contains(std::string(bad.status().message()), "host: quantization_config.weight_block_size must be two "
                                                        "positive integers, got [2,0]"));
  }
  SECTION("a missing scale tensor is named") {
    TempDir d2;
    WriteFile(d2.File("config.json"), "{}");
    WriteSafetensors(d2.File("model.safetensors"), {w});
    auto ck2 = Checkpoint::Open(d2.path());
    REQUIRE(ck2.ok());
    auto bad = ck2->LoadF32("layer.weight", {3, 5});
    REQUIRE_FALSE(bad.ok());
    CHECK(Contains(std::string(bad.status().message()), "has no 'layer.weight_scale_inv' block scales"));
    auto bad_raw = ck2->Fp8Data("layer.weight", {3, 5});
    REQUIRE_FALSE(bad_raw.ok());
    CHECK(absl::IsNotFound(bad_raw.status()));
    CHECK(Contains(std::string(bad_raw.status().message()), "has no 'layer.weight_scale_inv' block scales"));
  }
  SECTION("a scale tensor of the wrong shape is named") {
    TempDir d3;
    WriteFile(d3.File("config.json"), "{}");  // default 128 x 128 blocks: scales must be [1, 1]
    WriteSafetensors(d3.File("model.safetensors"), {w, F32Tensor("layer.weight_scale_inv", {2, 3}, scales)});
    auto ck3 = Checkpoint::Open(d3.path());
    REQUIRE(ck3.ok());
    auto bad = ck3->LoadF32("layer.weight", {3, 5});
    REQUIRE_FALSE(bad.ok());
    CHECK(Contains(std::string(bad.status().message()), "expected F32 or BF16 [1, 1] for 128x128 blocks"));
  }
}

TEST_CASE("checkpoint: sharded with an index", "[checkpoint]") {
  TempDir dir;
  WriteFile(dir.File("config.json"), "{}");
  WriteSafetensors(dir.File("model-00001-of-00002.safetensors"), {F32Tensor("a", {1}, {1})});
  WriteSafetensors(dir.File("model-00002-of-00002.safetensors"), {F32Tensor("b", {1}, {2})});

  SECTION("every tensor found in its shard") {
    WriteFile(dir.File("model.safetensors.index.json"),
              R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                 "b": "model-00002-of-00002.safetensors"}})");
    auto ck = Checkpoint::Open(dir.path());
    REQUIRE(ck.ok());
    CHECK(ck->TensorNames() == std::vector<std::string>{"a", "b"});
    CHECK(Contains(ck->FileOf("b"), "model-00002-of-00002.safetensors"));
    CHECK(ck->LoadF32("b", {1})->at(0) == 2.0f);
  }
  SECTION("a tensor mapped to a shard that lacks it") {
    WriteFile(dir.File("model.safetensors.index.json"),
              R"({"weight_map": {"a": "model-00002-of-00002.safetensors"}})");
    auto ck = Checkpoint::Open(dir.path());
    REQUIRE_FALSE(ck.ok());
    CHECK(Contains(std::string(ck.status().message()),
                   "tensor 'a' is mapped to model-00002-of-00002.safetensors, which does not hold it"));
  }
  SECTION("a missing shard") {
    WriteFile(dir.File("model.safetensors.index.json"), R"({"weight_map": {"a": "model-gone.safetensors"}})");
    auto ck = Checkpoint::Open(dir.path());
    REQUIRE_FALSE(ck.ok());
    CHECK(Contains(std::string(ck.status().message()), "model-gone.safetensors: cannot open"));
  }
  SECTION("a shard path that leaves the directory") {
    WriteFile(dir.File("model.safetensors.index.json"), R"({"weight_map": {"a": "../x.safetensors"}})");
    auto ck = Checkpoint::Open(dir.path());
    REQUIRE_FALSE(ck.ok());
    CHECK(Contains(std::string(ck.status().message()), "not a file in the checkpoint directory"));
  }
  SECTION("an index without a weight_map") {
    WriteFile(dir.File("model.safetensors.index.json"), R"({"metadata": {}})");
    auto ck = Checkpoint::Open(dir.path());
    REQUIRE_FALSE(ck.ok());
    CHECK(Contains(std::string(ck.status().message()), "no 'weight_map' object"));
  }
}

TEST_CASE("checkpoint: directory-level errors", "[checkpoint]") {
  TempDir dir;
  SECTION("no config.json") {
    auto ck = Checkpoint::Open(dir.path());
    REQUIRE_FALSE(ck.ok());
    CHECK(ck.status().code() == absl::StatusCode::kNotFound);
    CHECK(Contains(std::string(ck.status().message()), "config.json: file not found"));
  }
  SECTION("malformed config.json") {
    WriteFile(dir.File("config.json"), "{\"model_type\": ");
    auto ck = Checkpoint::Open(dir.path());
    REQUIRE_FALSE(ck.ok());
    CHECK(Contains(std::string(ck.status().message()), "config.json: malformed JSON at byte"));
  }
  SECTION("no weights") {
    WriteFile(dir.File("config.json"), "{}");
    auto ck = Checkpoint::Open(dir.path());
    REQUIRE_FALSE(ck.ok());
    CHECK(Contains(std::string(ck.status().message()),
                   "neither model.safetensors nor model.safetensors.index.json is present"));
  }
  SECTION("a bad block size") {
    WriteFile(dir.File("config.json"), R"({"quantization_config": {"weight_block_size": [0, 128]}})");
    auto ck = Checkpoint::Open(dir.path());
    REQUIRE_FALSE(ck.ok());
    CHECK(Contains(std::string(ck.status().message()), "weight_block_size must be two positive integers"));
  }
}

TEST_CASE("checkpoint: bf16 bytes as stored", "[checkpoint]") {
  TempDir dir;
  WriteFile(dir.File("config.json"), "{}");
  WriteSafetensors(dir.File("model.safetensors"),
                   {Bf16Tensor("w", {2, 2}, {1, -2, 3.5f, 4}), F32Tensor("v", {2}, {0.25f, 0.5f})});
  auto ck = Checkpoint::Open(dir.path());
  REQUIRE(ck.ok());
  auto w = ck->Bf16Data("w", {2, 2});
  REQUIRE(w.ok());
  REQUIRE(*w != nullptr);
  uint16_t bits[4];
  std::memcpy(bits, *w, sizeof(bits));
  CHECK(Bf16ToF32(bits[0]) == 1.0f);
  CHECK(Bf16ToF32(bits[1]) == -2.0f);
  CHECK(Bf16ToF32(bits[2]) == 3.5f);
  CHECK(Bf16ToF32(bits[3]) == 4.0f);
  // Stored in another dtype: null, the caller upcasts instead.
  auto v = ck->Bf16Data("v", {2});
  REQUIRE(v.ok());
  CHECK(*v == nullptr);
  auto shape = ck->Bf16Data("w", {4});
  REQUIRE_FALSE(shape.ok());
  CHECK(Contains(std::string(shape.status().message()), "tensor 'w' has shape [2, 2] but the config implies [4]"));
  CHECK(ck->Bf16Data("absent", {1}).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("checkpoint: a non-finite weight or FP8 scale is refused at load - naming the element", "[checkpoint]") {
  const float nan = std::nanf(""), inf = INFINITY;
  const std::vector<float> f = {0.5f, nan, 1.0f};
  const std::vector<uint16_t> b = {F32ToBf16(1), F32ToBf16(2), F32ToBf16(inf)};
  const std::vector<uint8_t> e4m3 = {0x38, 0x7f, 0x38, 0x38};  // 1.0, NaN, 1.0, 1.0
  const std::vector<float> scales = {1.0f}, bad_scales = {-2.0f};
  nlohmann::json config = {{"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {2, 2}}}}};
  std::vector<Checkpoint::HostTensor> t = {
      {"f", DType::kF32, {3}, reinterpret_cast<const uint8_t*>(f.data())},
      {"b", DType::kBF16, {3}, reinterpret_cast<const uint8_t*>(b.data())},
      {"q", DType::kF8E4M3, {2, 2}, e4m3.data()},
      {"q_scale_inv", DType::kF32, {1, 1}, reinterpret_cast<const uint8_t*>(scales.data())},
      {"s", DType::kF8E4M3, {2, 2}, e4m3.data() + 2 * 0},
      {"s_scale_inv", DType::kF32, {1, 1}, reinterpret_cast<const uint8_t*>(bad_scales.data())}};
  auto ck = Checkpoint::FromHost(config, t, "poisoned");
  REQUIRE(ck.ok());
  auto msg = [](const auto& r) { return r.ok() ? std::string("ok") : std::string(r.status().message()); };
  CHECK(Contains(msg(ck->LoadF32("f", {3})), "poisoned: tensor 'f' holds nan at element 1"));
  CHECK(Contains(msg(ck->LoadF32("b", {3})), "poisoned: tensor 'b' holds inf at element 2"));
  CHECK(Contains(msg(ck->Bf16Data("b", {3})), "poisoned: tensor 'b' holds inf at element 2"));
  CHECK(Contains(msg(ck->LoadF32("q", {2, 2})), "poisoned: tensor 'q' holds nan at element 1"));
  CHECK(Contains(msg(ck->Fp8Data("q", {2, 2})), "poisoned: tensor 'q' holds NaN at element 1"));
  CHECK(Contains(msg(ck->Fp8Data("s", {2, 2})), "block scale 0 of 's_scale_inv' is -2; FP8 block scales must be finite"));
  // A finite slice of a tensor holding a NaN elsewhere loads.
  CHECK(ck->LoadF32("f", {3}, Slice{2, 3, 0, -1}).ok());
}

TEST_CASE("checkpoint: tensors in host memory", "[checkpoint]") {
  // Two tensors over one buffer (shared bytes are allowed here), one float32.
  const std::vector<uint16_t> pool = {F32ToBf16(1), F32ToBf16(2), F32ToBf16(3), F32ToBf16(4), F32ToBf16(5)};
  const std::vector<float> f = {0.5f, -1.5f};
  std::vector<Checkpoint::HostTensor> t = {
      {"a", DType::kBF16, {2, 2}, reinterpret_cast<const uint8_t*>(pool.data())},
      {"b", DType::kBF16, {2}, reinterpret_cast<const uint8_t*>(pool.data() + 3)},
      {"c", DType::kF32, {2}, reinterpret_cast<const uint8_t*>(f.data())},
  };
  auto ck = Checkpoint::FromHost(nlohmann::json{{"model_type", "glm_moe_dsa"}}, t, "random test");
  REQUIRE(ck.ok());
  CHECK(ck->config_json().at("model_type") == "glm_moe_dsa");
  CHECK(ck->TensorNames() == std::vector<std::string>{"a", "b", "c"});
  CHECK(ck->FileOf("a") == "random test");
  auto a = ck->LoadF32("a", {2, 2});
  REQUIRE(a.ok());
  CHECK(*a == std::vector<float>{1, 2, 3, 4});
  auto b = ck->LoadF32("b", {2});
  REQUIRE(b.ok());
  CHECK(*b == std::vector<float>{4, 5});
  auto c = ck->LoadF32("c", {2});
  REQUIRE(c.ok());
  CHECK(*c == f);
  auto bits = ck->Bf16Data("b", {2});
  REQUIRE(bits.ok());
  CHECK(*bits == static_cast<const void*>(pool.data() + 3));
  // Moving the checkpoint keeps its messages' label.
  Checkpoint moved = std::move(*ck);
  auto bad = moved.LoadF32("a", {3});
  REQUIRE_FALSE(bad.ok());
  CHECK(Contains(std::string(bad.status().message()), "random test: tensor 'a' has shape [2, 2]"));

  SECTION("refusals") {
    auto twice = Checkpoint::FromHost(nlohmann::json::object(), {t[0], t[0]});
    REQUIRE_FALSE(twice.ok());
    CHECK(Contains(std::string(twice.status().message()), "tensor 'a' given twice"));
    auto no_data = Checkpoint::FromHost(nlohmann::json::object(), {{"x", DType::kBF16, {1}, nullptr}});
    REQUIRE_FALSE(no_data.ok());
    CHECK(Contains(std::string(no_data.status().message()), "tensor 'x' has no data"));
    auto not_object = Checkpoint::FromHost(nlohmann::json::array(), {});
    CHECK_FALSE(not_object.ok());
    const uint8_t bytes[8] = {};
    auto u8 = Checkpoint::FromHost(nlohmann::json::object(), {{"w.weight", DType::kU8, {1, 8}, bytes}}, "plain");
    REQUIRE_FALSE(u8.ok());
    CHECK(Contains(std::string(u8.status().message()), "plain: tensor 'w.weight' has a dtype that is no weight type"));
  }
  SECTION("an NVFP4 weight where the config declares NVFP4") {
    // A 1 x 16 weight: codes of 1.0 (0x2) and -2.0 (0xc) alternating, one E4M3 scale of 0.5
    // (0x30), a global scale of 4: values 2 and -4.
    uint8_t codes[8];
    for (uint8_t& b : codes) b = 0xc2;
    const uint8_t scale = 0x30;
    const float global = 4.0f;
    nlohmann::json config = {{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}}}};
    auto ck4 = Checkpoint::FromHost(config,
                                    {{"w.weight", DType::kU8, {1, 8}, codes},
                                     {"w.weight_scale", DType::kF8E4M3, {1, 1}, &scale},
                                     {"w.weight_scale_2", DType::kF32, {}, reinterpret_cast<const uint8_t*>(&global)}},
                                    "host nvfp4");
    REQUIRE(ck4.ok());
    auto nv = ck4->Nvfp4Data("w.weight", {1, 16});
    REQUIRE(nv.ok());
    CHECK(nv->packed == codes);
    CHECK(nv->global_scale == 4.0f);
    auto f = ck4->LoadF32("w.weight", {1, 16});
    REQUIRE(f.ok());
    for (int i = 0; i < 16; ++i) CHECK((*f)[i] == (i % 2 == 0 ? 2.0f : -4.0f));
  }
}

}  // namespace
}  // namespace ferry::model

namespace ferry::model {
namespace {

// Page-cache pages of `path` resident now, over [first_page, end_page) (mincore of a mapping
// that reads nothing).
int64_t ResidentPages(const std::string& path, size_t first_page, size_t end_page) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  ::fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size), page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  std::vector<unsigned char> in((size + page - 1) / page);
  ::mincore(p, size, in.data());
  ::munmap(p, size);
  int64_t n = 0;
  for (size_t i = first_page; i < end_page && i < in.size(); ++i) n += in[i] & 1;
  return n;
}

TEST_CASE("checkpoint: DropPages gives the cached pages of a prefix's tensors back - others stay - and they still "
          "read",
          "[checkpoint]") {
  // On disk (tmpfs cannot give pages back): the test's working directory, in the build tree.
  std::filesystem::path dir = std::filesystem::current_path() / ("ferry-drop-pages-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  struct Remove {
    std::filesystem::path p;
    ~Remove() { std::filesystem::remove_all(p); }
  } remove{dir};
  const int64_t n = 64 * 1024;  // 256 KiB a tensor: 64 pages of 4 KiB
  std::vector<float> a(static_cast<size_t>(n)), b(a.size());
  for (int64_t i = 0; i < n; ++i) a[i] = static_cast<float>(i), b[i] = static_cast<float>(-i);
  WriteFile((dir / "config.json").string(), "{}");
  const std::string file = (dir / "model.safetensors").string();
  WriteSafetensors(file, {F32Tensor("model.layers.0.a", {n}, a), F32Tensor("model.layers.1.b", {n}, b)});
  ::sync();  // dirty pages are not given back
  auto ck = Checkpoint::Open(dir.string());
  REQUIRE(ck.ok());
  REQUIRE(ck->LoadF32("model.layers.0.a", {n}).ok());
  REQUIRE(ck->LoadF32("model.layers.1.b", {n}).ok());
  // Each tensor's whole pages: the data section starts after the 8-byte length and the header.
  uint64_t header = 0;
  {
    std::ifstream in(file, std::ios::binary);
    in.read(reinterpret_cast<char*>(&header), 8);
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto pages = [&](const TensorInfo* t) {
    const size_t begin = 8 + header + t->begin, end = 8 + header + t->end;
    return std::pair<size_t, size_t>{(begin + page - 1) / page, end / page};
  };
  const auto [a0, a1] = pages(ck->Find("model.layers.0.a"));
  const auto [b0, b1] = pages(ck->Find("model.layers.1.b"));
  REQUIRE(a1 > a0 + 32);
  CHECK(ResidentPages(file, a0, a1) == static_cast<int64_t>(a1 - a0));
  CHECK(ResidentPages(file, b0, b1) == static_cast<int64_t>(b1 - b0));

  ck->DropPages("model.layers.0.");
  CHECK(ResidentPages(file, a0, a1) == 0);
  CHECK(ResidentPages(file, b0, b1) == static_cast<int64_t>(b1 - b0));
  auto again = ck->LoadF32("model.layers.0.a", {n});
  REQUIRE(again.ok());
  CHECK(*again == a);
  ck->DropPages("");
  CHECK(ResidentPages(file, b0, b1) == 0);
}

}  // namespace
}  // namespace ferry::model
