#include "worker/step_executor.h"

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "dataplane/dataplane.h"
#include "dataplane/group_collective.h"
#include "dataplane/local_dataplane.h"
#include "model/cache/split_rows.h"
#include "model/families/causal_lm.h"
#include "tests/catch.h"

namespace ferry::worker {
namespace {

TEST_CASE("A step failing after it changed state: never a clean refusal - and a peer timeout keeps its peer",
          "[worker]") {
  // A data-plane timeout during a carry: DEADLINE_EXCEEDED and the peer stay (the worker exits
  // kExitPeerTimeout naming it), with the step in the message.
  const absl::Status timeout = dataplane::WithWaitedFor(absl::DeadlineExceededError("rank 1 did not send"), {1});
  const absl::Status carry = FailedAfterChanges("step 9: carrying latent rows", timeout);
  CHECK(absl::IsDeadlineExceeded(carry));
  CHECK(carry.message() == "step 9: carrying latent rows: rank 1 did not send");
  CHECK(dataplane::WaitedFor(carry) == std::vector<int>{1});
  // INVALID_ARGUMENT would read as a refusal every rank made alike: INTERNAL instead.
  const absl::Status bad = FailedAfterChanges("", absl::InvalidArgumentError("segment 0: token 1 is 999"));
  CHECK(absl::IsInternal(bad));
  CHECK(bad.message() == "segment 0: token 1 is 999");
  CHECK(absl::IsUnavailable(FailedAfterChanges("", absl::UnavailableError("x"))));
}

// A real carry into a timeout: two ranks of glm-dsa-tiny over the data plane's collectives (the
// in-process transport, a 300 ms timeout), a conversation owned by rank 1, then a fork of it
// carried to rank 0 (its owner lacked room, say). Rank 1 never joins the carry (stalled); rank 0's
// CarryLatent gives up on it with DEADLINE_EXCEEDED naming rank 1, and the step's error
// (FailedAfterChanges, as the step executor wraps it) keeps both.
TEST_CASE("A carry whose sender never joins times out naming it - the step error keeps the peer", "[worker]") {
  const std::string dir = std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny";
  std::vector<std::unique_ptr<dataplane::DataPlane>> planes = dataplane::MakeLocalGroup(2);
  std::vector<std::unique_ptr<dataplane::GroupCollective>> groups;
  for (auto& dp : planes) groups.push_back(std::make_unique<dataplane::GroupCollective>(dp.get(), std::chrono::milliseconds(300)));
  absl::Status forward[2], carried;
  double waited_s = 0;
  std::promise<void> carry_done;
  std::shared_future<void> done = carry_done.get_future().share();
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto m = model::LoadCausalLM(dir, model::TensorParallel{r, 2, groups[static_cast<size_t>(r)].get()},
                                   model::CacheOptions{16, -1});
      if (!m.ok()) {
        forward[r] = m.status();
        if (r == 0) carry_done.set_value();
        return;
      }
      std::unique_ptr<model::SequenceState> a = (*m)->NewSequence();
      forward[r] = a->SetLatentOwner(1, false);
      std::vector<int32_t> prompt;
      for (int i = 0; i < 37; ++i) prompt.push_back(3 + (i * 37) % 370);
      model::ForwardSegment seg{a.get(), prompt, false};
      if (forward[r].ok()) forward[r] = (*m)->Forward(std::span<const model::ForwardSegment>(&seg, 1)).status();
      if (r == 1) {  // the sender: stalled, its data plane open, until rank 0 has given up
        done.wait();
        return;
      }
      auto fork = a->ForkCarriedAt(32, -1, 0);
      if (!forward[0].ok() || !fork.ok()) {
        if (forward[0].ok()) forward[0] = fork.status();
        carry_done.set_value();
        return;
      }
      absl::Status st = (*fork)->split_rows()->latent().Reserve(32);
      const model::LatentCarry carry{a.get(), fork->get(), 1, 0, 32};
      const auto t0 = std::chrono::steady_clock::now();
      if (st.ok()) st = (*m)->CarryLatent(std::span<const model::LatentCarry>(&carry, 1));
      waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      carried = FailedAfterChanges("step 9: carrying latent rows", st);
      carry_done.set_value();
    });
  }
  for (std::thread& t : ranks) t.join();
  REQUIRE(forward[0].ok());
  REQUIRE(forward[1].ok());
  INFO(carried);
  CHECK(absl::IsDeadlineExceeded(carried));
  CHECK(absl::StartsWith(carried.message(), "step 9: carrying latent rows: "));
  CHECK(dataplane::WaitedFor(carried) == std::vector<int>{1});
  CHECK(waited_s >= 0.25);
  CHECK(waited_s < 10);
}

}  // namespace
}  // namespace ferry::worker
