// The step's control-plane encoding: what the coordinator sends is what every worker executes,
// with each rank keeping only its own latent pages; owners and carry sources outside the group
// are refused with the numbers.
#include "step/step_proto.h"

#include <string>
#include <vector>

#include "tests/catch.h"

namespace ferry::step {
namespace {

Step SampleStep() {
  Step step;
  step.step_id = 41;
  step.release = {7, 9};
  step.end_borrow = {11};
  StepSegment plain;
  plain.seq_id = 3;
  plain.start = 5;
  plain.tokens = {1, 2, 3};
  plain.sample = true;
  plain.sampling.temperature = 0.5f;
  plain.sampling.top_k = 4;
  plain.sampling.top_p = 0.9f;
  plain.seed = 1234;
  plain.new_pages = {10, 12};
  step.segments.push_back(plain);
  StepSegment carried;  // a resume of kept conversation 8 carried from rank 0 to its new owner 2
  carried.seq_id = 12;
  carried.start = 40;
  carried.tokens = {4};
  carried.fork_from = 8;
  carried.fork_length = 40;
  carried.owner = 2;
  carried.carry_from = 0;
  carried.new_pages = {20};
  carried.latent_pages = {{}, {}, {30, 31, 32}};
  step.segments.push_back(carried);
  StepSegment borrowed;  // a fill borrowing on every rank
  borrowed.seq_id = 13;
  borrowed.tokens = {5, 6};
  borrowed.owner = 1;
  borrowed.borrowed = true;
  borrowed.latent_pages = {{50}, {51}, {52}};
  step.segments.push_back(borrowed);
  return step;
}

TEST_CASE("step proto: a step round-trips - each rank keeping its own latent pages", "[worker][proto]") {
  const Step step = SampleStep();
  control::v1::StepCommand cmd;
  StepToProto(step, &cmd);
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank);
    auto got = StepFromProto(cmd, rank, 3);
    REQUIRE(got.ok());
    CHECK(got->step_id == 41);
    CHECK(got->release == step.release);
    CHECK(got->end_borrow == step.end_borrow);
    REQUIRE(got->segments.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      const StepSegment &a = step.segments[i], &b = got->segments[i];
      CHECK(b.seq_id == a.seq_id);
      CHECK(b.start == a.start);
      CHECK(b.tokens == a.tokens);
      CHECK(b.sample == a.sample);
      CHECK(b.sampling.temperature == a.sampling.temperature);
      CHECK(b.sampling.top_k == a.sampling.top_k);
      CHECK(b.sampling.top_p == a.sampling.top_p);
      CHECK(b.seed == a.seed);
      CHECK(b.new_pages == a.new_pages);
      CHECK(b.fork_from == a.fork_from);
      CHECK(b.fork_length == a.fork_length);
      CHECK(b.owner == a.owner);
      CHECK(b.borrowed == a.borrowed);
      CHECK(b.carry_from == a.carry_from);
      if (a.owner < 0) {
        CHECK(b.latent_pages.empty());
        continue;
      }
      REQUIRE(b.latent_pages.size() == 3);
      for (int k = 0; k < 3; ++k) {
        CHECK(b.latent_pages[k] == (k == rank ? a.latent_pages[k] : std::vector<int32_t>{}));
      }
    }
  }
}

TEST_CASE("step proto: an owner or carry source outside the group is refused with the numbers", "[worker][proto]") {
  Step step = SampleStep();
  control::v1::StepCommand cmd;
  StepToProto(step, &cmd);
  auto narrow = StepFromProto(cmd, 0, 2);  // owner 2 in a group of 2
  CHECK(narrow.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(narrow.status().message()) == "step 41: owner rank 2 outside [0, 2)");
  cmd.mutable_segments(1)->set_carry_from(5);
  auto bad_carry = StepFromProto(cmd, 0, 3);
  CHECK(bad_carry.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad_carry.status().message()) == "step 41: carry source rank 5 outside [0, 3)");
}

TEST_CASE("step proto: log-probability requests round-trip and are bounded", "[worker][proto]") {
  Step step = SampleStep();
  step.segments[0].sampling.top_logprobs = 3;
  control::v1::StepCommand cmd;
  StepToProto(step, &cmd);
  auto back = StepFromProto(cmd, 0, 3);
  REQUIRE(back.ok());
  CHECK(back->segments[0].sampling.top_logprobs == 3);
  CHECK(back->segments[1].sampling.top_logprobs == -1);  // not asked
  cmd.mutable_segments(0)->set_top_logprobs(kMaxTopLogprobs + 1);
  auto many = StepFromProto(cmd, 0, 3);
  CHECK(many.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(many.status().message()) == "step 41: sequence 3 asks for 21 top log-probabilities; at most 20");
}

TEST_CASE("step proto: rank 0's sampled tokens decode - and a result that does not fit its step is refused",
          "[worker][proto]") {
  Step step = SampleStep();  // segment 0 samples; the others do not
  step.segments[0].sampling.top_logprobs = 2;
  SampledToken t;
  t.token = 17;
  t.logprob = -0.5f;
  t.top = {{17, -0.5f}, {4, -1.25f}};
  control::v1::StepResult res;
  res.set_rank(0);
  SampledToProto(std::vector<SampledToken>{t}, &res);
  auto got = SampledFromProto(res, step, 100);
  REQUIRE(got.ok());
  REQUIRE(got->size() == 1);
  CHECK((*got)[0].token == 17);
  CHECK((*got)[0].logprob == -0.5f);
  REQUIRE((*got)[0].top.size() == 2);
  CHECK((*got)[0].top[1].token == 4);
  // -1: nothing picked (non-finite logits), and no log-probabilities with it.
  control::v1::StepResult none;
  SampledToProto(std::vector<SampledToken>{SampledToken{}}, &none);
  auto empty = SampledFromProto(none, step, 100);
  REQUIRE(empty.ok());
  CHECK((*empty)[0].token == -1);
  auto refused = [&](const control::v1::StepResult& r, const std::string& why) {
    auto st = SampledFromProto(r, step, 100).status();
    CHECK(st.code() == absl::StatusCode::kInternal);
    INFO(st.message());
    CHECK(std::string(st.message()).find(why) != std::string::npos);
  };
  control::v1::StepResult outside = res;
  outside.set_tokens(0, 100);
  refused(outside, "token 100 is outside the vocabulary [0, 100)");
  control::v1::StepResult extra = res;
  extra.add_tokens(3);
  refused(extra, "2 tokens and 1 log-probability entries for 1 sampled segments");
  control::v1::StepResult no_lp = res;
  no_lp.clear_logprobs();
  refused(no_lp, "no log-probabilities for sequence 3");
  control::v1::StepResult wide = res;
  wide.mutable_logprobs(0)->add_top_ids(5);
  wide.mutable_logprobs(0)->add_top_logprobs(-2.0f);
  refused(wide, "3 top ids and 3 log-probabilities for 2 asked");
}

}  // namespace
}  // namespace ferry::step
