// Random checkpoints of the real on-disk layout, for configurations no golden covers (other
// sizes, group counts, indexer schedules, sharding): every tensor model/checkpoint/tensor_list.h
// lists for the config, drawn in its order from the distribution it names.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model/checkpoint/config.h"

namespace ferry::testing {

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
