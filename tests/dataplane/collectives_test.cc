#include "dataplane/collectives.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "dataplane/local_dataplane.h"
#include "tests/catch.h"
#include "tests/dataplane/ucx_process_group.h"

namespace ferry::dataplane {
namespace {

using std::chrono::milliseconds;
using testing::FromBytes;
using testing::RankReport;
using testing::RunUcxRanks;
using testing::ToBytes;

// Rank r's input at i: values spread over 2^-12 .. 2^12 so the order of the additions changes
// the rounded result (see the order-sensitivity checks below).
float Input(int rank, size_t i) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(rank) + 1) *
                                                      0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  const float mantissa = static_cast<float>(h & 0xFFFFFF) / static_cast<float>(1 << 24) - 0.5f;
  const int exponent = static_cast<int>((h >> 24) % 9) * 3 - 12;
  return std::ldexp(mantissa, exponent);
}

std::vector<float> Inputs(int rank, size_t n, int salt = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Input(rank + salt, i);
  return v;
}

// The contract: ((x0 + x1) + x2) + ... in rank order.
std::vector<float> RankOrderSum(int world, size_t n, int salt = 0) {
  std::vector<float> sum = Inputs(salt, n);
  for (int r = 1; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) sum[i] += Input(r + salt, i);
  }
  return sum;
}

std::vector<float> ReverseOrderSum(int world, size_t n) {
  std::vector<float> sum = Inputs(world - 1, n);
  for (int r = world - 2; r >= 0; --r) {
    for (size_t i = 0; i < n; ++i) sum[i] += Input(r, i);
  }
  return sum;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs `body` for every rank of a local group, one thread per rank; returns their statuses.
std::vector<absl::Status> RunLocal(int world, const std::function<absl::Status(DataPlane&)>& body) {
  auto group = MakeLocalGroup(world);
  std::vector<absl::Status> statuses(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { statuses[r] = body(*group[r]); });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

TEST_CASE("WithContext keeps a timeout's code and the peers it waited for", "[dataplane]") {
  const absl::Status timeout = WithWaitedFor(absl::DeadlineExceededError("no answer"), {1, 3});
  const absl::Status st = WithContext("step 7: carrying latent rows", timeout);
  CHECK(absl::IsDeadlineExceeded(st));
  CHECK(st.message() == "step 7: carrying latent rows: no answer");
  CHECK(WaitedFor(st) == std::vector<int>{1, 3});
  CHECK(WithContext("anything", absl::OkStatus()).ok());
}

TEST_CASE("The test inputs make the reduction order visible", "[dataplane]") {
  // Were the collectives to sum in any other order, the bit comparisons below would catch it.
  for (int world : {3, 4}) {
    INFO("world " << world);
    CHECK_FALSE(SameBits(RankOrderSum(world, 1000), ReverseOrderSum(world, 1000)));
  }
}

TEST_CASE("AllReduceSum over local ranks is the rank-order sum - bit for bit - on every rank",
          "[dataplane]") {
  for (int world : {1, 2, 3, 4, 5}) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{5}, size_t{1000}, size_t{4099}}) {
      INFO("world " << world << ", n " << n);
      std::vector<std::vector<float>> first(world), second(world);
      auto statuses = RunLocal(world, [&](DataPlane& dp) -> absl::Status {
        first[dp.rank()] = Inputs(dp.rank(), n);
        FERRY_RETURN_IF_ERROR(AllReduceSum(dp, first[dp.rank()].data(), n, 7, milliseconds(5000)));
        // The same tag again right away: messages of one (peer, tag) match in order.
        second[dp.rank()] = Inputs(dp.rank(), n, 100);
        return AllReduceSum(dp, second[dp.rank()].data(), n, 7, milliseconds(5000));
      });
      const std::vector<float> want = RankOrderSum(world, n);
      const std::vector<float> want2 = RankOrderSum(world, n, 100);
      for (int r = 0; r < world; ++r) {
        INFO("rank " << r << ": " << statuses[r].ToString());
        REQUIRE(statuses[r].ok());
        CHECK(SameBits(first[r], want));
        CHECK(SameBits(second[r], want2));
      }
    }
  }
}

