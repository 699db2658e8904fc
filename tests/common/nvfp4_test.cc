// common/nvfp4.h and model/checkpoint/checkpoint.h's NVFP4 weights: the E2M1 codes and their rounding,
// ModelOpt's scale choice, the packing (element 2i in the low nibble), a checkpoint's NVFP4 weight
// decoded (whole and sliced) with hand-computed values, and every malformed piece refused.
#include "common/nvfp4.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "model/checkpoint/checkpoint.h"
#include "tests/catch.h"
#include "tests/testing/files.h"

namespace ferry {
namespace {

using testing::F32Tensor;
using testing::RawTensor;
using testing::TempDir;
using testing::WriteFile;
using testing::WriteSafetensors;

TEST_CASE("nvfp4: the E2M1 codes and their rounding ties to the even code", "[nvfp4]") {
  const float magnitudes[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (uint8_t c = 0; c < 16; ++c) {
    CHECK(E2M1ToF32(c) == (c & 8 ? -magnitudes[c & 7] : magnitudes[c & 7]));
    if ((c & 7) != 0) CHECK(F32ToE2M1(E2M1ToF32(c)) == c);
  }
  // Midpoints: 0.25 -> 0 (code 0), 0.75 -> 1 (code 2), 1.25 -> 1 (code 2), 1.75 -> 2 (code 4),
  // 2.5 -> 2 (code 4), 3.5 -> 4 (code 6), 5 -> 4 (code 6); past them the nearer value.
  const std::vector<std::pair<float, uint8_t>> cases = {{0.25f, 0}, {0.26f, 1}, {0.75f, 2}, {1.25f, 2}, {1.26f, 3},
                                                        {1.75f, 4}, {2.5f, 4},  {3.5f, 6},  {5.0f, 6},  {5.01f, 7},
                                                        {100.0f, 7}, {-0.6f, 9}, {-5.5f, 15}};
  for (const auto& [x, code] : cases) {
    INFO(x);
    CHECK(F32ToE2M1(x) == code);
  }
}

TEST_CASE("nvfp4: quantizing chooses ModelOpt's scales and packs element 2i low", "[nvfp4]") {
  // One row of 32: a group holding 0..15 / 2 (amax 7.5) and a group of zeros but a last -3.
  std::vector<float> w(32, 0.0f);
  for (int i = 0; i < 16; ++i) w[i] = static_cast<float>(i) / 2;
  w[31] = -3.0f;
  const Nvfp4Weight q = QuantizeNvfp4(w, 1, 32);
  CHECK(q.global_scale == 7.5f / (6.0f * 448.0f));
  REQUIRE(q.scales.size() == 2);
  REQUIRE(q.packed.size() == 16);
  // Group scales: amax / 6 / global as E4M3 = 448 for the first, 448 * 3 / 7.5 = 179.2 -> 176.
  CHECK(F8E4M3ToF32(q.scales[0]) == 448.0f);
  CHECK(F8E4M3ToF32(q.scales[1]) == 176.0f);
  std::vector<float> back(32);
  DequantNvfp4Row(q.packed.data(), q.scales.data(), q.global_scale, 32, 0, 0, 32, back.data());
  // The first group's step is 7.5 / 6 = 1.25: 0.5 / 1.25 = 0.4 -> code 1 (0.5), 1.0 -> 0.8 -> code 2 (1).
  CHECK(std::fabs(back[1] - 0.625f) < 1e-6f);
  CHECK(std::fabs(back[2] - 1.25f) < 1e-6f);
  CHECK(std::fabs(back[15] - 7.5f) < 1e-6f);  // 7.5 / 1.25 = 6: the largest code
  CHECK(back[31] < 0.0f);
  for (int i = 0; i < 32; ++i) {
    const float step = F8E4M3ToF32(q.scales[i / 16]) * q.global_scale;
    INFO(i);
    CHECK(std::fabs(back[i] - w[i]) <= step + 1e-6f);  // within one E2M1 gap (at most 2 steps apart codes)
  }
  // Element 0 in the low nibble of byte 0, element 1 in its high nibble.
  CHECK((q.packed[7] & 0x0f) == F32ToE2M1(w[14] / (F8E4M3ToF32(q.scales[0]) * q.global_scale)));
  CHECK((q.packed[7] >> 4) == 7);
}

// A checkpoint directory with one NVFP4 weight "mlp.w.weight" [2, 32] (and a bf16 one), whose
// pieces `edit` may break.
struct Nvfp4Dir {
  TempDir dir;
  RawTensor packed{"mlp.w.weight", DType::kU8, {2, 16}, std::string(32, '\0')};
  RawTensor scales{"mlp.w.weight_scale", DType::kF8E4M3, {2, 2}, std::string(4, '\0')};
  RawTensor global = F32Tensor("mlp.w.weight_scale_2", {}, {0.5f});
  RawTensor input = F32Tensor("mlp.w.input_scale", {}, {0.25f});
  std::string config = R"({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}})";
  Nvfp4Dir() {
    packed.bytes[0] = 0x21;   // element 0: code 1 (0.5), element 1: code 2 (1.0)
    packed.bytes[17] = 0x9f;  // row 1, elements 2, 3: code 15 (-6), code 9 (-0.5)
    scales.bytes[0] = static_cast<char>(F32ToF8E4M3(2.0f));
    scales.bytes[1] = static_cast<char>(F32ToF8E4M3(1.0f));
    scales.bytes[2] = static_cast<char>(F32ToF8E4M3(4.0f));
    scales.bytes[3] = static_cast<char>(F32ToF8E4M3(8.0f));
  }
  absl::StatusOr<model::Checkpoint> Open() {
    WriteFile(dir.File("config.json"), config);
    WriteSafetensors(dir.File("model.safetensors"),
                     {packed, scales, global, input, testing::Bf16Tensor("mlp.v.weight", {1, 2}, {1, 2})});
    return model::Checkpoint::Open(dir.path());
  }
};

TEST_CASE("nvfp4: a checkpoint's NVFP4 weight decodes to code x group scale x global scale", "[nvfp4]") {
  Nvfp4Dir d;
  auto ck = d.Open();
  REQUIRE(ck.ok());
  CHECK(ck->nvfp4());
  auto w = ck->LoadF32("mlp.w.weight", {2, 32});
  REQUIRE(w.ok());
  REQUIRE(w->size() == 64);
  CHECK((*w)[0] == 0.5f * 2.0f * 0.5f);
  CHECK((*w)[1] == 1.0f * 2.0f * 0.5f);
  CHECK((*w)[2] == 0.0f);
  CHECK((*w)[32 + 2] == -6.0f * 4.0f * 0.5f);
  CHECK((*w)[32 + 3] == -0.5f * 4.0f * 0.5f);
  auto slice = ck->LoadF32("mlp.w.weight", {2, 32}, model::Slice{1, 2, 2, 4});
  REQUIRE(slice.ok());
  CHECK(*slice == std::vector<float>{-12.0f, -1.0f});
  auto nv = ck->Nvfp4Data("mlp.w.weight", {2, 32});
  REQUIRE(nv.ok());
  CHECK(nv->packed != nullptr);
  CHECK(nv->global_scale == 0.5f);
  CHECK(nv->input_scale == 0.25f);
  // Not bf16, not FP8; a bf16 weight is no NVFP4 one.
  CHECK(*ck->Bf16Data("mlp.w.weight", {2, 32}) == nullptr);
  CHECK(ck->Fp8Data("mlp.w.weight", {2, 32})->bytes == nullptr);
  CHECK(ck->Nvfp4Data("mlp.v.weight", {1, 2})->packed == nullptr);
}

TEST_CASE("nvfp4: malformed pieces are refused naming what is wrong", "[nvfp4]") {
  auto refused = [](Nvfp4Dir& d, const std::string& part) {
    auto ck = d.Open();
    absl::Status st = ck.ok() ? ck->LoadF32("mlp.w.weight", {2, 32}).status() : ck.status();
    INFO(st.ToString());
    CHECK(!st.ok());
    CHECK(std::string(st.message()).find(part) != std::string::npos);
  };
  {
    Nvfp4Dir d;
    d.scales.shape = {2, 1};
    d.scales.bytes.resize(2);
    refused(d, "expected F8_E4M3 [2, 2]");
  }
  {
    Nvfp4Dir d;
    d.packed.shape = {2, 15};
    d.packed.bytes.resize(30);
    refused(d, "packs two values a byte into [2, 16]");
  }
  {
    Nvfp4Dir d;
    d.global = F32Tensor("mlp.w.weight_scale_2", {}, {0.0f});
    refused(d, "must be finite and > 0");
  }
  {
    Nvfp4Dir d;
    d.global = F32Tensor("mlp.w.weight_scale_2", {}, {NAN});
    refused(d, "must be finite and > 0");
  }
  {
    Nvfp4Dir d;
    d.global.name = "elsewhere";
    refused(d, "has no 'mlp.w.weight_scale_2'");
  }
  {
    Nvfp4Dir d;
    d.scales.bytes[3] = 0x7f;
    refused(d, "holds NaN at element 3");
  }
  {
    Nvfp4Dir d;
    d.config = "{}";
    refused(d, "does not say NVFP4");
  }
  {
    Nvfp4Dir d;
    d.config = R"({"quantization_config": {"quant_algo": "NVFP4", "group_size": 32}})";
    refused(d, "only groups of 16");
  }
}

TEST_CASE("nvfp4: ModelOpt's per-tensor FP8 layers beside NVFP4 ones decode with their one scale", "[nvfp4]") {
  Nvfp4Dir d;
  RawTensor fp8{"self_attn.o_proj.weight", DType::kF8E4M3, {2, 3}, std::string(6, '\0')};
  for (int i = 0; i < 6; ++i) fp8.bytes[i] = static_cast<char>(F32ToF8E4M3(static_cast<float>(i) - 2.0f));
  d.config = R"({"quantization_config": {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
      "quantized_layers": {"mlp.w": {"quant_algo": "NVFP4", "group_size": 16},
                           "self_attn.o_proj": {"quant_algo": "FP8"}}}})";
  WriteFile(d.dir.File("config.json"), d.config);
  WriteSafetensors(d.dir.File("model.safetensors"),
                   {d.packed, d.scales, d.global, fp8, F32Tensor("self_attn.o_proj.weight_scale", {}, {0.5f})});
  auto ck = model::Checkpoint::Open(d.dir.path());
  REQUIRE(ck.ok());
  CHECK(ck->nvfp4());
  auto w = ck->LoadF32("self_attn.o_proj.weight", {2, 3});
  REQUIRE(w.ok());
  CHECK(*w == std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f});
  CHECK(ck->LoadF32("mlp.w.weight", {2, 32}).ok());
}

}  // namespace
}  // namespace ferry
