#include "dataplane/dataplane.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ferry::dataplane {
namespace {

constexpr char kWaitedForUrl[] = "type.ferry.dev/ferry.dataplane.WaitedFor";

}  // namespace

absl::Status WithWaitedFor(absl::Status st, const std::vector<int>& peers) {
  if (!st.ok() && !peers.empty()) st.SetPayload(kWaitedForUrl, absl::Cord(absl::StrJoin(peers, ",")));
  return st;
}

std::vector<int> WaitedFor(const absl::Status& st) {
  std::vector<int> peers;
  const auto payload = st.GetPayload(kWaitedForUrl);
  if (!payload.has_value()) return peers;
  for (absl::string_view piece : absl::StrSplit(std::string(*payload), ',', absl::SkipEmpty())) {
    int peer = 0;
    if (absl::SimpleAtoi(piece, &peer)) peers.push_back(peer);
  }
  return peers;
}

}  // namespace ferry::dataplane