TEST_CASE("AllReduceSum keeps -0.0 and sums exactly representable values exactly",
          "[dataplane]") {
  auto statuses = RunLocal(3, [](DataPlane& dp) -> absl::Status {
    float v[3] = {-0.0f, 1.0f * (dp.rank() + 1), 0.5f};
    FERRY_RETURN_IF_ERROR(AllReduceSum(dp, v, 3, 1, milliseconds(5000)));
    if (!std::signbit(v[0]) || v[0] != 0.0f) return absl::InternalError("-0.0 lost its sign");
    if (v[1] != 6.0f || v[2] != 1.5f) return absl::InternalError("wrong sum");
    return absl::OkStatus();
  });
  for (const auto& st : statuses) CHECK(st.ok());
}

TEST_CASE("AllGather and Broadcast over local ranks", "[dataplane]") {
  constexpr int kWorld = 4;
  std::vector<std::string> gathered(kWorld), in_place(kWorld), broadcast(kWorld);
  auto statuses = RunLocal(kWorld, [&](DataPlane& dp) -> absl::Status {
    const int r = dp.rank();
    const std::string mine = absl::StrCat("rank", r, "!");  // 6 bytes each
    std::string all(kWorld * 6, '.');
    FERRY_RETURN_IF_ERROR(AllGather(dp, mine.data(), 6, all.data(), 3, milliseconds(5000)));
    gathered[r] = all;
    std::string inplace(kWorld * 6, '.');
    std::memcpy(inplace.data() + r * 6, mine.data(), 6);
    FERRY_RETURN_IF_ERROR(
        AllGather(dp, inplace.data() + r * 6, 6, inplace.data(), 3, milliseconds(5000)));
    in_place[r] = inplace;
    std::string data = r == 2 ? std::string(1000, 'R') : std::string(1000, '?');
    FERRY_RETURN_IF_ERROR(Broadcast(dp, 2, data.data(), data.size(), 4, milliseconds(5000)));
    broadcast[r] = data;
    return absl::OkStatus();
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r << ": " << statuses[r].ToString());
    REQUIRE(statuses[r].ok());
    CHECK(gathered[r] == "rank0!rank1!rank2!rank3!");
    CHECK(in_place[r] == "rank0!rank1!rank2!rank3!");
    CHECK(broadcast[r] == std::string(1000, 'R'));
  }
}

TEST_CASE("AllToAll delivers each pair's buffer of its own size - and refuses a size mismatch", "[dataplane]") {
  constexpr int kWorld = 4;
  // Rank r sends rank q (q != r) 3 * q + r bytes of the letter 'a' + r; rank 2 sends nothing to 0.
  auto size = [](int from, int to) -> size_t { return from == 2 && to == 0 ? 0 : 3 * to + from; };
  std::vector<std::vector<std::string>> got(kWorld, std::vector<std::string>(kWorld));
  auto statuses = RunLocal(kWorld, [&](DataPlane& dp) -> absl::Status {
    const int r = dp.rank();
    std::vector<std::string> out(kWorld), in(kWorld);
    std::vector<const void*> sp(kWorld);
    std::vector<void*> rp(kWorld);
    std::vector<size_t> sb(kWorld), rb(kWorld);
    for (int q = 0; q < kWorld; ++q) {
      if (q == r) continue;
      out[q] = std::string(size(r, q), static_cast<char>('a' + r));
      in[q] = std::string(size(q, r), '?');
      sp[q] = out[q].data();
      sb[q] = out[q].size();
      rp[q] = in[q].data();
      rb[q] = in[q].size();
    }
    FERRY_RETURN_IF_ERROR(AllToAll(dp, sp, sb, rp, rb, 5, milliseconds(5000)));
    got[r] = in;
    return absl::OkStatus();
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r << ": " << statuses[r].ToString());
    REQUIRE(statuses[r].ok());
    for (int q = 0; q < kWorld; ++q) {
      if (q != r) CHECK(got[r][q] == std::string(size(q, r), static_cast<char>('a' + q)));
    }
  }
  // Rank 1 expects 8 bytes from rank 0, which sends 4: the receiver names both sizes.
  auto bad = RunLocal(2, [&](DataPlane& dp) -> absl::Status {
    std::string out(dp.rank() == 0 ? 4 : 2, 'x'), in(dp.rank() == 1 ? 8 : 2, '?');
    std::vector<const void*> sp = {out.data(), out.data()};
    std::vector<void*> rp = {in.data(), in.data()};
    std::vector<size_t> sb = {out.size(), out.size()}, rb = {in.size(), in.size()};
    return AllToAll(dp, sp, sb, rp, rb, 6, milliseconds(2000));
  });
  CHECK(bad[0].ok());
  CHECK(bad[1].code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad[1].message()).find("sent 4 bytes where 8 were expected") != std::string::npos);
}

