// model/golden/golden.h: the teacher-forced check (CheckGoldenPromptForced) that the bf16 CUDA backend
// uses, on the CPU reference, where it must agree with the exact greedy check; and the
// reference's recorded selections (ReadGolden, ReferenceTape, CheckGoldenPinned).
#include "model/golden/golden.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "model/families/glm5_next.h"
#include "model/families/glm_moe_dsa.h"
#include "tests/catch.h"
#include "tests/testing/files.h"
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

// The golden's selection of `site` at `layer`.
GoldenSelection& SelectionAt(GoldenPrompt& g, DecisionSite site, int64_t layer) {
  for (GoldenSelection& s : g.selections) {
    if (s.site == site && s.layer == layer) return s;
  }
  FAIL("no selection of that site at layer " << layer);
  return g.selections.front();
}

// Replaces the expert in `slot` of row `t` (ascending ids) by the lowest one the row does not hold.
void SwapExpert(GoldenSelection& sel, int64_t t, int64_t slot, int32_t n_experts) {
  int32_t* row = sel.ids.data() + t * sel.width;
  std::vector<int32_t> ids(row, row + sel.width);
  for (int32_t e = 0; e < n_experts; ++e) {
    if (std::find(ids.begin(), ids.end(), e) == ids.end()) {
      ids[static_cast<size_t>(slot)] = e;
      break;
    }
  }
  std::sort(ids.begin(), ids.end());
  std::copy(ids.begin(), ids.end(), row);
}

TEST_CASE("goldens made by scripts/reference_goldens.py hold the reference's selections of every layer", "[golden]") {
  for (const char* name : {"glm-dsa-tiny", "glm5next-tiny", "glm5next-kpool8"}) {
    const std::string dir = std::string(FERRY_TEST_DATA_DIR) + "/" + name;
    INFO(dir);
    auto config = ferry::testing::ConfigOf(dir);
    for (const GoldenPrompt& g : ferry::testing::GoldensOf(dir)) {
      const int64_t rows = static_cast<int64_t>(g.ids.size() + g.greedy.size());
      int64_t indexers = 0, routers = 0;
      for (int64_t l = 0; l < config.num_layers; ++l) {
        indexers += config.layer_types[l] == AttentionType::kMla && config.indexer_types[l] == IndexerType::kFull;
        routers += config.mlp_types[l] == MlpType::kSparse;
      }
      CHECK(static_cast<int64_t>(g.selections.size()) == indexers + routers);
      for (const GoldenSelection& s : g.selections) {
        CHECK(static_cast<int64_t>(s.ids.size()) == rows * s.width);
        CHECK(static_cast<int64_t>(s.margins.size()) == rows);
      }
      auto tape = ReferenceTape(config, g);
      REQUIRE(tape.ok());
      CHECK(tape->steps() == 1);
      CHECK(tape->entries() == indexers + routers);
    }
  }
}

