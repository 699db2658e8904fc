// model/checkpoint/weight_bytes.h against real files and the real loader: at one rank the
// accounting is the bytes of every tensor the tiny checkpoints hold (bf16 as shipped, FP8 with
// block scales written here, NVFP4 written by `ferry quantize`), tensor by tensor; at 2 and 4
// ranks a rank's values are what the CPU loader holds (float32, so its bytes / 4); the published
// GLM-5.3-Flash NVFP4 config gives the figures `ferry plan` prints for it; uneven splits refused.
#include "model/checkpoint/weight_bytes.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "model/checkpoint/checkpoint.h"
#include "model/families/causal_lm.h"
#include "model/parallel/tensor_parallel.h"
#include "tests/catch.h"
#include "tests/testing/files.h"
#include "tests/testing/thread_collective.h"

namespace ferry::model {
namespace {

using testing::RawTensor;
using testing::TempDir;

const std::string kData = FERRY_TEST_DATA_DIR;

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int64_t Bytes(const TensorInfo& t) { return static_cast<int64_t>(t.end - t.begin); }

// The file bytes of a listed weight and of the scale tensors stored beside it.
int64_t StoredWithScales(const Checkpoint& ck, const std::string& name) {
  int64_t n = Bytes(*ck.Find(name));
  for (const char* suffix : {"_scale_inv", "_scale", "_scale_2"}) {
    if (const TensorInfo* s = ck.Find(name + suffix)) n += Bytes(*s);
  }
  if (absl::EndsWith(name, ".weight")) {
    if (const TensorInfo* s = ck.Find(name.substr(0, name.size() - 7) + ".input_scale")) n += Bytes(*s);
  }
  return n;
}

// At one rank: every listed tensor is in the files with its config shape (packed for NVFP4) and
// the bytes the accounting gives it, and the files hold nothing else the engine loads (the vision
// tower is all they hold besides). Returns the accounting's total.
int64_t CheckFilesAtOneRank(const std::string& dir) {
  INFO(dir);
  auto ck = Checkpoint::Open(dir);
  REQUIRE(ck.ok());
  auto c = ParseModelConfig(ck->config_json(), ck->config_path());
  REQUIRE(c.ok());
  const QuantizationScheme& q = ck->quantization();
  REQUIRE(q.known());
  int64_t listed = 0;
  for (const ModelTensor& t : ModelTensors(*c)) {
    INFO(t.name);
    const TensorInfo* info = ck->Find(t.name);
    REQUIRE(info != nullptr);
    const WeightFormat f = TensorFormat(t, q);
    std::vector<int64_t> shape = t.shape;
    if (f == WeightFormat::kNvfp4) shape[1] /= 2;
    CHECK(info->shape == shape);
    auto bytes = RankBytes(t, f, q, 1);
    REQUIRE(bytes.ok());
    CHECK(*bytes == StoredWithScales(*ck, t.name));
    listed += *bytes;
  }
  int64_t in_files = 0;
  for (const std::string& name : ck->TensorNames()) {
    if (!absl::StartsWith(name, "model.visual.")) in_files += Bytes(*ck->Find(name));
  }
  CHECK(in_files == listed);
  auto w = WeightBytesPerRank(*c, q, 1);
  REQUIRE(w.ok());
  CHECK(w->bytes == listed);
  CHECK(w->replicated_bytes == listed);
  return listed;
}

// At `world` ranks: each rank's CPU model holds 4 bytes for every value the accounting gives a rank.
void CheckLoaderValues(const std::string& dir, int world) {
  INFO(dir << " at " << world << " ranks");
  auto ck = Checkpoint::Open(dir);
  REQUIRE(ck.ok());
  auto c = ParseModelConfig(ck->config_json(), ck->config_path());
  REQUIRE(c.ok());
  auto w = WeightBytesPerRank(*c, ck->quantization(), world);
  REQUIRE(w.ok());
  ferry::testing::ThreadGroup group(world);
  for (int r = 0; r < world; ++r) {
    auto m = LoadCausalLM(dir, TensorParallel{r, world, group.rank(r)});
    REQUIRE(m.ok());
    CHECK((*m)->weight_bytes() == 4 * w->values);
  }
}

TEST_CASE("weight_bytes: the tiny bf16 checkpoints hold exactly the listed tensors at one rank", "[weight_bytes]") {
  CHECK(CheckFilesAtOneRank(kData + "/glm-dsa-tiny") == 2994144);  // every tensor of the file
  CheckFilesAtOneRank(kData + "/glm5next-tiny");
  CheckFilesAtOneRank(kData + "/glm5next-kpool8");
}

TEST_CASE("weight_bytes: at 2 and 4 ranks a rank holds the values the CPU loader loads", "[weight_bytes]") {
  for (const char* m : {"/glm-dsa-tiny", "/glm5next-tiny"}) {
    CheckLoaderValues(kData + m, 2);
    CheckLoaderValues(kData + m, 4);
  }
}

// glm-dsa-tiny with its Linear weights in block-scaled FP8 (blocks of 32 x 48, so edge blocks
// are partial) but lm_head, as transformers' FP8 releases store them.
void WriteFp8Tiny(const std::string& out) {
  const std::string src = kData + "/glm-dsa-tiny";
  auto ck = Checkpoint::Open(src);
  REQUIRE(ck.ok());
  nlohmann::json config = ck->config_json();
  config["quantization_config"] = {
      {"quant_method", "fp8"}, {"weight_block_size", {32, 48}}, {"modules_to_not_convert", {"lm_head"}}};
  auto q = QuantizationScheme::Parse(QuantizationScheme::Block(config), "fp8 tiny");
  REQUIRE(q.ok());
  auto c = ParseModelConfig(config, "fp8 tiny");
  REQUIRE(c.ok());
  std::vector<RawTensor> out_tensors;
  for (const ModelTensor& t : ModelTensors(*c)) {
    auto v = ck->LoadF32(t.name, t.shape);
    REQUIRE(v.ok());
    if (TensorFormat(t, *q) != WeightFormat::kFp8Block) {
      std::string b(v->size() * 2, '\0');
      for (size_t i = 0; i < v->size(); ++i) {
        const uint16_t h = F32ToBf16((*v)[i]);
        std::memcpy(&b[2 * i], &h, 2);
      }
      out_tensors.push_back({t.name, DType::kBF16, t.shape, b});
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1], br = 32, bc = 48;
    const int64_t srows = (rows + br - 1) / br, scols = (cols + bc - 1) / bc;
    std::vector<float> scale(static_cast<size_t>(srows * scols), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) {
        float& s = scale[static_cast<size_t>((r / br) * scols + k / bc)];
        s = std::max(s, std::fabs((*v)[static_cast<size_t>(r * cols + k)]) / 448.0f);
      }
    }
    for (float& s : scale) s = s > 0 ? s : 1.0f;
    std::string codes(static_cast<size_t>(rows * cols), '\0');
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) {
        codes[static_cast<size_t>(r * cols + k)] = static_cast<char>(
            F32ToF8E4M3((*v)[static_cast<size_t>(r * cols + k)] / scale[static_cast<size_t>((r / br) * scols + k / bc)]));
      }
    }
    out_tensors.push_back({t.name, DType::kF8E4M3, t.shape, codes});
    out_tensors.push_back(testing::F32Tensor(t.name + "_scale_inv", {srows, scols}, scale));
  }
  testing::WriteFile(out + "/config.json", config.dump(2));
  testing::WriteSafetensors(out + "/model.safetensors", out_tensors);
}

