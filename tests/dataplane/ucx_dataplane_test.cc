// The UCX data plane between real processes on loopback (see ucx_process_group.h).
#include "dataplane/ucx_dataplane.h"

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "tests/catch.h"
#include "tests/dataplane/ucx_process_group.h"

namespace ferry::dataplane {
namespace {

using std::chrono::milliseconds;
using testing::RankReport;
using testing::RunUcxRanks;

constexpr milliseconds kWait{5000};

// A body's findings as "key=value" lines, so one run can check several things.
using Findings = std::map<std::string, std::string>;
std::string Line(const std::string& key, const std::string& value) {
  return key + "=" + value + "\n";
}
Findings Parse(const std::string& payload) {
  Findings f;
  size_t pos = 0;
  while (pos < payload.size()) {
    size_t nl = payload.find('\n', pos);
    if (nl == std::string::npos) nl = payload.size();
    std::string line = payload.substr(pos, nl - pos);
    size_t eq = line.find('=');
    if (eq != std::string::npos) f[line.substr(0, eq)] = line.substr(eq + 1);
    pos = nl + 1;
  }
  return f;
}
std::string StatusLine(const absl::Status& st) {
  return absl::StrCat(absl::StatusCodeToString(st.code()), ": ", st.message());
}

absl::Status SendString(DataPlane& dp, int peer, uint64_t tag, const std::string& s) {
  FERRY_ASSIGN_OR_RETURN(auto req, dp.PostSend(peer, tag, s.data(), s.size()));
  return req->Wait(kWait);
}

void RequireAllReported(const std::vector<RankReport>& reports) {
  for (size_t r = 0; r < reports.size(); ++r) {
    INFO("rank " << r << ": " << reports[r].status.ToString() << " exit " << reports[r].exit_code);
    REQUIRE(reports[r].reported);
    REQUIRE(reports[r].status.ok());
    CHECK(reports[r].exit_code == 0);
  }
}

TEST_CASE("UcxDataPlane between 2 processes: tag matching - truncation - cancel - bad input",
          "[dataplane][ucx]") {
  const auto t0 = std::chrono::steady_clock::now();
  auto reports = RunUcxRanks(2, [](UcxDataPlane& dp, std::string* out) -> absl::Status {
    *out += Line("transport", dp.capabilities().transport);
    if (dp.rank() == 0) {
      // Tag matching: tag 10 goes first, the receiver takes tag 11 first.
      const std::string first = "sent first", second = "sent second";
      FERRY_ASSIGN_OR_RETURN(auto s10, dp.PostSend(1, 10, first.data(), first.size()));
      FERRY_ASSIGN_OR_RETURN(auto s11, dp.PostSend(1, 11, second.data(), second.size()));
      FERRY_RETURN_IF_ERROR(s10->Wait(kWait));
      FERRY_RETURN_IF_ERROR(s11->Wait(kWait));
      // Truncation, eagerly sent and by rendezvous.
      std::string small(64, 's'), big(1 << 20, 'b');
      FERRY_RETURN_IF_ERROR(SendString(dp, 1, 12, small));
      FERRY_ASSIGN_OR_RETURN(auto big_send, dp.PostSend(1, 13, big.data(), big.size()));
      // Cancel: wait until rank 1 dropped its first receive, then send once.
      char go = 0;
      FERRY_ASSIGN_OR_RETURN(auto go_recv, dp.PostRecv(1, 14, &go, 1));
      FERRY_RETURN_IF_ERROR(go_recv->Wait(kWait));
      FERRY_RETURN_IF_ERROR(SendString(dp, 1, 15, "after cancel"));
      // The big send completes once the receiver has dealt with it (with an error there).
      absl::Status big_status = big_send->Wait(kWait);
      *out += Line("big_send", StatusLine(big_status));
      // Bad input is refused before anything is posted.
      char byte = 0;
      *out += Line("tag_too_big",
                   StatusLine(dp.PostSend(1, UcxDataPlane::kMaxUserTag + 1, &byte, 1).status()));
      *out += Line("recv_tag_too_big",
                   StatusLine(dp.PostRecv(1, uint64_t{1} << 63, &byte, 1).status()));
      *out += Line("max_tag", StatusLine(SendString(dp, 1, UcxDataPlane::kMaxUserTag, "max")));
      *out += Line("self_peer", StatusLine(dp.PostSend(0, 1, &byte, 1).status()));
      *out += Line("bad_peer", StatusLine(dp.PostRecv(2, 1, &byte, 1).status()));
      return absl::OkStatus();
    }
    std::string a(32, '\0'), b(32, '\0');
    FERRY_ASSIGN_OR_RETURN(auto rb, dp.PostRecv(0, 11, b.data(), b.size()));
    FERRY_RETURN_IF_ERROR(rb->Wait(kWait));  // before even posting tag 10
    FERRY_ASSIGN_OR_RETURN(auto ra, dp.PostRecv(0, 10, a.data(), a.size()));
    FERRY_RETURN_IF_ERROR(ra->Wait(kWait));
    *out += Line("tag11", b.substr(0, rb->bytes()));
    *out += Line("tag10", a.substr(0, ra->bytes()));

    std::string small(16, '\0'), big(512 << 10, '\0');
    FERRY_ASSIGN_OR_RETURN(auto rs, dp.PostRecv(0, 12, small.data(), small.size()));
    *out += Line("truncated_small", StatusLine(rs->Wait(kWait)));
    FERRY_ASSIGN_OR_RETURN(auto rbig, dp.PostRecv(0, 13, big.data(), big.size()));
    *out += Line("truncated_big", StatusLine(rbig->Wait(kWait)));

    std::string dropped(16, '\0'), kept(16, '\0');
    FERRY_ASSIGN_OR_RETURN(auto first, dp.PostRecv(0, 15, dropped.data(), dropped.size()));
    *out += Line("first_pending", first->Test() ? "no" : "yes");
    first.reset();  // cancels the receive
    FERRY_ASSIGN_OR_RETURN(auto second, dp.PostRecv(0, 15, kept.data(), kept.size()));
    FERRY_RETURN_IF_ERROR(SendString(dp, 0, 14, "g"));
    FERRY_RETURN_IF_ERROR(second->Wait(kWait));
    *out += Line("kept", kept.substr(0, second->bytes()));
    *out += Line("dropped_untouched", dropped == std::string(16, '\0') ? "yes" : "no");

    std::string max(8, '\0');
    FERRY_ASSIGN_OR_RETURN(auto rmax, dp.PostRecv(0, UcxDataPlane::kMaxUserTag, max.data(), 8));
    FERRY_RETURN_IF_ERROR(rmax->Wait(kWait));
    *out += Line("max", max.substr(0, rmax->bytes()));
    return absl::OkStatus();
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RequireAllReported(reports);
  Findings r0 = Parse(reports[0].payload), r1 = Parse(reports[1].payload);
  INFO("rank 0:\n" << reports[0].payload << "rank 1:\n" << reports[1].payload);
  CHECK(r0["transport"].rfind("ucx(", 0) == 0);
  CHECK(r1["tag11"] == "sent second");
  CHECK(r1["tag10"] == "sent first");
  CHECK(r1["truncated_small"].rfind("INVALID_ARGUMENT: message of 64 bytes", 0) == 0);
  CHECK(r1["truncated_small"].find("16-byte receive buffer") != std::string::npos);
  CHECK(r1["truncated_big"].rfind("INVALID_ARGUMENT:", 0) == 0);
  CHECK(r1["truncated_big"].find("1048576 bytes") != std::string::npos);
  CHECK(r1["truncated_big"].find("524288-byte receive buffer") != std::string::npos);
  CHECK(r1["first_pending"] == "yes");
  CHECK(r1["kept"] == "after cancel");
  CHECK(r1["dropped_untouched"] == "yes");
  CHECK(r1["max"] == "max");
  CHECK(r0["max_tag"] == "OK: ");
  CHECK(r0["tag_too_big"].rfind("INVALID_ARGUMENT:", 0) == 0);
  CHECK(r0["recv_tag_too_big"].rfind("INVALID_ARGUMENT:", 0) == 0);
  CHECK(r0["self_peer"].rfind("INVALID_ARGUMENT:", 0) == 0);
  CHECK(r0["bad_peer"].rfind("INVALID_ARGUMENT:", 0) == 0);
  INFO("took " << seconds << " s");
  CHECK(seconds < 10);
}

// FNV-1a over bytes, to compare large buffers across processes without shipping them.
uint64_t Digest(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint8_t Pattern(int rank, size_t i) {
  return static_cast<uint8_t>((i * 2654435761u) >> 13) ^ static_cast<uint8_t>(rank * 77);
}

TEST_CASE("UcxDataPlane: a peer without the deployment's nonce is refused at the handshake", "[dataplane][ucx]") {
  // Rank 1 was given another nonce (a process of another deployment, or one that guessed the
  // addresses): every rank refuses the connection, naming the rank the peer claimed.
  auto reports = RunUcxRanks(
      2, [](UcxDataPlane&, std::string*) { return absl::OkStatus(); }, std::chrono::seconds(15),
      [](int rank) { return rank == 1 ? uint64_t{0xbad} : uint64_t{0x600d}; });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << reports[r].status.ToString());
    REQUIRE(reports[r].reported);
    CHECK(reports[r].status.code() == absl::StatusCode::kPermissionDenied);
    CHECK(reports[r].status.message().find(absl::StrCat("connected as rank ", 1 - r)) != std::string::npos);
    CHECK(reports[r].status.message().find("nonce") != std::string::npos);
  }
}

TEST_CASE("UcxDataPlane moves 64 MiB each way between 2 processes at once", "[dataplane][ucx]") {
  constexpr size_t kBytes = size_t{64} << 20;
  auto reports = RunUcxRanks(2, [](UcxDataPlane& dp, std::string* out) -> absl::Status {
    const int peer = 1 - dp.rank();
    std::vector<uint8_t> mine(kBytes), theirs(kBytes, 0);
    for (size_t i = 0; i < kBytes; ++i) mine[i] = Pattern(dp.rank(), i);
    const auto t0 = std::chrono::steady_clock::now();
    FERRY_ASSIGN_OR_RETURN(auto recv, dp.PostRecv(peer, 1, theirs.data(), kBytes));
    FERRY_ASSIGN_OR_RETURN(auto send, dp.PostSend(peer, 1, mine.data(), kBytes));
    FERRY_RETURN_IF_ERROR(recv->Wait(kWait));
    FERRY_RETURN_IF_ERROR(send->Wait(kWait));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    size_t wrong = 0;
    for (size_t i = 0; i < kBytes; ++i) wrong += theirs[i] != Pattern(peer, i);
    *out += Line("bytes", std::to_string(recv->bytes()));
    *out += Line("wrong", std::to_string(wrong));
    *out += Line("sent_digest", std::to_string(Digest(mine.data(), kBytes)));
    *out += Line("received_digest", std::to_string(Digest(theirs.data(), kBytes)));
    *out += Line("seconds", std::to_string(secs));
    return absl::OkStatus();
  });
  RequireAllReported(reports);
  Findings r0 = Parse(reports[0].payload), r1 = Parse(reports[1].payload);
  INFO("rank 0:\n" << reports[0].payload << "rank 1:\n" << reports[1].payload);
  CHECK(r0["bytes"] == std::to_string(kBytes));
  CHECK(r1["bytes"] == std::to_string(kBytes));
  CHECK(r0["wrong"] == "0");
  CHECK(r1["wrong"] == "0");
  CHECK(r0["received_digest"] == r1["sent_digest"]);
  CHECK(r1["received_digest"] == r0["sent_digest"]);
}

TEST_CASE("UcxDataPlane: a peer that exits fails the survivor's transfers - not hangs",
          "[dataplane][ucx]") {
  constexpr milliseconds kTimeout{5000};
  auto reports = RunUcxRanks(2, [&](UcxDataPlane& dp, std::string* out) -> absl::Status {
    if (dp.rank() == 1) _exit(0);  // dies right after connecting, data plane and all
    uint64_t never = 0;
    const auto t0 = std::chrono::steady_clock::now();
    FERRY_ASSIGN_OR_RETURN(auto recv, dp.PostRecv(1, 1, &never, sizeof(never)));
    *out += Line("recv", StatusLine(recv->Wait(kTimeout)));
    *out += Line("seconds", std::to_string(std::chrono::duration<double>(
                                               std::chrono::steady_clock::now() - t0)
                                               .count()));
    // Sending to the dead peer fails too, at posting or at completion.
    std::vector<char> payload(1 << 20, 'x');
    auto send = dp.PostSend(1, 2, payload.data(), payload.size());
    absl::Status send_status = send.ok() ? (*send)->Wait(kTimeout) : send.status();
    *out += Line("send", StatusLine(send_status));
    return absl::OkStatus();
  });
  REQUIRE(reports[0].reported);
  REQUIRE(reports[0].status.ok());
  CHECK(reports[0].exit_code == 0);
  CHECK_FALSE(reports[1].reported);
  CHECK(reports[1].exit_code == 0);
  Findings r0 = Parse(reports[0].payload);
  INFO(reports[0].payload);
  // UNAVAILABLE once UCX notices (tcp: at once); at worst the Wait timeout.
  CHECK((r0["recv"].rfind("UNAVAILABLE:", 0) == 0 || r0["recv"].rfind("DEADLINE_EXCEEDED", 0) == 0));
  CHECK(std::stod(r0["seconds"]) < 5.5);
  CHECK(r0["send"].rfind("OK", 0) != 0);
}

}  // namespace
}  // namespace ferry::dataplane
