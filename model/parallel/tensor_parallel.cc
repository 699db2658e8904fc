#include "model/parallel/tensor_parallel.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ferry::model {

absl::Status Collective::Exchange(const std::vector<std::span<const float>>&, const std::vector<std::span<float>>&) {
  return absl::UnimplementedError("this collective cannot exchange buffers between ranks");
}

absl::Status ExchangeInPieces(const TensorParallel& tp, const std::vector<std::span<const float>>& send,
                              const std::vector<std::span<float>>& recv, int64_t most, int64_t piece,
                              OwnerSplitStats* stats, int64_t* pieces) {
  const size_t world = static_cast<size_t>(tp.world);
  for (int64_t at = 0; at < most; at += piece) {
    std::vector<std::span<const float>> s(world);
    std::vector<std::span<float>> r(world);
    for (size_t q = 0; q < world; ++q) {
      if (static_cast<int>(q) == tp.rank) continue;
      if (q < send.size() && static_cast<int64_t>(send[q].size()) > at) {
        s[q] = send[q].subspan(static_cast<size_t>(at), static_cast<size_t>(std::min<int64_t>(piece, static_cast<int64_t>(send[q].size()) - at)));
      }
      if (q < recv.size() && static_cast<int64_t>(recv[q].size()) > at) {
        r[q] = recv[q].subspan(static_cast<size_t>(at), static_cast<size_t>(std::min<int64_t>(piece, static_cast<int64_t>(recv[q].size()) - at)));
      }
      if (stats) stats->floats_sent += static_cast<int64_t>(s[q].size());
    }
    const auto t0 = std::chrono::steady_clock::now();
    FERRY_RETURN_IF_ERROR(tp.comm->Exchange(s, r));
    if (stats) stats->exchange_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (pieces) ++*pieces;
  }
  return absl::OkStatus();
}

absl::Status CheckDivisible(const std::string& what, int64_t n, int world) {
  if (world < 1) return absl::InvalidArgumentError(absl::StrCat("tensor-parallel width ", world, " is not >= 1"));
  if (n % world != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " (", n, ") does not split over ", world,
                                                   " tensor-parallel ranks"));
  }
  return absl::OkStatus();
}

}  // namespace ferry::model
