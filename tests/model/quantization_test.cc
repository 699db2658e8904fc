// model/checkpoint/quantization.h: which modules an exclusion pattern names, and each release
// style's Linear weights read into their formats (the published GLM-5.3-Flash NVFP4 config, a
// MIXED_PRECISION map, transformers' FP8), with malformed blocks refused naming the field.
#include "model/checkpoint/quantization.h"

#include <string>

#include "model/checkpoint/checkpoint.h"
#include "tests/catch.h"

namespace ferry::model {
namespace {

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

QuantizationScheme Parsed(const nlohmann::json& block) {
  auto q = QuantizationScheme::Parse(&block, "test");
  REQUIRE(q.ok());
  return *q;
}

TEST_CASE("quantization: an exclusion pattern names a module or what holds it as ModelOpt globs do",
          "[quantization]") {
  CHECK(ModuleMatches("lm_head", "lm_head"));
  CHECK(ModuleMatches("model.visual*", "model.visual.blocks.0.mlp.up_proj"));
  CHECK(ModuleMatches("model.visual", "model.visual.blocks.0.mlp.up_proj"));
  CHECK(ModuleMatches("model.layers.1.self_attn*", "model.layers.1.self_attn.q_b_proj"));
  CHECK_FALSE(ModuleMatches("model.layers.1.self_attn*", "model.layers.10.self_attn.q_b_proj"));
  CHECK(ModuleMatches("*.mlp.gate", "model.layers.3.mlp.gate"));
  CHECK_FALSE(ModuleMatches("*.mlp.gate", "model.layers.3.mlp.gate_proj"));
  CHECK(ModuleMatches("model.layers.?.mlp.shared_experts*", "model.layers.3.mlp.shared_experts.up_proj"));
  CHECK_FALSE(ModuleMatches("model.layers.?.mlp.shared_experts*", "model.layers.13.mlp.shared_experts.up_proj"));
  // A name part is not a module: the whole name (or a whole parent) must match.
  CHECK_FALSE(ModuleMatches("mlp.gate", "model.layers.3.mlp.gate"));
  CHECK_FALSE(ModuleMatches("lm_head", "lm_head_extra"));
}

TEST_CASE("quantization: the published GLM-5.3-Flash NVFP4 config quantizes the routed experts and dense MLPs",
          "[quantization]") {
  const std::string path = std::string(FERRY_TEST_DATA_DIR) + "/configs/glm-5.3-flash-nvfp4.config.json";
  auto json = ReadJsonFile(path);
  REQUIRE(json.ok());
  auto q = QuantizationScheme::Parse(QuantizationScheme::Block(*json), path);
  REQUIRE(q.ok());
  CHECK(q->known());
  CHECK(q->nvfp4());
  CHECK(q->input_scales());
  const std::string L = "model.language_model.layers.";
  CHECK(q->FormatOf(L + "3.mlp.experts.287.down_proj", 2048) == WeightFormat::kNvfp4);
  CHECK(q->FormatOf(L + "0.mlp.gate_proj", 4096) == WeightFormat::kNvfp4);
  CHECK(q->FormatOf(L + "44.mlp.shared_experts.up_proj", 4096) == WeightFormat::kBf16);
  CHECK(q->FormatOf(L + "44.mlp.gate", 4096) == WeightFormat::kBf16);
  CHECK(q->FormatOf(L + "5.self_attn.q_proj", 4096) == WeightFormat::kBf16);
  CHECK(q->FormatOf(L + "3.self_attn.indexer.wq_b", 1536) == WeightFormat::kBf16);
  CHECK(q->FormatOf("lm_head", 4096) == WeightFormat::kBf16);
  // A width that is not whole groups of 16 stays bf16.
  CHECK(q->FormatOf(L + "3.mlp.experts.0.up_proj", 100) == WeightFormat::kBf16);
  CHECK(q->Describe() == "NVFP4 (modelopt): Linear weights nvfp4, 132 exclusion patterns, static input scales");
}

TEST_CASE("quantization: MIXED_PRECISION takes each module's format from quantized_layers", "[quantization]") {
  const QuantizationScheme q = Parsed({{"quant_method", "modelopt"},
                                       {"quant_algo", "MIXED_PRECISION"},
                                       {"exclude_modules", {"model.layers.1.mlp.experts.2*"}},
                                       {"quantized_layers",
                                        {{"model.layers.1.mlp.experts", {{"quant_algo", "NVFP4"}, {"group_size", 16}}},
                                         {"model.layers.*.self_attn.o_proj", {{"quant_algo", "FP8"}}}}}});
  REQUIRE(q.known());
  CHECK(q.nvfp4());
  CHECK(q.FormatOf("model.layers.1.mlp.experts.7.up_proj", 64) == WeightFormat::kNvfp4);
  CHECK(q.FormatOf("model.layers.1.mlp.experts.2.up_proj", 64) == WeightFormat::kBf16);  // excluded
  CHECK(q.FormatOf("model.layers.0.mlp.experts.7.up_proj", 64) == WeightFormat::kBf16);  // not named
  CHECK(q.FormatOf("model.layers.4.self_attn.o_proj", 64) == WeightFormat::kFp8Tensor);
}

TEST_CASE("quantization: transformers' FP8 is block-scaled but for modules_to_not_convert", "[quantization]") {
  const QuantizationScheme q =
      Parsed({{"quant_method", "fp8"}, {"weight_block_size", {64, 32}}, {"modules_to_not_convert", {"lm_head"}}});
  CHECK(q.FormatOf("model.layers.0.self_attn.q_a_proj", 100) == WeightFormat::kFp8Block);
  CHECK(q.FormatOf("lm_head", 100) == WeightFormat::kBf16);
  CHECK(q.fp8_block_rows() == 64);
  CHECK(q.fp8_block_cols() == 32);
  CHECK_FALSE(q.input_scales());
  CHECK(QuantizationScheme().FormatOf("lm_head", 64) == WeightFormat::kBf16);
  CHECK(QuantizationScheme().Describe() == "bf16 (no quantization_config)");
}

TEST_CASE("quantization: an unknown method is not an error but its formats are unknown", "[quantization]") {
  const QuantizationScheme q = Parsed({{"quant_method", "compressed-tensors"}, {"ignore", {"lm_head"}}});
  CHECK_FALSE(q.known());
  CHECK(Contains(q.Describe(), "compressed-tensors: a method whose weight formats this reader does not know"));
}

TEST_CASE("quantization: malformed blocks are refused naming the field", "[quantization]") {
  auto refused = [](const nlohmann::json& block, const std::string& what) {
    auto q = QuantizationScheme::Parse(&block, "cfg.json");
    REQUIRE_FALSE(q.ok());
    INFO(q.status().message());
    CHECK(q.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(std::string(q.status().message()), what));
  };
  refused({{"quant_algo", "NVFP4"}, {"ignore", "lm_head"}},
          "cfg.json: quantization_config.ignore must be a list of module names, got \"lm_head\"");
  refused({{"quant_algo", "NVFP4"}, {"exclude_modules", {"lm_head", 3}}}, "exclude_modules must be a list");
  refused({{"quant_algo", "NVFP4"}, {"config_groups", {{"group_0", {{"weights", {{"group_size", 32}}}}}}}},
          "NVFP4 with group_size 32; only groups of 16 exist");
  refused({{"quant_algo", "MIXED_PRECISION"}, {"quantized_layers", {1, 2}}},
          "quantized_layers must map module names to their quantization");
  refused({{"quant_method", "fp8"}, {"weight_block_size", {128}}}, "weight_block_size must be two positive integers");
}

}  // namespace
}  // namespace ferry::model