TEST_CASE("weight_bytes: an FP8 checkpoint's files are the accounting at one rank", "[weight_bytes]") {
  TempDir dir;
  WriteFp8Tiny(dir.path());
  CheckFilesAtOneRank(dir.path());
  CheckLoaderValues(dir.path(), 2);
  auto ck = Checkpoint::Open(dir.path());
  REQUIRE(ck.ok());
  auto c = ParseModelConfig(ck->config_json(), ck->config_path());
  REQUIRE(c.ok());
  auto w = WeightBytesPerRank(*c, ck->quantization(), 1);
  REQUIRE(w.ok());
  // FP8: 156 MLP and expert matrices, 20 of attention, 9 of the three full indexers. bf16: the
  // embeddings, lm_head (not converted), the final norm, 16 layer and latent norms, 6 indexer
  // norm vectors, 3 routers and their biases.
  CHECK(w->tensors[static_cast<int>(WeightFormat::kFp8Block)] == 185);
  CHECK(w->tensors[static_cast<int>(WeightFormat::kBf16)] == 31);
}

TEST_CASE("weight_bytes: ferry quantize --format nvfp4 writes what the accounting counts", "[weight_bytes]") {
  for (const char* m : {"glm-dsa-tiny", "glm5next-tiny"}) {
    TempDir tmp;
    const std::string out = tmp.File("nvfp4"), calibrated = tmp.File("calibrated");
    std::ofstream(tmp.File("ids")) << "1 2 3 4 5\n9,8,7\n";
    for (const std::string& cmd :
         {absl::StrCat(FERRY_CLI, " quantize --format nvfp4 ", kData, "/", m, " ", out, " > ", tmp.File("log"), " 2>&1"),
          absl::StrCat(FERRY_CLI, " quantize --format nvfp4 --calibration_ids ", tmp.File("ids"), " ", kData, "/", m,
                       " ", calibrated, " > ", tmp.File("log"), " 2>&1")}) {
      INFO(cmd);
      REQUIRE(std::system(cmd.c_str()) == 0);
    }
    // With input scales: 4 more bytes a quantized projection, which the accounting counts.
    CheckFilesAtOneRank(calibrated);
    CheckFilesAtOneRank(out);
    CheckLoaderValues(out, 2);
    // At 4 ranks an expert's down projection keeps 32 / 4 = 8 columns a rank: not whole groups.
    auto ck = Checkpoint::Open(out);
    REQUIRE(ck.ok());
    auto c = ParseModelConfig(ck->config_json(), ck->config_path());
    REQUIRE(c.ok());
    auto w4 = WeightBytesPerRank(*c, ck->quantization(), 4);
    REQUIRE_FALSE(w4.ok());
    CHECK(Contains(std::string(w4.status().message()), "split over 4 ranks leaves 8 of its 32 columns a rank, not "
                                                       "whole groups of 16"));
  }
}

