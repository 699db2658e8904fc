// The tiny reference checkpoints (tests/data) as the family tests load them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/config.h"
#include "model/golden/golden.h"
#include "tests/catch.h"

namespace ferry::testing {

// Loads the checkpoint at `dir` as family F (GlmMoeDsa or Glm5Next), failing the test on error.
template <typename F>
std::unique_ptr<F> LoadAs(const std::string& dir) {
  auto ck = model::Checkpoint::Open(dir);
  REQUIRE(ck.ok());
  auto cfg = model::ParseModelConfig(ck->config_json(), ck->config_path());
  REQUIRE(cfg.ok());
  auto m = F::Load(*ck, *cfg);
  REQUIRE(m.ok());
  return std::move(*m);
}

// The configuration of the checkpoint at `dir`.
inline model::ModelConfig ConfigOf(const std::string& dir) {
  auto ck = model::Checkpoint::Open(dir);
  REQUIRE(ck.ok());
  auto cfg = model::ParseModelConfig(ck->config_json(), ck->config_path());
  REQUIRE(cfg.ok());
  return *cfg;
}

// The golden prompts of the checkpoint at `dir` (glm-dsa-tiny and glm5next-tiny: three).
inline std::vector<model::GoldenPrompt> GoldensOf(const std::string& dir) {
  auto g = model::ReadGolden(dir + "/golden.safetensors");
  REQUIRE(g.ok());
  REQUIRE_FALSE(g->empty());
  return *g;
}

}  // namespace ferry::testing
