#include "tests/testing/thread_collective.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ferry::testing {

class ThreadGroup::Rank final : public model::Collective {
 public:
  Rank(ThreadGroup* g, int r) : g_(g), r_(r) {}
  absl::Status AllReduceSum(float* data, int64_t n) override {
    g_->slots_[r_] = data;
    g_->barrier_.arrive_and_wait();  // every buffer is published
    sum_.assign(static_cast<size_t>(n), 0.0f);
    for (int k = 0; k < g_->world_; ++k) {
      const float* src = g_->slots_[k];
      for (int64_t i = 0; i < n; ++i) sum_[i] += src[i];
    }
    g_->barrier_.arrive_and_wait();  // nobody reads a buffer after this
    std::copy(sum_.begin(), sum_.end(), data);
    return absl::OkStatus();
  }
  absl::Status Exchange(const std::vector<std::span<const float>>& send,
                        const std::vector<std::span<float>>& recv) override {
    g_->sends_[r_] = &send;
    g_->barrier_.arrive_and_wait();  // every rank's sends are published
    absl::Status st;
    for (int q = 0; q < g_->world_; ++q) {
      if (q == r_) continue;
      const std::span<const float> from = (*g_->sends_[q])[static_cast<size_t>(r_)];
      if (from.size() != recv[q].size()) {
        st = absl::InvalidArgumentError(absl::StrCat("rank ", q, " sent ", from.size(), " floats to rank ", r_,
                                                     ", which expected ", recv[q].size()));
        continue;
      }
      std::copy(from.begin(), from.end(), recv[q].begin());
    }
    g_->barrier_.arrive_and_wait();  // nobody reads a send buffer after this
    return st;
  }

 private:
  ThreadGroup* g_;
  int r_;
  std::vector<float> sum_;
};

ThreadGroup::~ThreadGroup() = default;

model::Collective* ThreadGroup::rank(int r) { return ranks_[r].get(); }

ThreadGroup::ThreadGroup(int world)
    : world_(world), barrier_(world), slots_(static_cast<size_t>(world)), sends_(static_cast<size_t>(world)) {
  for (int r = 0; r < world; ++r) ranks_.push_back(std::make_unique<Rank>(this, r));
}

}  // namespace ferry::testing
