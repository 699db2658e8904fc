// A tensor-parallel group of W ranks on W threads of one process, for tests: each rank's
// AllReduceSum waits for the others and sums every rank's buffer in rank order 0..W-1, so all
// ranks get the same bits (the reduction order the real data plane uses too).
#pragma once

#include <barrier>
#include <memory>
#include <span>
#include <vector>

#include "model/parallel/tensor_parallel.h"

namespace ferry::testing {

class ThreadGroup {
 public:
  explicit ThreadGroup(int world);
  ~ThreadGroup();
  // The collective of rank r. REQUIRES: 0 <= r < world; each used by one thread.
  model::Collective* rank(int r);

 private:
  class Rank;
  int world_;
  std::barrier<> barrier_;
  std::vector<float*> slots_;
  std::vector<const std::vector<std::span<const float>>*> sends_;  // Exchange: each rank's send list
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace ferry::testing
