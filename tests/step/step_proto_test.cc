// The step's control-plane encoding: what the coordinator sends is what every worker executes,
// with each rank keeping only its own latent pages; owners and carry sources outside the group
// are refused with the numbers.
#include "step/step_proto.h"

#include <string>

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

TEST_CASE("step proto: a step round-trips, each rank keeping its own latent pages", "[worker][proto]") {
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

}  // namespace
}  // namespace ferry::step