TEST_CASE("Collectives fail instead of hanging when ranks are missing or disagree",
          "[dataplane]") {
  SECTION("a rank that never joins: DEADLINE_EXCEEDED after the timeout") {
    const auto t0 = std::chrono::steady_clock::now();
    auto statuses = RunLocal(2, [](DataPlane& dp) -> absl::Status {
      if (dp.rank() == 1) return absl::OkStatus();
      std::vector<float> v(16, 1.0f);
      return AllReduceSum(dp, v.data(), v.size(), 1, milliseconds(100));
    });
    const auto took = std::chrono::steady_clock::now() - t0;
    INFO(statuses[0].ToString());
    CHECK(absl::IsDeadlineExceeded(statuses[0]));
    CHECK(took < milliseconds(2000));
  }
  SECTION("a rank that went away: UNAVAILABLE") {
    auto group = MakeLocalGroup(2);
    group[1].reset();
    std::vector<float> v(16, 1.0f);
    absl::Status st = AllReduceSum(*group[0], v.data(), v.size(), 1, milliseconds(5000));
    INFO(st.ToString());
    CHECK(absl::IsUnavailable(st));
  }
  SECTION("ranks that disagree on n: INVALID_ARGUMENT on both") {
    auto statuses = RunLocal(2, [](DataPlane& dp) -> absl::Status {
      std::vector<float> v(dp.rank() == 0 ? 8 : 12, 1.0f);
      return AllReduceSum(dp, v.data(), v.size(), 1, milliseconds(2000));
    });
    for (const auto& st : statuses) {
      INFO(st.ToString());
      CHECK(absl::IsInvalidArgument(st));
    }
  }
  SECTION("a root outside the world") {
    auto group = MakeLocalGroup(2);
    char c = 0;
    CHECK(absl::IsInvalidArgument(Broadcast(*group[0], 2, &c, 1, 1)));
  }
}

// ---- Across processes, over UCX ----

// One run of every collective; the payload is the bytes of every result, for comparison.
absl::Status CollectivesBody(UcxDataPlane& dp, size_t n, std::string* out) {
  const int r = dp.rank();
  std::vector<float> big = Inputs(r, n);
  FERRY_RETURN_IF_ERROR(AllReduceSum(dp, big.data(), n, 1, milliseconds(5000)));
  std::vector<float> tiny = Inputs(r, 3, 100);  // fewer elements than ranks at world 4
  FERRY_RETURN_IF_ERROR(AllReduceSum(dp, tiny.data(), tiny.size(), 1, milliseconds(5000)));
  std::vector<uint64_t> all(dp.world(), 0);
  const uint64_t mine = 1000 + r;
  FERRY_RETURN_IF_ERROR(AllGather(dp, &mine, sizeof(mine), all.data(), 2, milliseconds(5000)));
  std::vector<float> bcast = r == dp.world() - 1 ? Inputs(r, 1024, 200) : std::vector<float>(1024);
  FERRY_RETURN_IF_ERROR(Broadcast(dp, dp.world() - 1, bcast.data(), bcast.size() * sizeof(float),
                                  3, milliseconds(5000)));
  *out = ToBytes(big) + ToBytes(tiny) + ToBytes(all) + ToBytes(bcast);
  return absl::OkStatus();
}