TEST_CASE("the pinned check replays the reference's selections and fails an own choice beyond a near tie", "[golden]") {
  auto m = ferry::testing::LoadAs<GlmMoeDsa>(kDir);
  GoldenPrompt g = ferry::testing::GoldensOf(kDir)[2];
  const int64_t n = static_cast<int64_t>(g.ids.size());
  SECTION("as recorded: every own choice agrees, the check passes in any prefill pieces") {
    for (int64_t chunk : {0, 7}) {
      for (bool forced : {false, true}) {
        auto r = CheckGoldenPinned(*m, g, 1e-3f, forced, /*gate_selections=*/true, chunk);
        REQUIRE(r.ok());
        CHECK(r->pinned);
        CHECK(r->passed);
        CHECK(r->selections.decisions > 0);
        CHECK(r->selections_beyond_tie == 0);
        CHECK(r->selections.positions == n + static_cast<int64_t>(g.greedy.size()));
      }
    }
  }
  // The last MoE layer at the last position: another expert recorded there is a choice this
  // engine did not make, and pinning it in moves nothing after it (no later layer or position).
  GoldenSelection& sel = SelectionAt(g, DecisionSite::kMoeExperts, 3);
  const int64_t t = n + static_cast<int64_t>(g.greedy.size()) - 1;
  SwapExpert(sel, t, 0, static_cast<int32_t>(m->config().n_routed_experts));
  SECTION("a recorded expert the engine would not choose, far from a tie: named and failed") {
    sel.margins[t] = 0.5f;
    auto r = CheckGoldenPinned(*m, g, 1e3f, /*forced=*/true, /*gate_selections=*/true);
    REQUIRE(r.ok());
    CHECK_FALSE(r->passed);
    CHECK(r->selections_beyond_tie == 1);
    REQUIRE(r->selections.differences.size() == 1);
    const DecisionDifference& d = r->selections.differences[0];
    CHECK(d.site == DecisionSite::kMoeExperts);
    CHECK(d.layer == 3);
    CHECK(d.row == t);
    CHECK(d.margin == 0.5f);
    // The ungated check (a bf16 run's) counts it and leaves the verdict to the logits.
    auto counted = CheckGoldenPinned(*m, g, 1e3f, /*forced=*/true, /*gate_selections=*/false);
    REQUIRE(counted.ok());
    CHECK(counted->passed);
    CHECK(counted->selections_beyond_tie == 1);
  }
  SECTION("the same where the reference was at a near tie: a tolerated flip") {
    sel.margins[t] = 1e-5f;
    auto r = CheckGoldenPinned(*m, g, 1e3f, /*forced=*/true, /*gate_selections=*/true);
    REQUIRE(r.ok());
    CHECK(r->passed);
    CHECK(r->selections.differing == 1);
    CHECK(r->selections_beyond_tie == 0);
  }
  SECTION("in an earlier layer the pinned expert moves what follows, and the logits show it") {
    GoldenSelection& early = SelectionAt(g, DecisionSite::kMoeExperts, 1);
    SwapExpert(early, n / 2, 0, static_cast<int32_t>(m->config().n_routed_experts));
    auto r = CheckGoldenPinned(*m, g, 1e-3f, /*forced=*/true, /*gate_selections=*/false);
    REQUIRE(r.ok());
    CHECK_FALSE(r->passed);
    CHECK(r->max_prefill_error > 1e-2f);
    REQUIRE_FALSE(r->selections.differences.empty());
    CHECK(r->selections.differences[0].layer == 1);
    CHECK(r->selections.differences[0].row == n / 2);
  }
}

TEST_CASE("recorded selections this model cannot take are refused before anything runs", "[golden]") {
  auto m = ferry::testing::LoadAs<GlmMoeDsa>(kDir);
  const GoldenPrompt base = ferry::testing::GoldensOf(kDir)[1];
  auto refused = [&](const GoldenPrompt& g, const std::string& says) {
    auto r = CheckGoldenPinned(*m, g, 1e-3f, /*forced=*/false, /*gate_selections=*/true);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    INFO(r.status().message());
    CHECK(std::string(r.status().message()).find(says) != std::string::npos);
  };
  SECTION("a token after the row's own position") {
    GoldenPrompt g = base;
    GoldenSelection& sel = SelectionAt(g, DecisionSite::kIndexerTopK, 0);
    sel.ids[3 * sel.width + 0] = 3;  // position 3 keeps tokens 0..3: now 3, 1, 2, 3
    refused(g, "position 3 slot 1: id 1 is not above the id before it");
    g = base;
    GoldenSelection& late = SelectionAt(g, DecisionSite::kIndexerTopK, 0);
    late.ids[2 * late.width + 2] = 5;  // position 2 cannot see token 5
    refused(g, "id 5 cannot be chosen there");
  }
  SECTION("an expert outside the model's, a repeat, a short row") {
    GoldenPrompt g = base;
    SelectionAt(g, DecisionSite::kMoeExperts, 2).ids[0] = 16;
    refused(g, "p1.select.2.experts: position 0 slot 0: id 16");
    g = base;
    GoldenSelection& rep = SelectionAt(g, DecisionSite::kMoeExperts, 2);
    rep.ids[1] = rep.ids[0];
    refused(g, "is not above the id before it");
    g = base;
    SelectionAt(g, DecisionSite::kMoeExperts, 3).ids[3] = -1;
    refused(g, "routes to fewer than 4 experts");
  }
  SECTION("a selection missing, one too many, another width") {
    GoldenPrompt g = base;
    g.selections.erase(g.selections.begin());
    refused(g, "the golden has no 'p1.select.0.indexer'");
    g = base;
    GoldenSelection extra = SelectionAt(g, DecisionSite::kIndexerTopK, 0);
    extra.layer = 2;  // layer 2 shares layer 1's selection: it makes none
    g.selections.insert(g.selections.begin() + 3, extra);
    refused(g, "the golden has no 'p1.select.2.experts'");
    g = base;
    GoldenSelection& wide = SelectionAt(g, DecisionSite::kMoeExperts, 1);
    wide.width = 5;
    wide.ids.resize(wide.ids.size() / 4 * 5, -1);
    refused(g, "is 5 wide; this model chooses 4 experts a row");
  }
}

