// glm_moe_dsa on checkpoints no golden covers (other sizes, group-limited routing, indexer
// schedules with consecutive shared layers, tied embeddings, sharded files), against the
// independent float64 oracle in tests/testing/dsa_oracle.cc.
#include <cmath>
#include <random>
#include <string>

#include "model/families/causal_lm.h"
#include "model/families/generate.h"
#include "tests/catch.h"
#include "tests/testing/dsa_oracle.h"
#include "tests/testing/files.h"
#include "tests/testing/synthetic.h"

namespace ferry::model {
namespace {

void CheckAgainstOracle(const nlohmann::json& config, uint32_t seed, int shards, int64_t prompt_len) {
  ferry::testing::TempDir dir;
  ferry::testing::WriteSyntheticDsa(dir.path(), config, seed, shards);
  auto m = LoadCausalLM(dir.path());
  REQUIRE(m.ok());
  const int64_t V = (*m)->config().vocab_size;
  std::mt19937 rng(seed);
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (int32_t& t : prompt) t = static_cast<int32_t>(2 + rng() % (V - 2));
  GenerateOptions opt;
  opt.max_tokens = 6;
  opt.ignore_eos = true;
  opt.prefill_chunk = 5;
  auto gen = Generate(**m, prompt, opt, /*keep_logits=*/true);
  REQUIRE(gen.ok());
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), gen->tokens.begin(), gen->tokens.end());
  const std::vector<double> ref = ferry::testing::DsaOracleLogits(dir.path(), all);
  REQUIRE(gen->logits.size() == ref.size());
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_err = std::max(max_err, std::fabs(gen->logits[i] - ref[i]));
    max_ref = std::max(max_ref, std::fabs(ref[i]));
  }
  INFO("max |logit error| " << max_err << " over logits up to " << max_ref);
  CHECK(max_err < 1e-3);
  // Each generated token is the oracle's argmax at its position.
  for (size_t j = 0; j < gen->tokens.size(); ++j) {
    const double* row = ref.data() + (prompt.size() - 1 + j) * V;
    CHECK(std::max_element(row, row + V) - row == gen->tokens[j]);
  }
}

TEST_CASE("synthetic glm_moe_dsa: the small base config - sparse indexer", "[glm_moe_dsa][oracle]") {
  CheckAgainstOracle(ferry::testing::SmallDsaConfig(), 101, 1, 30);
}

TEST_CASE("synthetic glm_moe_dsa: group-limited routing - shared chain - sharded", "[glm_moe_dsa][oracle]") {
  nlohmann::json c = ferry::testing::SmallDsaConfig();
  c["n_group"] = 4;
  c["topk_group"] = 2;
  c.erase("indexer_types");
  c["index_topk_pattern"] = "FSSF";
  c.erase("mlp_layer_types");
  c["first_k_dense_replace"] = 2;
  CheckAgainstOracle(c, 202, 3, 27);
}

TEST_CASE("synthetic glm_moe_dsa: other widths - tied head - no shared expert", "[glm_moe_dsa][oracle]") {
  nlohmann::json c = ferry::testing::SmallDsaConfig();
  c["num_hidden_layers"] = 5;
  c["num_attention_heads"] = 2;
  c["num_key_value_heads"] = 2;
  c["qk_rope_head_dim"] = 4;
  c["qk_nope_head_dim"] = 12;
  c["v_head_dim"] = 20;
  c["kv_lora_rank"] = 24;
  c["index_topk"] = 5;
  c["index_n_heads"] = 3;
  c["n_shared_experts"] = 0;
  c["norm_topk_prob"] = false;
  c["num_experts_per_tok"] = 3;
  c["tie_word_embeddings"] = true;
  c["indexer_types"] = {"full", "shared", "full", "shared", "shared"};
  c["mlp_layer_types"] = {"sparse", "dense", "sparse", "sparse", "dense"};
  c["rope_parameters"]["rope_theta"] = 500.0;
  CheckAgainstOracle(c, 303, 2, 21);
}

}  // namespace
}  // namespace ferry::model
