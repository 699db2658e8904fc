// Random checkpoints of the real on-disk layout, for configurations no golden covers (other
// sizes, group counts, indexer schedules, sharding).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/checkpoint/config.h"

namespace ferry::testing {

// One tensor of a synthetic checkpoint: its Hub name, its shape, and the distribution its
// values are drawn from: kNormal offset + scale * N(0, 1); kLogUniform log U(offset, scale)
// (A_log). Linear weights are N(0, 1.5 / sqrt(fan_in)), norm weights 1 + 0.1 N(0, 1).
struct SyntheticTensor {
  enum Kind { kNormal, kLogUniform };
  std::string name;
  std::vector<int64_t> shape;
  Kind kind = kNormal;
  float scale = 0.0f;
  float offset = 0.0f;
  int64_t numel() const;
};

// Every tensor WriteSyntheticDsa / WriteSyntheticNext writes for `c`, in the order they draw
// them; without values, for a caller that fills them its own way (bench/roofline builds real
// widths in memory, far faster than drawing normals for hundreds of gigabytes).
std::vector<SyntheticTensor> SyntheticDsaTensors(const model::ModelConfig& c);
std::vector<SyntheticTensor> SyntheticNextTensors(const model::ModelConfig& c);

// A small glm_moe_dsa config.json to modify: 4 layers, hidden 64, 4 heads, 16 experts.
nlohmann::json SmallDsaConfig();

// Writes config.json and random bf16 weights for every tensor the config implies into `dir`,
// as model.safetensors, or as `shards` files plus model.safetensors.index.json when shards > 1.
// Scales follow transformers-style init so activations stay O(1) through the layers.
void WriteSyntheticDsa(const std::string& dir, const nlohmann::json& config, uint32_t seed, int shards = 1);

// A small glm5_next config.json (text_config inside): 6 layers (KDA, KDA, MLA, KDA, MLA, MLA),
// hidden 64, 4 MLA heads, 2 KDA heads of 16, 4 streams, kpool 4, top-k 8, clamp 10.
nlohmann::json SmallNextConfig();

// As WriteSyntheticDsa, for glm5_next (Hub names under model.language_model.; no vision tower).
void WriteSyntheticNext(const std::string& dir, const nlohmann::json& config, uint32_t seed);

}  // namespace ferry::testing