TEST_CASE("Collectives across 2 and 4 processes: rank-order sums - identical on every rank and run",
          "[dataplane][ucx]") {
  constexpr size_t kN = 100003;
  for (int world : {2, 4}) {
    INFO("world " << world);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<RankReport> runs[2];
    for (auto& reports : runs) {
      reports = RunUcxRanks(world, [&](UcxDataPlane& dp, std::string* out) {
        return CollectivesBody(dp, kN, out);
      });
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<uint64_t> gathered(world);
    for (int r = 0; r < world; ++r) gathered[r] = 1000 + r;
    const std::string want = ToBytes(RankOrderSum(world, kN)) +
                             ToBytes(RankOrderSum(world, 3, 100)) + ToBytes(gathered) +
                             ToBytes(Inputs(world - 1, 1024, 200));
    for (int run = 0; run < 2; ++run) {
      for (int r = 0; r < world; ++r) {
        const RankReport& rep = runs[run][r];
        INFO("run " << run << " rank " << r << ": " << rep.status.ToString() << ", exit "
                    << rep.exit_code << ", " << rep.seconds << " s in the body");
        REQUIRE(rep.reported);
        REQUIRE(rep.status.ok());
        CHECK(rep.exit_code == 0);
        CHECK(rep.payload.size() == want.size());
        CHECK(rep.payload == want);                       // the rank-order sum, bit for bit
        CHECK(rep.payload == runs[0][0].payload);         // the same on every rank and run
      }
    }
    INFO("two runs took " << seconds << " s");
    CHECK(seconds < 10);
  }
}

TEST_CASE("AllReduceSum of 64 MiB across 2 processes", "[dataplane][ucx]") {
  constexpr size_t kN = size_t{16} << 20;  // floats
  auto reports = RunUcxRanks(2, [](UcxDataPlane& dp, std::string* out) -> absl::Status {
    std::vector<float> v = Inputs(dp.rank(), kN);
    const auto t0 = std::chrono::steady_clock::now();
    FERRY_RETURN_IF_ERROR(AllReduceSum(dp, v.data(), kN, 9, milliseconds(10000)));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::vector<float> want = RankOrderSum(2, kN);
    size_t wrong = 0;
    for (size_t i = 0; i < kN; ++i) wrong += std::memcmp(&v[i], &want[i], sizeof(float)) != 0;
    *out = absl::StrCat(wrong, " ", secs);
    return absl::OkStatus();
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << reports[r].status.ToString() << " [" << reports[r].payload
                 << "] (wrong elements, seconds)");
    REQUIRE(reports[r].reported);
    REQUIRE(reports[r].status.ok());
    CHECK(reports[r].payload.rfind("0 ", 0) == 0);
    CHECK(reports[r].exit_code == 0);
  }
}

TEST_CASE("A rank that exits fails every survivor's AllReduceSum within the timeout",
          "[dataplane][ucx]") {
  constexpr milliseconds kTimeout{3000};
  auto reports = RunUcxRanks(4, [&](UcxDataPlane& dp, std::string* out) -> absl::Status {
    if (dp.rank() == 3) _exit(0);
    std::vector<float> v = Inputs(dp.rank(), 1000);
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status st = AllReduceSum(dp, v.data(), v.size(), 1, kTimeout);
    *out = absl::StrCat(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return st;
  });
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << reports[r].status.ToString() << " after " << reports[r].payload
                 << " s");
    REQUIRE(reports[r].reported);
    CHECK_FALSE(reports[r].status.ok());
    CHECK(std::stod(reports[r].payload) < 3.5);
    CHECK(reports[r].exit_code == 0);
  }
  CHECK_FALSE(reports[3].reported);
  CHECK(reports[3].exit_code == 0);
}

}  // namespace
}  // namespace ferry::dataplane
