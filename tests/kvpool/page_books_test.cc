#include "kvpool/page_books.h"

#include <random>

#include "tests/catch.h"

namespace ferry::kvpool {
namespace {

TEST_CASE("page books: allocate lowest ids first - share and release", "[kvpool][books]") {
  PageBooks b(8);
  CHECK(b.free_pages() == 8);
  auto a = b.Allocate(3);
  REQUIRE(a.ok());
  CHECK(*a == std::vector<int32_t>{0, 1, 2});
  auto c = b.Allocate(2);
  REQUIRE(c.ok());
  CHECK(*c == std::vector<int32_t>{3, 4});
  CHECK(b.used_pages() == 5);
  // A kept prefix shares pages 0 and 1.
  REQUIRE(b.AddRef(std::vector<int32_t>{0, 1}).ok());
  CHECK(b.refcount(0) == 2);
  REQUIRE(b.Release(*a).ok());
  CHECK(b.refcount(0) == 1);
  CHECK(b.refcount(2) == 0);
  CHECK(b.free_pages() == 4);
  // The freed page 2 is the lowest free id now.
  CHECK(*b.Allocate(1) == std::vector<int32_t>{2});
  REQUIRE(b.CheckInvariants().ok());
}

TEST_CASE("page books: errors leave the books unchanged", "[kvpool][books]") {
  PageBooks b(4);
  auto a = b.Allocate(2);
  REQUIRE(a.ok());
  auto too_many = b.Allocate(3);
  REQUIRE_FALSE(too_many.ok());
  CHECK(too_many.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(too_many.status().message()) == "need 3 pages, 2 of 4 are free");
  CHECK(b.free_pages() == 2);
  absl::Status st = b.Release(std::vector<int32_t>{0, 3});
  CHECK(st.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(st.message()).find("page 3: it is free") != std::string::npos);
  CHECK(b.refcount(0) == 1);  // page 0 was not released either
  CHECK(b.Release(std::vector<int32_t>{1, 1}).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(b.AddRef(std::vector<int32_t>{7}).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(b.used_pages() == 2);
  REQUIRE(b.CheckInvariants().ok());
}

TEST_CASE("page books: a random walk of allocations - shares and releases keeps the invariants",
          "[kvpool][books]") {
  PageBooks b(64);
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> holders;
  for (int step = 0; step < 5000; ++step) {
    const int op = static_cast<int>(rng() % 3);
    if (op == 0) {
      auto p = b.Allocate(1 + rng() % 6);
      if (p.ok()) holders.push_back(*p);
    } else if (op == 1 && !holders.empty()) {
      const auto& h = holders[rng() % holders.size()];
      REQUIRE(b.AddRef(h).ok());
      holders.push_back(h);
    } else if (!holders.empty()) {
      const size_t i = rng() % holders.size();
      REQUIRE(b.Release(holders[i]).ok());
      holders.erase(holders.begin() + static_cast<long>(i));
    }
    REQUIRE(b.CheckInvariants().ok());
  }
  for (const auto& h : holders) REQUIRE(b.Release(h).ok());
  CHECK(b.free_pages() == 64);  // nothing leaked
}

}  // namespace
}  // namespace ferry::kvpool
