// A tensor-parallel group's model::Collective over a DataPlane (dataplane/collectives.h's fixed
// order reduction and all-to-all), counting the bytes this rank sends. Every transfer of a call
// completes within `timeout` or the call fails with DEADLINE_EXCEEDED naming the peers it still
// waited for (its requests are cancelled). Used by ferry-worker and by `ferry check-golden
// --ranks`, whose ranks are processes joined by the UCX data plane.
//
// Thread safety: one caller at a time (a rank's step loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "dataplane/dataplane.h"
#include "model/parallel/tensor_parallel.h"

namespace ferry::dataplane {

class GroupCollective final : public model::Collective {
 public:
  GroupCollective(DataPlane* dp, std::chrono::milliseconds timeout) : dp_(dp), timeout_(timeout) {}
  absl::Status AllReduceSum(float* data, int64_t n) override;
  absl::Status Exchange(const std::vector<std::span<const float>>& send,
                        const std::vector<std::span<float>>& recv) override;
  int64_t TakeBytes() override;

 private:
  static constexpr uint64_t kTag = 1;
  static constexpr uint64_t kExchangeTag = 2;
  DataPlane* dp_;
  std::chrono::milliseconds timeout_;
  int64_t bytes_ = 0;
};

}  // namespace ferry::dataplane
