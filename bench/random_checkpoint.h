// A checkpoint at a real GLM-5.x config's widths with random bf16 weights, held in host memory
// (model::Checkpoint::FromHost), for benchmarks: a GLM-5.2 MoE layer is about 19 GB of weights,
// which a real-format file would take minutes to write and the float32 loader minutes to read.
//
// Every tensor model/checkpoint/tensor_list.h lists for the config is present with its real name,
// shape and dtype (bf16). The Linear weights (2-D, zero-mean) are windows of one random pool in
// page-locked memory at different offsets (values uniform with standard deviation 0.02,
// transformers' initializer_range; drawn on the device), so the model loads them with one
// host-to-device copy each (model/cuda LoadMatrix); norms, biases and the KDA vectors are drawn
// per tensor as tensor_list.h describes. Distinct tensors therefore hold different values (shifted
// windows of the pool), never zeros.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/config.h"

namespace ferry::bench {

// `config` (a config.json of either family) with only `layers` kept, in that order: the per-layer
// lists (layer_types, indexer_types, mlp_layer_types) are picked from, num_hidden_layers set.
// INVALID_ARGUMENT for a layer outside the config.
absl::StatusOr<nlohmann::json> KeepLayers(nlohmann::json config, const std::vector<int>& layers);

// How the routed (and, for FP8, the shared) experts' matrices are stored.
enum class ExpertFormat {
  kBf16,
  // As the FP8 releases: E4M3 windows of a second random pool, uniform in [-173, 173], each with a
  // float32 scale a 128 x 128 block (weight_block_size [128, 128]); shared experts too.
  kFp8,
  // As ModelOpt's NVFP4 release: the routed experts and the dense layers' MLPs (its shared
  // experts stay bf16), codes
  // uniform over the 16 E2M1 values, E4M3 group scales in [0.625, 1.5], a global scale making the
  // standard deviation the bf16 pool's; quantization_config MIXED_PRECISION naming each.
  kNvfp4,
};
const char* ExpertFormatName(ExpertFormat f);  // "bf16", "FP8", "NVFP4"

class RandomCheckpoint {
 public:
  // REQUIRES: a CUDA device (the pool is drawn there). `label` names it in messages.
  static absl::StatusOr<std::unique_ptr<RandomCheckpoint>> Create(const nlohmann::json& config, uint64_t seed,
                                                                  const std::string& label,
                                                                  ExpertFormat experts = ExpertFormat::kBf16);
  ~RandomCheckpoint();
  RandomCheckpoint(const RandomCheckpoint&) = delete;
  RandomCheckpoint& operator=(const RandomCheckpoint&) = delete;

  const model::Checkpoint& checkpoint() const { return ck_; }
  const model::ModelConfig& config() const { return config_; }
  ExpertFormat experts() const { return experts_; }
  // Bytes of host memory the pools take.
  int64_t pool_bytes() const { return pool_elems_ * 2 + pool8_bytes_; }

 private:
  RandomCheckpoint() = default;
  model::ModelConfig config_;
  uint16_t* pool_ = nullptr;  // page-locked
  int64_t pool_elems_ = 0;
  ExpertFormat experts_ = ExpertFormat::kBf16;
  uint8_t* pool8_ = nullptr;  // page-locked bytes: E4M3 (FP8 experts) or E2M1 code pairs (NVFP4)
  std::vector<float> scales_;  // every FP8 matrix's block scales are windows of it
  std::vector<uint8_t> nvfp4_scales_;  // every NVFP4 matrix's group scales are windows of it
  float nvfp4_global_ = 1.0f;
  int64_t pool8_bytes_ = 0;
  std::vector<std::vector<uint16_t>> small_;  // the individually drawn tensors
  model::Checkpoint ck_;
};

}  // namespace ferry::bench
