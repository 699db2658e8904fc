// kvpool/plan.h's figures for sizing a deployment: the room a rank's memory leaves, what a plan
// means for its lanes at once (whole windows, an even share), and the longest window a refused
// plan could have. The GLM-5.3-Flash NVFP4 figures at TP = 2 on 128 GiB ranks were computed
// independently from the config (tests/data/configs/README.md).
#include <cstdint>
#include <string>

#include "kvpool/plan.h"
#include "tests/catch.h"

namespace ferry::kvpool {
namespace {

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

constexpr int64_t kMillion = 1048576;
constexpr int64_t kNvfp4WeightsTp2 = 95774088260;  // GLM-5.3-Flash NVFP4, a rank of two
constexpr int64_t kKdaStateTp2 = 76316672;         // 34 KDA layers, 32 heads a rank

// GLM-5.3-Flash at TP = 2 with the latent split, 8 lanes of a 1M window, on a 128 GiB rank.
PlanInput FlashTp2(int64_t reserve_gib) {
  PlanInput in;
  auto room = RoomFromMemory(128 * kGiB, reserve_gib * kGiB, kNvfp4WeightsTp2);
  REQUIRE(room.ok());
  in.room_bytes = *room;
  in.bytes_per_token = {11264, 704};
  in.page_size = 512;
  in.fixed_bytes = kKdaStateTp2;
  in.lanes = 8;
  in.context = kMillion;
  in.layout = Layout::kPages;
  in.split_ranks = 2;
  return in;
}

TEST_CASE("plan fit: the room is memory less reserve and weights - or refused with the three", "[plan]") {
  auto room = RoomFromMemory(128 * kGiB, 28 * kGiB, kNvfp4WeightsTp2);
  REQUIRE(room.ok());
  CHECK(*room == 11600094140);  // 10.80 GiB
  CHECK(*RoomFromMemory(kGiB, 0, kGiB) == 0);
  auto short_of = RoomFromMemory(100 * kGiB, 28 * kGiB, kNvfp4WeightsTp2);
  REQUIRE_FALSE(short_of.ok());
  CHECK(short_of.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(short_of.status().message()) ==
        "a rank's 100.00 GiB of memory do not hold its 89.20 GiB of weights and the 28.00 GiB reserve (117.20 GiB): "
        "add ranks, or memory");
  CHECK(RoomFromMemory(-1, 0, 0).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("plan fit: with a 24 GiB reserve two 1M windows fit at once and eight lanes share 256K each",
          "[plan][owner_split]") {
  const PlanInput in = FlashTp2(24);
  auto p = ComputePlan(in);
  REQUIRE(p.ok());
  CHECK(p->pages == 4104);
  CHECK(p->latent_pages == 2052);
  CHECK(p->tokens == 2101248);
  const StreamFit f = FitStreams(in, *p);
  CHECK(f.whole_windows == 2);    // 4104 key pages / 2049, and one window of latent on each owner
  CHECK(f.even_tokens == 262144);  // 513 pages a lane (2052 latent pages over 4 lanes an owner), less one
}

TEST_CASE("plan fit: with the default 28 GiB reserve a 1M window is refused and 909 -389 tokens fit",
          "[plan][owner_split]") {
  PlanInput in = FlashTp2(28);
  auto refused = ComputePlan(in);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(std::string(refused.status().message()),
                 "needs 11.70 GiB for a window of 2049 pages on its owner and a page for each other lane, and the "
                 "streams' budget is 6.21 GiB (of the 10.80 GiB room, 4.09 GiB went to the prompt cache and 0.50 GiB "
                 "to the other lanes' fixed state)"));
  const int64_t longest = LongestContext(in);
  CHECK(longest == 909389);
  in.context = longest;
  auto p = ComputePlan(in);
  REQUIRE(p.ok());
  CHECK(p->pages == 2251);
  CHECK(p->latent_pages == 1778);
  const StreamFit f = FitStreams(in, *p);
  CHECK(f.whole_windows == 1);
  CHECK(f.even_tokens == 143360);
  in.context = longest + 1;
  CHECK_FALSE(ComputePlan(in).ok());
}

TEST_CASE("plan fit: windows give every lane its window and unsplit pages share the pool", "[plan]") {
  PlanInput in = FlashTp2(0);
  in.split_ranks = 1;
  in.room_bytes = 60 * kGiB;
  in.cache_budget_bytes = 0;
  auto pages = ComputePlan(in);
  REQUIRE(pages.ok());
  const StreamFit f = FitStreams(in, *pages);
  CHECK(f.whole_windows == pages->pages / pages->window_pages);
  CHECK(f.even_tokens == (pages->pages / 8 - 1) * 512);
  in.layout = Layout::kWindows;
  in.context = 65536;
  auto windows = ComputePlan(in);
  REQUIRE(windows.ok());
  const StreamFit w = FitStreams(in, *windows);
  CHECK(w.whole_windows == 8);
  CHECK(w.even_tokens == 65536);
  // A room that holds not even a one-token window.
  in.room_bytes = 0;
  CHECK(LongestContext(in) == 0);
}

}  // namespace
}  // namespace ferry::kvpool
