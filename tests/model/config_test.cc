#include "model/checkpoint/config.h"

#include <string>

#include "model/checkpoint/checkpoint.h"
#include "tests/catch.h"

namespace ferry::model {
namespace {

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

nlohmann::json TinyDsa() {
  auto j = ReadJsonFile(std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny/config.json");
  REQUIRE(j.ok());
  return *j;
}

std::string ErrorOf(const nlohmann::json& j) {
  auto c = ParseModelConfig(j, "config.json");
  REQUIRE_FALSE(c.ok());
  return std::string(c.status().message());
}

TEST_CASE("config: the tiny glm_moe_dsa checkpoint", "[config]") {
  auto c = ParseModelConfig(TinyDsa(), "config.json");
  REQUIRE(c.ok());
  CHECK(c->family == Family::kGlmMoeDsa);
  CHECK(c->weight_prefix == "model.");
  CHECK(c->vocab_size == 384);
  CHECK(c->hidden_size == 128);
  CHECK(c->num_layers == 4);
  CHECK(c->num_heads == 8);
  CHECK(c->q_lora_rank == 96);
  CHECK(c->kv_lora_rank == 64);
  CHECK(c->qk_nope_head_dim == 32);
  CHECK(c->qk_rope_head_dim == 16);
  CHECK(c->v_head_dim == 32);
  CHECK(c->latent_row_width() == 80);
  CHECK(c->rope_theta == 1000000.0);
  CHECK(c->rms_norm_eps == 1e-5f);
  CHECK(c->index_topk == 16);
  CHECK(c->index_head_dim == 32);
  CHECK(c->index_n_heads == 16);
  CHECK(c->n_routed_experts == 16);
  CHECK(c->num_experts_per_tok == 4);
  CHECK(c->routed_scaling_factor == 2.5f);
  CHECK(c->norm_topk_prob);
  CHECK(c->indexer_types == std::vector<IndexerType>{IndexerType::kFull, IndexerType::kFull,
                                                     IndexerType::kShared, IndexerType::kFull});
  CHECK(c->mlp_types == std::vector<MlpType>{MlpType::kDense, MlpType::kSparse, MlpType::kSparse,
                                             MlpType::kSparse});
  CHECK(c->eos_token_ids == std::vector<int32_t>{1});
  CHECK(c->swiglu_limit == 0.0f);
}

TEST_CASE("config: the full-size GLM-5.2 and GLM-5.3-Flash configs", "[config]") {
  auto j52 = ReadJsonFile(std::string(FERRY_TEST_DATA_DIR) + "/configs/glm-5.2.config.json");
  REQUIRE(j52.ok());
  auto c52 = ParseModelConfig(*j52, "glm-5.2.config.json");
  REQUIRE(c52.ok());
  CHECK(c52->num_layers == 78);
  CHECK(c52->rope_theta == 8000000.0);
  CHECK(c52->latent_row_width() == 576);
  CHECK(c52->indexer_types[3] == IndexerType::kShared);
  CHECK(c52->indexer_types[6] == IndexerType::kFull);
  CHECK(c52->mlp_types[2] == MlpType::kDense);
  CHECK(c52->mlp_types[3] == MlpType::kSparse);

  auto jf = ReadJsonFile(std::string(FERRY_TEST_DATA_DIR) + "/configs/glm-5.3-flash.config.json");
  REQUIRE(jf.ok());
  auto cf = ParseModelConfig(*jf, "glm-5.3-flash.config.json");
  REQUIRE(cf.ok());
  CHECK(cf->family == Family::kGlm5Next);
  CHECK(cf->weight_prefix == "model.language_model.");
  CHECK(cf->num_layers == 45);
  CHECK(cf->qk_rope_head_dim == 0);
  CHECK(cf->index_kpool == 4);
  CHECK(cf->swiglu_limit == 10.0f);
  CHECK(cf->linear_num_heads == 64);
  CHECK(cf->hc_mult == 4);
  CHECK(cf->layer_types[3] == AttentionType::kMla);
  CHECK(cf->layer_types[4] == AttentionType::kKda);
}

TEST_CASE("config: derived schedules", "[config]") {
  nlohmann::json j = TinyDsa();
  j.erase("indexer_types");
  j["index_topk_pattern"] = "FSSF";
  j.erase("mlp_layer_types");
  j["first_k_dense_replace"] = 2;
  auto c = ParseModelConfig(j, "config.json");
  REQUIRE(c.ok());
  CHECK(c->indexer_types == std::vector<IndexerType>{IndexerType::kFull, IndexerType::kShared,
                                                     IndexerType::kShared, IndexerType::kFull});
  CHECK(c->mlp_types == std::vector<MlpType>{MlpType::kDense, MlpType::kDense, MlpType::kSparse,
                                             MlpType::kSparse});
  j["rope_theta"] = 5.0;  // rope_parameters still wins
  CHECK(ParseModelConfig(j, "config.json")->rope_theta == 1000000.0);
  j.erase("rope_parameters");
  CHECK(ParseModelConfig(j, "config.json")->rope_theta == 5.0);
}

TEST_CASE("config: bad configs get errors naming the field", "[config]") {
  nlohmann::json j = TinyDsa();
  SECTION("unknown architecture") {
    j["model_type"] = "llama";
    auto c = ParseModelConfig(j, "config.json");
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == absl::StatusCode::kUnimplemented);
    CHECK(Contains(std::string(c.status().message()), "model_type is 'llama'"));
  }
  SECTION("missing model_type") {
    j.erase("model_type");
    CHECK(Contains(ErrorOf(j), "model_type is missing"));
  }
  SECTION("missing field") {
    j.erase("kv_lora_rank");
    CHECK(Contains(ErrorOf(j), "field 'kv_lora_rank' is missing"));
  }
  SECTION("mistyped field") {
    j["hidden_size"] = "128";
    CHECK(Contains(ErrorOf(j), "field 'hidden_size' must be an integer, got \"128\""));
  }
  SECTION("zero field") {
    j["num_attention_heads"] = 0;
    CHECK(Contains(ErrorOf(j), "field 'num_attention_heads' must be positive, got 0"));
  }
  SECTION("layer list of the wrong length") {
    j["indexer_types"] = {"full", "full"};
    CHECK(Contains(ErrorOf(j), "field 'indexer_types' must list one entry per layer (4)"));
  }
  SECTION("unknown layer kind") {
    j["mlp_layer_types"] = {"dense", "sparse", "huge", "sparse"};
    CHECK(Contains(ErrorOf(j), "field 'mlp_layer_types' entry 2 is \"huge\""));
  }
  SECTION("shared before any full layer") {
    j["indexer_types"] = {"shared", "full", "full", "full"};
    CHECK(Contains(ErrorOf(j), "makes layer 0 share the top-k of a full indexer layer, but none comes before it"));
  }
  SECTION("n_group that does not divide the experts") {
    j["n_group"] = 3;
    CHECK(Contains(ErrorOf(j), "field 'n_group' (3) does not divide n_routed_experts (16)"));
  }
  SECTION("top-k beyond the kept groups") {
    j["n_group"] = 4;
    j["topk_group"] = 1;
    j["num_experts_per_tok"] = 5;
    CHECK(Contains(ErrorOf(j), "field 'num_experts_per_tok' (5) exceeds the 4 experts"));
  }
  SECTION("unsupported rope scaling") {
    j["rope_parameters"]["rope_type"] = "yarn";
    auto c = ParseModelConfig(j, "config.json");
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == absl::StatusCode::kUnimplemented);
    CHECK(Contains(std::string(c.status().message()), "rope_type' is 'yarn'"));
  }
  SECTION("grouped kv heads") {
    j["num_key_value_heads"] = 2;
    CHECK(Contains(ErrorOf(j), "MLA needs it equal to num_attention_heads (8)"));
  }
  SECTION("an epsilon that is not positive") {
    j["rms_norm_eps"] = -1;
    CHECK(Contains(ErrorOf(j), "field 'rms_norm_eps' must be a finite number > 0, got -1"));
  }
  SECTION("an end-of-sequence token outside the vocabulary") {
    j["eos_token_id"] = {1, 384};
    CHECK(Contains(ErrorOf(j), "field 'eos_token_id' names token 384, outside the vocabulary [0, 384)"));
  }
  SECTION("a token id past int32") {
    j["bos_token_id"] = int64_t{1} << 40;
    CHECK(Contains(ErrorOf(j), "field 'bos_token_id' must hold token ids, got 1099511627776"));
  }
  SECTION("a context past int32") {
    j["max_position_embeddings"] = int64_t{1} << 62;
    CHECK(Contains(ErrorOf(j), "field 'max_position_embeddings' is 4611686018427387904; at most 2147483647"));
  }
  SECTION("glm5_next with unbounded or non-positive mHC fields") {
    auto ck = Checkpoint::Open(std::string(FERRY_TEST_DATA_DIR) + "/glm5next-tiny");
    REQUIRE(ck.ok());
    nlohmann::json n = ck->config_json();
    n["text_config"]["hc_sinkhorn_iters"] = 1000000000;
    CHECK(Contains(ErrorOf(n), "field 'text_config.hc_sinkhorn_iters' is 1000000000; at most 1000"));
    n = ck->config_json();
    n["text_config"]["hc_eps"] = -1;
    CHECK(Contains(ErrorOf(n), "field 'text_config.hc_eps' must be a finite number > 0, got -1"));
  }
  SECTION("glm5_next without text_config") {
    nlohmann::json n = {{"model_type", "glm5_next"}};
    CHECK(Contains(ErrorOf(n), "field 'text_config' is missing"));
  }
}

}  // namespace
}  // namespace ferry::model