// glm-dsa-tiny as ModelOpt's FP8 writes it: every Linear weight F8_E4M3 with one float32
// weight_scale (amax / 448) and an input_scale (1: a placeholder).
void WriteModelOptFp8Tiny(const std::string& out) {
  auto ck = Checkpoint::Open(kData + "/glm-dsa-tiny");
  REQUIRE(ck.ok());
  nlohmann::json config = ck->config_json();
  const nlohmann::json fp8 = {{"num_bits", 8}, {"type", "float"}, {"dynamic", false}};
  config["quantization_config"] = {
      {"quant_method", "modelopt"}, {"quant_algo", "FP8"}, {"ignore", {"lm_head"}},
      {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", fp8}, {"input_activations", fp8}}}}}};
  auto q = QuantizationScheme::Parse(QuantizationScheme::Block(config), "modelopt fp8 tiny");
  REQUIRE(q.ok());
  auto c = ParseModelConfig(config, "modelopt fp8 tiny");
  REQUIRE(c.ok());
  std::vector<RawTensor> tensors;
  for (const ModelTensor& t : ModelTensors(*c)) {
    auto v = ck->LoadF32(t.name, t.shape);
    REQUIRE(v.ok());
    if (TensorFormat(t, *q) != WeightFormat::kFp8Tensor) {
      tensors.push_back(testing::Bf16Tensor(t.name, t.shape, *v));
      continue;
    }
    float amax = 0.0f;
    for (float x : *v) amax = std::max(amax, std::fabs(x));
    const float scale = amax > 0 ? amax / 448.0f : 1.0f;
    std::string codes(v->size(), '\0');
    for (size_t i = 0; i < v->size(); ++i) codes[i] = static_cast<char>(F32ToF8E4M3((*v)[i] / scale));
    tensors.push_back({t.name, DType::kF8E4M3, t.shape, codes});
    const std::string module = t.name.substr(0, t.name.size() - 7);
    tensors.push_back(testing::F32Tensor(t.name + "_scale", {}, {scale}));
    tensors.push_back(testing::F32Tensor(module + ".input_scale", {}, {1.0f}));
  }
  testing::WriteFile(out + "/config.json", config.dump(2));
  testing::WriteSafetensors(out + "/model.safetensors", tensors);
}

TEST_CASE("weight_bytes: ferry quantize --format nvfp4 of a ModelOpt FP8 checkpoint keeps none of its scales",
          "[weight_bytes]") {
  TempDir tmp;
  const std::string fp8 = tmp.File("fp8"), out = tmp.File("nvfp4");
  std::filesystem::create_directories(fp8);
  WriteModelOptFp8Tiny(fp8);
  CheckFilesAtOneRank(fp8);
  const std::string cmd = absl::StrCat(FERRY_CLI, " quantize --format nvfp4 ", fp8, " ", out, " > ", tmp.File("log"),
                                       " 2>&1");
  INFO(cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto ck = Checkpoint::Open(out);
  REQUIRE(ck.ok());
  int64_t nvfp4_scales = 0;
  for (const std::string& name : ck->TensorNames()) {
    INFO(name);
    // The source's per-tensor FP8 scales went with their weights (decoded to bf16 or requantized):
    // every scale left is an NVFP4 weight's, and no activation scale was carried over.
    CHECK_FALSE(absl::EndsWith(name, ".input_scale"));
    if (absl::EndsWith(name, ".weight_scale")) {
      CHECK(ck->Find(name)->dtype == DType::kF8E4M3);
      CHECK(ck->Find(name.substr(0, name.size() - 6))->dtype == DType::kU8);
      ++nvfp4_scales;
    }
  }
  CHECK(nvfp4_scales > 0);
  CheckFilesAtOneRank(out);
}

TEST_CASE("weight_bytes: the published GLM-5.3-Flash NVFP4 config at 1 2 and 4 ranks", "[weight_bytes]") {
  const std::string path = kData + "/configs/glm-5.3-flash-nvfp4.config.json";
  auto json = ReadJsonFile(path);
  REQUIRE(json.ok());
  auto c = ParseModelConfig(*json, path);
  REQUIRE(c.ok());
  auto q = QuantizationScheme::Parse(QuantizationScheme::Block(*json), path);
  REQUIRE(q.ok());
  // Figures from an independent computation over the same config (tests/data/configs/README.md).
  auto w2 = WeightBytesPerRank(*c, *q, 2);
  REQUIRE(w2.ok());
  CHECK(w2->bytes == 95774088260);
  CHECK(w2->replicated_bytes == 3128485244);
  CHECK(w2->values == 157445527294);
  CHECK(w2->tensors[static_cast<int>(WeightFormat::kNvfp4)] == 36297);
  CHECK(w2->tensors[static_cast<int>(WeightFormat::kBf16)] == 1237);
  CHECK(w2->format_bytes[static_cast<int>(WeightFormat::kNvfp4)] == 85741825608);
  auto w1 = WeightBytesPerRank(*c, *q, 1);
  REQUIRE(w1.ok());
  CHECK(w1->bytes == 188419400900);
  auto w4 = WeightBytesPerRank(*c, *q, 4);
  REQUIRE(w4.ok());
  CHECK(w4->bytes == 49451431940);
}

TEST_CASE("weight_bytes: a width that does not divide the heads is refused naming the tensor", "[weight_bytes]") {
  auto ck = Checkpoint::Open(kData + "/glm-dsa-tiny");
  REQUIRE(ck.ok());
  auto c = ParseModelConfig(ck->config_json(), ck->config_path());
  REQUIRE(c.ok());
  auto w = WeightBytesPerRank(*c, ck->quantization(), 3);
  REQUIRE_FALSE(w.ok());
  CHECK(w.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(std::string(w.status().message()),
                 "tensor 'model.layers.0.self_attn.q_b_proj.weight' is split over the ranks by its 8 heads or "
                 "intermediate rows, which 3 ranks do not divide"));
  const nlohmann::json awq = {{"quant_method", "awq"}};
  auto unknown = QuantizationScheme::Parse(&awq, "awq");
  REQUIRE(unknown.ok());
  auto refused = WeightBytesPerRank(*c, *unknown, 1);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace ferry::model
