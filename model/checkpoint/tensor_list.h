// Every tensor of a GLM-5.x checkpoint that the engine loads, named and shaped from config.json
// alone: what the weight accounting (model/checkpoint/weight_bytes.h) counts, what random
// checkpoints for tests and benchmarks are written from (tests/testing/synthetic.h,
// bench/random_checkpoint.h), and what tests/model/weight_bytes_test.cc holds to the real files.
//
// Not listed, because the engine does not load them: a multimodal checkpoint's vision tower
// (model.visual.*) and the MTP layers past num_hidden_layers (the checkpoints ship one; Ferry
// does not run it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/checkpoint/config.h"

namespace ferry::model {

struct ModelTensor {
  std::string name;             // the Hub's name, e.g. "model.layers.3.mlp.experts.7.up_proj.weight"
  std::vector<int64_t> shape;   // as stored in a bf16 checkpoint

  // How tensor parallelism splits it, as the loaders slice it (model/blocks/mla.cc, kda.cc,
  // ffn.cc): split_dim -1 means every rank holds all of it (embeddings, lm_head, norms, routers,
  // indexers, hyper-connections, the low-rank down projections); 0 or 1 means each of W ranks
  // holds shape[split_dim] / W of that dimension, whose split_units (attention heads, KDA heads,
  // or intermediate rows) must divide by W.
  int split_dim = -1;
  int64_t split_units = 0;

  // A Linear layer's weight [out_features, in_features]: what weight quantization (FP8, NVFP4)
  // applies to. False for embeddings, norms, biases, convolutions, the MoE router (a plain
  // parameter in transformers, not a Linear) and the hyper-connection and pooling parameters.
  bool linear = false;

  // The values a random checkpoint draws (tests and benchmarks): kNormal offset + scale x N(0, 1),
  // kLogUniform log U(offset, scale) (A_log). Linear weights N(0, 1.5 / sqrt(fan_in)), norms
  // 1 + 0.1 N(0, 1), so activations stay O(1) through the layers.
  enum Kind { kNormal, kLogUniform };
  Kind kind = kNormal;
  float scale = 0.0f;
  float offset = 0.0f;

  int64_t numel() const;
};

// Every tensor the engine loads for `c`, in a fixed order (random checkpoints draw in it).
// glm_moe_dsa: embeddings, final norm, lm_head (unless tied), then per layer its norms, MLA,
// indexer (full layers) and FFN. glm5_next: the same under model.language_model., with each
// layer's two hyper-connection sites and KDA in place of MLA on linear_attention layers (its
// low-rank gate width taken as linear_head_dim, as the published checkpoints have it).
std::vector<ModelTensor> ModelTensors(const ModelConfig& c);
std::vector<ModelTensor> DsaTensors(const ModelConfig& c);
std::vector<ModelTensor> NextTensors(const ModelConfig& c);

}  // namespace ferry::model
