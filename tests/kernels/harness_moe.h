// The decode MoE dispatch's test pieces shared by harness_moe.cc (MoeGemvBf16) and
// harness_fp8.cc (GroupedLinearW8A8Moe): a routing's shape, the CPU's expert-ordered pair list
// and the device buffers of one MoeGroupPairs call.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/gemv.h"
#include "tests/kernels/harness.h"

namespace ferry::harness {

struct MoeShape {
  int64_t rows, top_k, n_experts, in, out;
  bool shared;
  bool bad_id;  // one pair names expert n_experts (out of range)
};

// The CPU's list: valid pairs by expert then pair index, then the shared rows.
struct HostPairs {
  std::vector<int32_t> group_expert, group_start, group_count, order, src_row;
};
inline HostPairs SortPairs(const std::vector<int32_t>& ids, const MoeShape& s) {
  HostPairs h;
  for (int32_t e = 0; e < s.n_experts; ++e) {
    const int32_t start = static_cast<int32_t>(h.order.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] != e) continue;
      h.order.push_back(static_cast<int32_t>(i));
      h.src_row.push_back(static_cast<int32_t>(i / s.top_k));
    }
    if (static_cast<int32_t>(h.order.size()) > start) {
      h.group_expert.push_back(e);
      h.group_start.push_back(start);
      h.group_count.push_back(static_cast<int32_t>(h.order.size()) - start);
    }
  }
  if (s.shared) {
    h.group_expert.push_back(static_cast<int32_t>(s.n_experts));
    h.group_start.push_back(static_cast<int32_t>(h.order.size()));
    h.group_count.push_back(static_cast<int32_t>(s.rows));
    for (int32_t r = 0; r < s.rows; ++r) {
      h.order.push_back(-1);
      h.src_row.push_back(r);
    }
  }
  return h;
}

// The device buffers of one dispatch of `rows` rows.
struct DevicePairs {
  cu::MoePairs p;
  int32_t* error = nullptr;
  int64_t max_groups = 0;
};
inline DevicePairs TakePairs(Device& dev, const MoeShape& s, int64_t rows) {
  DevicePairs d;
  d.max_groups = cu::MoeMaxGroups(rows, s.top_k, s.n_experts, s.shared);
  const size_t g = static_cast<size_t>(d.max_groups), n = static_cast<size_t>(rows * s.top_k + rows);
  d.p = {dev.Poisoned<int32_t>(g), dev.Poisoned<int32_t>(g), dev.Poisoned<int32_t>(g), dev.Poisoned<int32_t>(1),
         dev.Poisoned<int32_t>(n), dev.Poisoned<int32_t>(n)};
  d.error = dev.Upload(std::vector<int32_t>{0});
  return d;
}

}  // namespace ferry::harness