TEST_CASE("a golden file's selection tensors are read by name - shape and type", "[golden]") {
  ferry::testing::TempDir tmp;
  const std::string path = tmp.File("golden.safetensors");
  auto i32 = [](const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
    ferry::testing::RawTensor t{name, DType::kI32, std::move(shape), std::string(v.size() * 4, '\0')};
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    return t;
  };
  const std::vector<ferry::testing::RawTensor> prompt = {
      i32("p0.ids", {2}, {5, 6}), i32("p0.greedy", {1}, {7}),
      ferry::testing::F32Tensor("p0.logits", {3, 2}, {0, 1, 2, 3, 4, 5})};
  auto with = [&](std::vector<ferry::testing::RawTensor> extra) {
    std::vector<ferry::testing::RawTensor> all = prompt;
    all.insert(all.end(), extra.begin(), extra.end());
    ferry::testing::WriteSafetensors(path, all);
    return ReadGolden(path);
  };
  auto ok = with({i32("p0.select.3.experts", {3, 2}, {0, 1, 1, 2, 0, 2}),
                  ferry::testing::F32Tensor("p0.select.3.experts_margin", {3}, {0.5f, 1e-4f, INFINITY})});
  REQUIRE(ok.ok());
  REQUIRE((*ok)[0].selections.size() == 1);
  const GoldenSelection& s = (*ok)[0].selections[0];
  CHECK(s.site == DecisionSite::kMoeExperts);
  CHECK(s.layer == 3);
  CHECK(s.width == 2);
  CHECK(s.ids == std::vector<int32_t>{0, 1, 1, 2, 0, 2});
  CHECK(s.margins[1] == 1e-4f);
  auto error = [&](std::vector<ferry::testing::RawTensor> extra, const std::string& says) {
    auto r = with(std::move(extra));
    REQUIRE_FALSE(r.ok());
    INFO(r.status().message());
    CHECK(std::string(r.status().message()).find(says) != std::string::npos);
  };
  error({i32("p0.select.3.experts", {3, 2}, {0, 1, 1, 2, 0, 2})}, "needs both its ids and 'p0.select.3.experts_margin'");
  error({i32("p0.select.3.experts", {2, 2}, {0, 1, 1, 2}),
         ferry::testing::F32Tensor("p0.select.3.experts_margin", {3}, {1, 1, 1})},
        "expected I32 [3, width]");
  error({ferry::testing::F32Tensor("p0.select.x.experts_margin", {3}, {1, 1, 1})}, "is not p0.select.LAYER.SITE");
  error({ferry::testing::F32Tensor("p0.select.1.heads_margin", {3}, {1, 1, 1})}, "unknown decision site 'heads'");
}

TEST_CASE("glm5_next with pools of 8 over 12 layers: the reference's near ties replayed - the rest agree", "[golden]") {
  const std::string dir = std::string(FERRY_TEST_DATA_DIR) + "/glm5next-kpool8";
  auto m = ferry::testing::LoadAs<Glm5Next>(dir);
  for (const GoldenPrompt& g : ferry::testing::GoldensOf(dir)) {
    INFO(g.name);
    for (int64_t chunk : {0, 8, 57}) {
      auto r = CheckGoldenPinned(*m, g, 1e-3f, /*forced=*/false, /*gate_selections=*/true, chunk);
      REQUIRE(r.ok());
      CHECK(r->passed);
      CHECK(r->selections_beyond_tie == 0);
    }
  }
}

}  // namespace
}  // namespace ferry::model
