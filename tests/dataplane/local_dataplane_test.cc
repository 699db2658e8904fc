#include "dataplane/local_dataplane.h"

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/catch.h"

namespace ferry::dataplane {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<Request> Send(DataPlane& dp, int peer, uint64_t tag, const std::string& s) {
  auto r = dp.PostSend(peer, tag, s.data(), s.size());
  REQUIRE(r.ok());
  return std::move(r).value();
}

std::unique_ptr<Request> Recv(DataPlane& dp, int peer, uint64_t tag, std::string& buf) {
  auto r = dp.PostRecv(peer, tag, buf.data(), buf.size());
  REQUIRE(r.ok());
  return std::move(r).value();
}

TEST_CASE("LocalDataPlane matches (peer - tag) exactly and keeps posting order", "[dataplane]") {
  auto group = MakeLocalGroup(3);
  REQUIRE(group.size() == 3);
  CHECK(group[1]->rank() == 1);
  CHECK(group[1]->world() == 3);
  CHECK(group[1]->capabilities().transport == "local");

  // Rank 0 sends tag 1 then tag 2; rank 2 sends tag 1. Rank 1 receives in another order.
  auto s1 = Send(*group[0], 1, 1, "zero-one");
  auto s2 = Send(*group[0], 1, 2, "zero-two");
  auto s3 = Send(*group[2], 1, 1, "two-one");
  CHECK(s1->Test());
  CHECK(s1->bytes() == 8);

  std::string a(16, '\0'), b(16, '\0'), c(16, '\0');
  auto r2 = Recv(*group[1], 0, 2, a);  // the later message first
  auto r3 = Recv(*group[1], 2, 1, b);  // same tag, other peer
  auto r1 = Recv(*group[1], 0, 1, c);
  REQUIRE(r2->Wait(milliseconds(100)).ok());
  REQUIRE(r3->Wait(milliseconds(100)).ok());
  REQUIRE(r1->Wait(milliseconds(100)).ok());
  CHECK(a.substr(0, r2->bytes()) == "zero-two");
  CHECK(b.substr(0, r3->bytes()) == "two-one");
  CHECK(c.substr(0, r1->bytes()) == "zero-one");

  // Several messages with one (peer, tag) arrive in sending order, whether the receives were
  // posted before or after the sends.
  std::string x(4, '\0'), y(4, '\0'), z(4, '\0');
  auto rx = Recv(*group[2], 0, 9, x);
  Send(*group[0], 2, 9, "aaaa");
  Send(*group[0], 2, 9, "bbbb");
  Send(*group[0], 2, 9, "cccc");
  auto ry = Recv(*group[2], 0, 9, y);
  auto rz = Recv(*group[2], 0, 9, z);
  REQUIRE(rx->Wait(milliseconds(100)).ok());
  REQUIRE(ry->Wait(milliseconds(100)).ok());
  REQUIRE(rz->Wait(milliseconds(100)).ok());
  CHECK(x == "aaaa");
  CHECK(y == "bbbb");
  CHECK(z == "cccc");
}

TEST_CASE("LocalDataPlane reports errors with the numbers", "[dataplane]") {
  auto group = MakeLocalGroup(2);

  SECTION("a message longer than the receive buffer") {
    Send(*group[0], 1, 5, std::string(64, 'q'));
    std::string small(16, '\0');
    auto r = Recv(*group[1], 0, 5, small);
    absl::Status st = r->Wait(milliseconds(100));
    CHECK(absl::IsInvalidArgument(st));
    INFO(st.message());
    CHECK(st.message().find("64 bytes") != std::string::npos);
    CHECK(st.message().find("16-byte") != std::string::npos);
  }
  SECTION("bad peers") {
    char buf[4];
    CHECK(absl::IsInvalidArgument(group[0]->PostSend(0, 1, buf, 4).status()));
    CHECK(absl::IsInvalidArgument(group[0]->PostSend(2, 1, buf, 4).status()));
    CHECK(absl::IsInvalidArgument(group[0]->PostRecv(-1, 1, buf, 4).status()));
  }
  SECTION("a timed-out wait leaves the receive posted") {
    std::string buf(8, '\0');
    auto r = Recv(*group[1], 0, 3, buf);
    CHECK_FALSE(r->Test());
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(absl::IsDeadlineExceeded(r->Wait(milliseconds(50))));
    CHECK(std::chrono::steady_clock::now() - t0 >= milliseconds(50));
    Send(*group[0], 1, 3, "late");
    REQUIRE(r->Wait(milliseconds(100)).ok());
    CHECK(r->bytes() == 4);
    CHECK(buf.substr(0, 4) == "late");
  }
  SECTION("destroying an incomplete receive cancels it") {
    std::string first(8, '\0'), second(8, '\0');
    Recv(*group[1], 0, 4, first).reset();
    auto r = Recv(*group[1], 0, 4, second);
    Send(*group[0], 1, 4, "only");
    REQUIRE(r->Wait(milliseconds(100)).ok());
    CHECK(second.substr(0, 4) == "only");
    CHECK(first == std::string(8, '\0'));
  }
  SECTION("a peer that goes away") {
    Send(*group[0], 1, 6, "sent-before");
    std::string queued(16, '\0'), never(16, '\0');
    auto pending = Recv(*group[1], 0, 7, never);
    group[0].reset();
    // What the peer sent before it went away is still delivered...
    auto r = Recv(*group[1], 0, 6, queued);
    REQUIRE(r->Wait(milliseconds(100)).ok());
    CHECK(queued.substr(0, r->bytes()) == "sent-before");
    // ...and the rest fails instead of waiting forever.
    CHECK(absl::IsUnavailable(pending->Wait(milliseconds(1000))));
    char buf[4] = {};
    CHECK(absl::IsUnavailable(group[1]->PostSend(0, 1, buf, 4).status()));
  }
}

TEST_CASE("LocalDataPlane ranks on their own threads exchange in a ring", "[dataplane]") {
  constexpr int kWorld = 4;
  constexpr int kRounds = 200;
  auto group = MakeLocalGroup(kWorld);
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      DataPlane& dp = *group[r];
      const int next = (r + 1) % kWorld, prev = (r + kWorld - 1) % kWorld;
      for (int i = 0; i < kRounds; ++i) {
        uint64_t out = static_cast<uint64_t>(r) * 1000000 + i, in = 0;
        auto recv = dp.PostRecv(prev, i % 3, &in, sizeof(in));
        auto send = dp.PostSend(next, i % 3, &out, sizeof(out));
        if (!recv.ok() || !send.ok()) {
          errors[r] = "post failed";
          return;
        }
        absl::Status st = (*recv)->Wait(std::chrono::seconds(5));
        if (st.ok()) st = (*send)->Wait(std::chrono::seconds(5));
        if (!st.ok()) {
          errors[r] = std::string(st.message());
          return;
        }
        if (in != static_cast<uint64_t>(prev) * 1000000 + i) {
          errors[r] = "round " + std::to_string(i) + ": got " + std::to_string(in);
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    CHECK(errors[r].empty());
  }
}

}  // namespace
}  // namespace ferry::dataplane
