// model/golden.h: the teacher-forced check (CheckGoldenPromptForced) that the bf16 CUDA backend
// uses, on the CPU reference, where it must agree with the exact greedy check.
#include "model/golden.h"

#include <string>

#include "model/glm_moe_dsa.h"
#include "tests/catch.h"
#include "tests/testing/tiny_models.h"

namespace ferry::model {
namespace {

const std::string kDir = std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny";

TEST_CASE("the teacher-forced golden check agrees with the greedy one on the CPU reference", "[golden]") {
  auto m = ferry::testing::LoadAs<GlmMoeDsa>(kDir);
  for (const GoldenPrompt& g : ferry::testing::GoldensOf(kDir)) {
    auto greedy = CheckGoldenPrompt(*m, g, 1e-3f, 7);
    auto forced = CheckGoldenPromptForced(*m, g, 1e-3f, 7);
    REQUIRE(greedy.ok());
    REQUIRE(forced.ok());
    INFO(g.name);
    CHECK(forced->passed);
    CHECK(forced->tokens_equal);
    CHECK(forced->generated == g.greedy);
    CHECK(forced->near_tie_flips == 0);
    // The same positions through the same paths: the same errors.
    CHECK(forced->max_prefill_error == greedy->max_prefill_error);
    CHECK(forced->max_decode_error == greedy->max_decode_error);
  }
}

TEST_CASE("the teacher-forced golden check fails a wrong token or a logit past the tolerance", "[golden]") {
  auto m = ferry::testing::LoadAs<GlmMoeDsa>(kDir);
  const GoldenPrompt g = ferry::testing::GoldensOf(kDir)[0];
  SECTION("a tolerance below the float32 rounding") {
    auto r = CheckGoldenPromptForced(*m, g, 1e-9f);
    REQUIRE(r.ok());
    CHECK_FALSE(r->passed);
    CHECK(r->tokens_equal);
  }
  SECTION("a golden token the model would not pick, far from a tie") {
    GoldenPrompt wrong = g;
    wrong.greedy[3] = (wrong.greedy[3] + 1) % static_cast<int32_t>(wrong.vocab);
    auto r = CheckGoldenPromptForced(*m, wrong, 1e-3f);
    REQUIRE(r.ok());
    CHECK_FALSE(r->tokens_equal);
    CHECK(r->near_tie_flips == 0);
    CHECK_FALSE(r->passed);
  }
  SECTION("a vocabulary that is not the model's") {
    GoldenPrompt other = g;
    other.vocab += 1;
    CHECK_FALSE(CheckGoldenPromptForced(*m, other, 1e-3f).ok());
  }
}

}  // namespace
}  // namespace ferry::model
