// model/golden/decision_log.h: the tape check-golden's bf16 run replays (record, replay = pin,
// compare), its refusals when the two runs differ, and the pinned routing weights.
#include "model/golden/decision_log.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "model/families/causal_lm.h"
#include "tests/catch.h"

namespace ferry::model {
namespace {

using Mode = DecisionLog::Mode;

// One "forward" of two layers over `rows` rows: an indexer decision (width 3) on layer 0 and a
// routing decision (width 2) on layer 1, the ids given; returns the ids the log left.
std::vector<std::vector<int32_t>> Step(DecisionLog& log, int64_t rows, std::vector<int32_t> topk,
                                       std::vector<int32_t> experts) {
  REQUIRE(log.BeginStep(rows).ok());
  auto a = log.Decide(DecisionSite::kIndexerTopK, 0, rows, 3, topk);
  REQUIRE(a.ok());
  auto b = log.Decide(DecisionSite::kMoeExperts, 1, rows, 2, experts);
  REQUIRE(b.ok());
  return {topk, experts};
}

TEST_CASE("a replayed log pins the recorded decisions and counts the rows that differed", "[decision_log]") {
  DecisionLog log;
  log.Start(Mode::kRecord);
  Step(log, 2, {0, 1, 2, 0, 1, -1}, {3, 5, 1, 2});
  Step(log, 1, {4, 6, 7}, {0, 7});
  REQUIRE(log.Finish().ok());
  CHECK(log.steps() == 2);
  CHECK(log.entries() == 4);
  CHECK(log.stats().decisions == 6);
  CHECK(log.stats().differing == 0);

  log.Start(Mode::kReplay);
  // Step 0: row 1's indexer set differs ({0, 2} vs {0, 1}); row 0's experts come in another
  // order (the same set: not a difference).
  auto s0 = Step(log, 2, {0, 1, 2, 0, 2, -1}, {5, 3, 1, 2});
  CHECK(s0[0] == std::vector<int32_t>{0, 1, 2, 0, 1, -1});  // pinned, -1 padding included
  CHECK(s0[1] == std::vector<int32_t>{3, 5, 1, 2});
  // Step 1: the experts differ.
  auto s1 = Step(log, 1, {4, 6, 7}, {0, 6});
  CHECK(s1[1] == std::vector<int32_t>{0, 7});
  REQUIRE(log.Finish().ok());
  const DecisionStats& st = log.stats();
  CHECK(st.decisions == 6);
  CHECK(st.differing == 2);
  CHECK(st.differing_by_site[static_cast<int>(DecisionSite::kIndexerTopK)] == 1);
  CHECK(st.differing_by_site[static_cast<int>(DecisionSite::kMoeExperts)] == 1);
  CHECK(st.positions == 3);
  CHECK(st.positions_differing == 2);

  SECTION("compare leaves the model's own decisions") {
    log.Start(Mode::kCompare);
    auto c0 = Step(log, 2, {0, 1, 2, 0, 2, -1}, {3, 5, 1, 2});
    CHECK(c0[0] == std::vector<int32_t>{0, 1, 2, 0, 2, -1});
    Step(log, 1, {4, 6, 7}, {0, 7});
    REQUIRE(log.Finish().ok());
    CHECK(log.stats().differing == 1);
    CHECK(log.stats().positions_differing == 1);
    CHECK(log.entries() == 4);  // the tape is kept
  }
}

TEST_CASE("W4A4's rounded MLP inputs: recorded by key, compared a group of 16 at a time, pinned on replay",
          "[decision_log]") {
  DecisionLog log;
  std::vector<float> a(32, 0.5f), b(32, 1.5f);
  // Outside a step, or not whole groups: refused.
  log.Start(Mode::kRecord);
  CHECK(absl::IsInvalidArgument(log.Fp4Row(0, 3, 1, 0, a).status()));
  REQUIRE(log.BeginStep(2).ok());
  std::vector<float> odd(20, 1.0f);
  CHECK(absl::IsInvalidArgument(log.Fp4Row(0, 3, 1, 0, odd).status()));
  // Expert 3's down input at rows 0 and 1 of layer 0; the routed input of row 1, recorded twice
  // (two experts round the same token alike): the last is kept.
  REQUIRE(log.Fp4Row(0, 3, 1, 0, a).ok());
  REQUIRE(log.Fp4Row(0, 3, 1, 1, b).ok());
  REQUIRE(log.Fp4Row(0, DecisionLog::kFp4RoutedInput, 0, 1, a).ok());
  REQUIRE(log.Fp4Row(0, DecisionLog::kFp4RoutedInput, 0, 1, b).ok());
  REQUIRE(log.Finish().ok());
  CHECK(log.stats().fp4_rows == 4);

  // Replay, rounded in another order: row 1 of expert 3 differs in its second group only.
  log.Start(Mode::kReplay);
  REQUIRE(log.BeginStep(2).ok());
  std::vector<float> own = b;
  own[20] = 2.0f;
  auto pinned = log.Fp4Row(0, 3, 1, 1, own);
  REQUIRE(pinned.ok());
  CHECK(*pinned);
  CHECK(own == b);
  std::vector<float> same = a, routed = b;
  CHECK(*log.Fp4Row(0, 3, 1, 0, same));
  CHECK(*log.Fp4Row(0, DecisionLog::kFp4RoutedInput, 0, 1, routed));
  // A row the tape lacks (another expert, another layer) or holds with another width: the runs differ.
  std::vector<float> c = a;
  CHECK(absl::IsFailedPrecondition(log.Fp4Row(0, 4, 1, 0, c).status()));
  CHECK(absl::IsFailedPrecondition(log.Fp4Row(1, 3, 1, 0, c).status()));
  std::vector<float> wide(48, 0.5f);
  CHECK(absl::IsFailedPrecondition(log.Fp4Row(0, 3, 1, 0, wide).status()));
  REQUIRE(log.Finish().ok());
  CHECK(log.stats().fp4_rows == 3);
  CHECK(log.stats().fp4_groups_differing == 1);

  // Compare: counted, left as they are.
  log.Start(Mode::kCompare);
  REQUIRE(log.BeginStep(2).ok());
  own = b;
  own[0] = 7.0f;
  CHECK_FALSE(*log.Fp4Row(0, 3, 1, 1, own));
  CHECK(own[0] == 7.0f);
  REQUIRE(log.Finish().ok());
  CHECK(log.stats().fp4_groups_differing == 1);

  // A tape recorded without W4A4 (no FP4 rows) leaves every row as it is.
  DecisionLog plain;
  plain.Start(Mode::kRecord);
  REQUIRE(plain.BeginStep(2).ok());
  REQUIRE(plain.Finish().ok());
  plain.Start(Mode::kReplay);
  REQUIRE(plain.BeginStep(2).ok());
  std::vector<float> untouched = a;
  auto kept = plain.Fp4Row(0, 3, 1, 0, untouched);
  REQUIRE(kept.ok());
  CHECK_FALSE(*kept);
  CHECK(untouched == a);
}

TEST_CASE("a replay that makes other calls than the recording is refused", "[decision_log]") {
  DecisionLog log;
  log.Start(Mode::kRecord);
  Step(log, 2, {0, 1, 2, 0, 1, -1}, {3, 5, 1, 2});
  REQUIRE(log.Finish().ok());
  std::vector<int32_t> ids3 = {0, 1, 2}, ids6 = {0, 1, 2, 0, 1, -1};

  SECTION("another row count") {
    log.Start(Mode::kReplay);
    CHECK(log.BeginStep(1).code() == absl::StatusCode::kFailedPrecondition);
  }
  SECTION("another site or layer") {
    log.Start(Mode::kReplay);
    REQUIRE(log.BeginStep(2).ok());
    std::vector<int32_t> e = {3, 5, 1, 2};
    CHECK(log.Decide(DecisionSite::kMoeExperts, 1, 2, 2, e).status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(e == std::vector<int32_t>{3, 5, 1, 2});  // untouched
    CHECK(log.Decide(DecisionSite::kIndexerTopK, 2, 2, 3, ids6).status().code() ==
          absl::StatusCode::kFailedPrecondition);
  }
  SECTION("a decision past the step's") {
    log.Start(Mode::kReplay);
    Step(log, 2, {0, 1, 2, 0, 1, -1}, {3, 5, 1, 2});
    CHECK(log.Decide(DecisionSite::kIndexerTopK, 3, 2, 3, ids6).status().code() ==
          absl::StatusCode::kFailedPrecondition);
  }
  SECTION("a step short of its decisions") {
    log.Start(Mode::kReplay);
    REQUIRE(log.BeginStep(2).ok());
    REQUIRE(log.Decide(DecisionSite::kIndexerTopK, 0, 2, 3, ids6).ok());
    CHECK(log.Finish().code() == absl::StatusCode::kFailedPrecondition);
  }
  SECTION("a step the recording did not make, or one fewer") {
    log.Start(Mode::kReplay);
    Step(log, 2, {0, 1, 2, 0, 1, -1}, {3, 5, 1, 2});
    CHECK(log.BeginStep(2).code() == absl::StatusCode::kFailedPrecondition);
    log.Start(Mode::kReplay);
    CHECK(log.Finish().code() == absl::StatusCode::kFailedPrecondition);
  }
  SECTION("ids of another shape, or outside a step") {
    log.Start(Mode::kReplay);
    CHECK(log.Decide(DecisionSite::kIndexerTopK, 0, 2, 3, ids6).status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(log.BeginStep(2).ok());
    CHECK(log.Decide(DecisionSite::kIndexerTopK, 0, 2, 3, ids3).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("pinned routing weights are RouteRow's for its own picks - and follow pinned experts", "[decision_log]") {
  kernels::cpu::RoutingParams p;
  p.n_experts = 8;
  p.top_k = 3;
  p.n_group = 2;
  p.topk_group = 1;
  p.norm_topk_prob = true;
  p.routed_scaling_factor = 2.5f;
  const std::vector<float> logits = {0.3f, -1.2f, 2.0f, 0.7f, -0.4f, 1.1f, 0.05f, -2.2f};
  const std::vector<float> bias = {0.0f, 0.1f, -0.2f, 0.0f, 0.3f, 0.0f, 0.0f, 0.1f};
  std::vector<int32_t> experts(3);
  std::vector<float> want(3), got(3);
  kernels::cpu::RouteRow(logits.data(), bias.data(), p, experts.data(), want.data());
  PinnedRouteWeights(logits.data(), experts, p, got.data());
  CHECK(got == want);  // bit for bit

  // Other experts pinned: their own sigmoids, normalised over them.
  const std::vector<int32_t> pinned = {1, 4, 6};
  PinnedRouteWeights(logits.data(), pinned, p, got.data());
  float sum = 0.0f;
  for (int32_t e : pinned) sum += 1.0f / (1.0f + std::exp(-logits[e]));
  for (size_t i = 0; i < pinned.size(); ++i) {
    CHECK(std::fabs(got[i] - 2.5f * (1.0f / (1.0f + std::exp(-logits[pinned[i]]))) / sum) <= 1e-6f);
  }
  p.norm_topk_prob = false;
  PinnedRouteWeights(logits.data(), pinned, p, got.data());
  CHECK(std::fabs(got[0] - 2.5f / (1.0f + std::exp(1.2f))) <= 1e-6f);
}

TEST_CASE("a recut tape replays rows of the recorded steps into other steps", "[decision_log]") {
  DecisionLog log;
  log.Start(Mode::kRecord);
  Step(log, 2, {0, 1, 2, 0, 1, -1}, {3, 5, 1, 2});
  Step(log, 1, {4, 6, 7}, {0, 7});
  REQUIRE(log.Finish().ok());

  using R = DecisionLog::RowRange;
  const std::vector<R> ones = {{0, 1}, {1, 1}, {2, 1}};
  auto cut = log.Recut(ones);
  REQUIRE(cut.ok());
  CHECK(cut->steps() == 3);
  CHECK(cut->entries() == 6);
  cut->Start(Mode::kReplay);
  // Own decisions all differ; each one-row step gets its row of the recorded step.
  auto r0 = Step(*cut, 1, {9, 9, 9}, {9, 8});
  auto r1 = Step(*cut, 1, {9, 9, 9}, {9, 8});
  auto r2 = Step(*cut, 1, {9, 9, 9}, {9, 8});
  REQUIRE(cut->Finish().ok());
  CHECK(r0 == std::vector<std::vector<int32_t>>{{0, 1, 2}, {3, 5}});
  CHECK(r1 == std::vector<std::vector<int32_t>>{{0, 1, -1}, {1, 2}});
  CHECK(r2 == std::vector<std::vector<int32_t>>{{4, 6, 7}, {0, 7}});
  CHECK(cut->stats().differing == 6);

  // A row twice (a fork running a tail again); a range across two recorded steps, or past the
  // tape, is refused.
  const std::vector<R> again = {{1, 1}, {1, 1}}, across = {{1, 2}}, past = {{3, 1}}, empty = {{3, 0}, {0, 0}};
  auto twice = log.Recut(again);
  REQUIRE(twice.ok());
  twice->Start(Mode::kReplay);
  CHECK(Step(*twice, 1, {9, 9, 9}, {9, 8}) == std::vector<std::vector<int32_t>>{{0, 1, -1}, {1, 2}});
  CHECK(Step(*twice, 1, {9, 9, 9}, {9, 8}) == std::vector<std::vector<int32_t>>{{0, 1, -1}, {1, 2}});
  REQUIRE(twice->Finish().ok());
  CHECK(log.Recut(across).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(log.Recut(past).status().code() == absl::StatusCode::kInvalidArgument);
  // Ranges of no rows (the tape's end included) are steps without decisions.
  auto none = log.Recut(empty);
  REQUIRE(none.ok());
  CHECK(none->steps() == 2);
  CHECK(none->entries() == 0);
}

TEST_CASE("decisions made elsewhere are appended with margins - and a replay names the rows it disagrees with",
          "[decision_log]") {
  DecisionLog log;
  log.Start(Mode::kRecord);
  // Not in a step yet.
  CHECK(log.Append(DecisionSite::kMoeExperts, 1, 2, std::vector<int32_t>{}, {}).code() ==
        absl::StatusCode::kInvalidArgument);
  REQUIRE(log.BeginStep(3).ok());
  const std::vector<int32_t> experts = {0, 1, 2, 3, 1, 3};
  const std::vector<float> margins = {0.5f, 1e-5f, 0.25f};
  REQUIRE(log.Append(DecisionSite::kMoeExperts, 1, 2, experts, margins).ok());
  // ids not [rows, width], margins not [rows]
  CHECK(log.Append(DecisionSite::kMoeExperts, 2, 2, std::vector<int32_t>{0, 1}, {}).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(log.Append(DecisionSite::kMoeExperts, 2, 2, experts, std::vector<float>{1.0f}).code() ==
        absl::StatusCode::kInvalidArgument);
  REQUIRE(log.Finish().ok());
  CHECK(log.entries() == 1);

  // Replayed a row a step: rows 1 and 2 decide otherwise; each difference carries its row on the
  // recorded tape and that row's margin.
  using R = DecisionLog::RowRange;
  const std::vector<R> ones = {{0, 1}, {1, 1}, {2, 1}};
  auto cut = log.Recut(ones);
  REQUIRE(cut.ok());
  cut->Start(Mode::kReplay);
  for (const std::vector<int32_t>& own : {std::vector<int32_t>{0, 1}, {2, 4}, {0, 3}}) {
    REQUIRE(cut->BeginStep(1).ok());
    std::vector<int32_t> ids = own;
    REQUIRE(cut->Decide(DecisionSite::kMoeExperts, 1, 1, 2, ids).ok());
  }
  REQUIRE(cut->Finish().ok());
  const auto& d = cut->stats().differences;
  REQUIRE(d.size() == 2);
  CHECK(d[0].row == 1);
  CHECK(d[0].margin == 1e-5f);
  CHECK(d[0].layer == 1);
  CHECK(d[0].site == DecisionSite::kMoeExperts);
  CHECK(d[1].row == 2);
  CHECK(d[1].margin == 0.25f);
  // A tape the model recorded itself has no margins: NaN.
  DecisionLog own;
  own.Start(Mode::kRecord);
  Step(own, 1, {0, 1, 2}, {3, 5});
  REQUIRE(own.Finish().ok());
  own.Start(Mode::kCompare);
  Step(own, 1, {0, 1, 2}, {3, 6});
  REQUIRE(own.Finish().ok());
  REQUIRE(own.stats().differences.size() == 1);
  CHECK(std::isnan(own.stats().differences[0].margin));
}

// One forward of `ids` as a fresh conversation with `log` attached (null: none) in `mode`.
std::vector<float> ForwardLogged(CausalLM& m, const std::vector<int32_t>& ids, DecisionLog* log, Mode mode) {
  if (log != nullptr) log->Start(mode);
  m.set_decision_log(log);
  std::unique_ptr<SequenceState> seq = m.NewSequence();
  ForwardSegment seg{seq.get(), ids, true};
  auto out = m.Forward({&seg, 1});
  m.set_decision_log(nullptr);
  REQUIRE(out.ok());
  if (log != nullptr) REQUIRE(log->Finish().ok());
  return out->logits;
}

TEST_CASE("the CPU backend reports its indexer and routing decisions - and a replay pins them", "[decision_log]") {
  for (const std::string& dir : {std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny",
                                std::string(FERRY_TEST_DATA_DIR) + "/glm5next-tiny"}) {
    INFO(dir);
    auto m = LoadCausalLM(dir);
    REQUIRE(m.ok());
    std::vector<int32_t> a, b;
    for (int i = 0; i < 40; ++i) {
      a.push_back(static_cast<int32_t>(3 + (i * 37) % 370));
      b.push_back(static_cast<int32_t>(5 + (i * 53) % 360));
    }
    const std::vector<float> plain_a = ForwardLogged(**m, a, nullptr, Mode::kRecord);
    const std::vector<float> plain_b = ForwardLogged(**m, b, nullptr, Mode::kRecord);
    DecisionLog tape;
    // Recording and comparing change nothing; a replay of a run's own decisions is that run.
    CHECK(ForwardLogged(**m, a, &tape, Mode::kRecord) == plain_a);
    CHECK(tape.stats().by_site[static_cast<int>(DecisionSite::kMoeExperts)] > 0);
    CHECK(tape.stats().by_site[static_cast<int>(DecisionSite::kIndexerTopK)] > 0);
    CHECK(ForwardLogged(**m, a, &tape, Mode::kReplay) == plain_a);
    CHECK(tape.stats().differing == 0);
    CHECK(ForwardLogged(**m, b, &tape, Mode::kCompare) == plain_b);
    const int64_t differing = tape.stats().differing;
    CHECK(differing > 0);
    // Another prompt's forward pinned to a's decisions: the differing ones are replaced (later
    // layers then see other inputs, so the count may move), and the logits move.
    CHECK(ForwardLogged(**m, b, &tape, Mode::kReplay) != plain_b);
    CHECK(tape.stats().differing > 0);
  }
}

}  // namespace
}  // namespace ferry::model
