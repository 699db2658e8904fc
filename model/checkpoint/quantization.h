// How a checkpoint stores its weights, read from config.json's quantization_config (or, when it
// has none, hf_quant_config.json's "quantization", as ModelOpt's older releases put it). One
// reader for the checkpoint loader (FP8 block sizes, whether NVFP4 is declared) and for the
// weight accounting, which must say each tensor's format from the config alone:
//
//   quant_method "fp8" (the GLM-5 / DeepSeek FP8 releases): every Linear weight F8_E4M3 with a
//     float32 scale per weight_block_size block ([128, 128] by default);
//   quant_algo "NVFP4" (ModelOpt): every Linear weight NVFP4 (common/nvfp4.h), group_size 16;
//     "W4A16_NVFP4" the same weights without activation scales (weight-only);
//   quant_algo "FP8" (ModelOpt): every Linear weight F8_E4M3 with one float32 scale;
//   quant_algo "MIXED_PRECISION" (ModelOpt): the modules quantized_layers names, each in its
//     entry's quant_algo (NVFP4 or FP8), every other Linear weight bf16;
//   no quantization_config: bf16.
// In each, the modules an exclusion list names stay bf16: exclude_modules (hf_quant_config.json),
// ignore (ModelOpt's config.json), modules_to_not_convert / ignored_layers (transformers' FP8).
// Every tensor that is not a Linear weight (embeddings, norms, biases, routers) stays as stored.
//
// Module names are a tensor's name less ".weight" ("model.layers.3.mlp.experts.7.up_proj").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry::model {

enum class WeightFormat { kBf16, kFp8Block, kFp8Tensor, kNvfp4 };
inline constexpr int kWeightFormats = 4;
// "bf16", "fp8 (block scales)", "fp8 (a scale a tensor)", "nvfp4".
const char* WeightFormatName(WeightFormat f);

// Whether `pattern` names module `module` as ModelOpt's exclusion lists do: a glob ('*' any run
// of characters, '?' any one) matched against the whole name of the module or of a module that
// holds it ("model.visual" and "model.visual*" both name "model.visual.blocks.0.mlp.up_proj";
// "model.layers.1.self_attn*" names nothing of layer 10).
bool ModuleMatches(absl::string_view pattern, absl::string_view module);

// How a model runs the weights a checkpoint stores in NVFP4.
//  kW4A16 (default): weights dequantized exactly to float32, activations as computed (float32 on
//    the CPU, bf16 on CUDA): NVFP4's weight-only numerics.
//  kW4A4: the MLP and expert projections stored in NVFP4 with an input_scale run as the FP4
//    tensor cores of a GB10 or a Blackwell GPU run them (vLLM's and TensorRT-LLM's numerics for
//    ModelOpt NVFP4 releases): each input row quantized to NVFP4 under the projection's input
//    scale (gate and up share the larger of their two; in an MoE layer every expert, the shared
//    one included, shares the largest of the layer's, as grouped FP4 MoE kernels quantize a
//    token once for all its experts), the product summed a group at a time.
enum class Nvfp4Numerics { kW4A16, kW4A4 };
// "w4a16" / "w4a4"; ParseNvfp4Numerics: INVALID_ARGUMENT naming the value otherwise.
const char* Nvfp4NumericsName(Nvfp4Numerics n);
absl::StatusOr<Nvfp4Numerics> ParseNvfp4Numerics(const std::string& name);

class QuantizationScheme {
 public:
  QuantizationScheme() = default;  // bf16 everywhere

  // The block that describes quantization: config's quantization_config, else hf_quant's
  // "quantization"; nullptr when neither is an object.
  static const nlohmann::json* Block(const nlohmann::json& config, const nlohmann::json& hf_quant = nullptr);

  // Reads `block` (nullptr: no quantization). `where` names it in messages.
  // Errors: INVALID_ARGUMENT naming the field for weight_block_size that is not two positive
  // integers, NVFP4 with a group_size other than 16, an exclusion list or quantized_layers of
  // the wrong type. A quant_method or quant_algo it does not know is no error (the loader
  // decides by the tensors' dtypes): known() is false then.
  static absl::StatusOr<QuantizationScheme> Parse(const nlohmann::json* block, const std::string& where);

  // Whether every Linear weight's format follows from the config (false for a method this
  // reader does not know, e.g. compressed-tensors or AWQ).
  bool known() const { return known_; }
  // The format of the Linear weight of `module` with `cols` input features. An NVFP4 weight
  // needs cols to be a multiple of 16; one that is not stays bf16, as ModelOpt leaves it.
  // REQUIRES: known().
  WeightFormat FormatOf(absl::string_view module, int64_t cols) const;

  // Whether NVFP4 is declared for some module (the whole model or a quantized_layers entry).
  bool nvfp4() const { return nvfp4_; }
  int64_t fp8_block_rows() const { return fp8_block_rows_; }
  int64_t fp8_block_cols() const { return fp8_block_cols_; }
  // Whether every NVFP4 and per-tensor FP8 weight also stores its activations' static scale
  // (X.input_scale, one float32): ModelOpt's config_groups say so with input_activations that
  // are not dynamic.
  bool input_scales() const { return input_scales_; }
  // One line: "ModelOpt NVFP4, 132 exclusion patterns" / "bf16 (no quantization_config)".
  std::string Describe() const;

 private:
  // A MIXED_PRECISION module's format from quantized_layers (bf16 when no entry names it).
  WeightFormat LayerFormat(absl::string_view module) const;

  bool known_ = true;
  std::string method_;  // quant_method / quant_algo as given, for Describe
  WeightFormat base_ = WeightFormat::kBf16;  // an unexcluded Linear weight outside quantized_layers
  bool mixed_ = false;                       // MIXED_PRECISION: quantized_layers decides
  // quantized_layers: entries that name one module, and those with wildcards.
  std::map<std::string, WeightFormat, std::less<>> exact_layers_;
  std::vector<std::pair<std::string, WeightFormat>> layers_;
  std::vector<std::string> excluded_;
  bool nvfp4_ = false;
  bool input_scales_ = false;
  int64_t fp8_block_rows_ = 128;
  int64_t fp8_block_cols_ = 128;
};

}  // namespace ferry::model
