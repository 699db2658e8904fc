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

class RandomCheckpoint {
 public:
  // REQUIRES: a CUDA device (the pool is drawn there). `label` names it in messages. With
  // `fp8_experts`, the routed and shared experts' matrices are stored as an FP8 release stores
  // them instead (E4M3 windows of a second random pool, uniform in [-173, 173], each with a
  // float32 scale a 128 x 128 block, weight_block_size [128, 128] in the config).
  static absl::StatusOr<std::unique_ptr<RandomCheckpoint>> Create(const nlohmann::json& config, uint64_t seed,
                                                                  const std::string& label, bool fp8_experts = false);
  ~RandomCheckpoint();
  RandomCheckpoint(const RandomCheckpoint&) = delete;
  RandomCheckpoint& operator=(const RandomCheckpoint&) = delete;

  const model::Checkpoint& checkpoint() const { return ck_; }
  const model::ModelConfig& config() const { return config_; }
  // Whether Create stored the experts in FP8.
  bool fp8_experts() const { return pool8_ != nullptr; }
  // Bytes of host memory the pools take.
  int64_t pool_bytes() const { return pool_elems_ * 2 + pool8_bytes_; }

 private:
  RandomCheckpoint() = default;
  model::ModelConfig config_;
  uint16_t* pool_ = nullptr;  // page-locked
  int64_t pool_elems_ = 0;
  uint8_t* pool8_ = nullptr;  // page-locked E4M3 (fp8_experts)
  std::vector<float> scales_;  // every FP8 matrix's block scales are windows of it
  int64_t pool8_bytes_ = 0;
  std::vector<std::vector<uint16_t>> small_;  // the individually drawn tensors
  model::Checkpoint ck_;
};

}  // namespace ferry::bench
