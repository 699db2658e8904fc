#include "dataplane/group_collective.h"

#include <algorithm>
#include <utility>

#include "dataplane/collectives.h"

namespace ferry::dataplane {

absl::Status GroupCollective::AllReduceSum(float* data, int64_t n) {
  // Reduce-scatter then all-gather (collectives.h): this rank sends every other rank's slice
  // once, then its own summed slice to each of the W - 1 others.
  const int64_t w = dp_->world(), c = (n + w - 1) / w;
  auto slice = [&](int64_t q) { return std::max<int64_t>(0, std::min((q + 1) * c, n) - q * c); };
  int64_t floats = (w - 1) * slice(dp_->rank());
  for (int64_t q = 0; q < w; ++q) floats += q == dp_->rank() ? 0 : slice(q);
  bytes_ += floats * static_cast<int64_t>(sizeof(float));
  return dataplane::AllReduceSum(*dp_, data, static_cast<size_t>(n), kTag, timeout_);
}

absl::Status GroupCollective::Exchange(const std::vector<std::span<const float>>& send,
                                       const std::vector<std::span<float>>& recv) {
  std::vector<const void*> sp;
  std::vector<void*> rp;
  std::vector<size_t> sb, rb;
  for (size_t q = 0; q < send.size(); ++q) {
    sp.push_back(send[q].data());
    sb.push_back(send[q].size_bytes());
    if (static_cast<int>(q) != dp_->rank()) bytes_ += static_cast<int64_t>(send[q].size_bytes());
  }
  for (const auto& r : recv) {
    rp.push_back(r.data());
    rb.push_back(r.size_bytes());
  }
  return AllToAll(*dp_, sp, sb, rp, rb, kExchangeTag, timeout_);
}

int64_t GroupCollective::TakeBytes() { return std::exchange(bytes_, 0); }

}  // namespace ferry::dataplane
