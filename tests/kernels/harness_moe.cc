// ferry-kernel-check cases for the decode MoE dispatch: MoeGroupPairs (the expert-ordered pair
// list, exactly against a CPU counting sort) and MoeGemvBf16 (each pair's product against
// cpu::Linear by norm, and bit for bit against the same row dispatched alone: batch invariance).
// The FP8 experts' ops are harness_fp8.cc's.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/ops.h"
#include "tests/kernels/harness.h"
#include "tests/kernels/harness_moe.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

Result MoeGemvCase(std::mt19937& rng, const MoeShape& s) {
  Result r;
  r.tolerance = 1e-2;
  Device dev(&r.error);
  const int64_t R = s.rows, K = s.top_k, E = s.n_experts, nw = E + (s.shared ? 1 : 0);
  // Ids: each row's K distinct experts from a small pool, so experts repeat across rows.
  std::vector<int32_t> ids(static_cast<size_t>(R * K));
  const int32_t pool = static_cast<int32_t>(std::min<int64_t>(E, std::max<int64_t>(K, 3 * K / 2)));
  for (int64_t row = 0; row < R; ++row) {
    std::vector<int32_t> cand(static_cast<size_t>(pool));
    for (int32_t i = 0; i < pool; ++i) cand[i] = static_cast<int32_t>((i * 7 + row % 3) % E);
    std::shuffle(cand.begin(), cand.end(), rng);
    std::sort(cand.begin(), cand.begin() + K);
    std::copy(cand.begin(), cand.begin() + K, ids.begin() + row * K);
  }
  if (s.bad_id) ids[ids.size() / 2] = static_cast<int32_t>(E);
  // Matrices only for the experts some pair names (and the shared one); the others' table entries
  // stay null (the kernel reads only its groups' experts).
  std::vector<bool> named(static_cast<size_t>(nw), false);
  for (int32_t e : ids) {
    if (e >= 0 && e < E) named[static_cast<size_t>(e)] = true;
  }
  if (s.shared) named[static_cast<size_t>(E)] = true;
  std::vector<std::vector<float>> wf(static_cast<size_t>(nw));
  std::vector<const uint16_t*> table(static_cast<size_t>(nw), nullptr);
  for (int64_t e = 0; e < nw; ++e) {
    if (!named[static_cast<size_t>(e)]) continue;
    std::vector<uint16_t> wb;
    RandomBf16(static_cast<size_t>(s.out * s.in), 0.05f, 0.0f, rng, &wb, &wf[e]);
    table[e] = dev.Upload(wb);
  }
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  RandomBf16(static_cast<size_t>(R * s.in), 1.0f, 0.0f, rng, &xb, &xf);
  const uint16_t* const* d_table = reinterpret_cast<const uint16_t* const*>(dev.Upload(std::vector<uint64_t>(
      reinterpret_cast<const uint64_t*>(table.data()), reinterpret_cast<const uint64_t*>(table.data()) + nw)));
  const int32_t* d_ids = dev.Upload(ids);
  const uint16_t* d_x = dev.Upload(xb);
  const int64_t n_pairs = R * K + (s.shared ? R : 0);
  // y_gathered: one row per list entry (gate_up's layout); y_scattered: by pair index, shared apart.
  uint16_t* y_list = dev.Poisoned<uint16_t>(static_cast<size_t>(n_pairs * s.out));
  uint16_t* y_slots = dev.Poisoned<uint16_t>(static_cast<size_t>(R * K * s.out));
  uint16_t* y_shared = dev.Poisoned<uint16_t>(static_cast<size_t>(R * s.out));
  DevicePairs d = TakePairs(dev, s, R);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::MoeGroupPairs(d_ids, R, K, E, s.shared, d.p, d.error));
  // The scattered run passes over the groups two pairs at a time (a group may hold up to R): its
  // bits must still equal the list run's, which takes up to min(R, 8) a pass.
  HARNESS_CHECK_OK(
      cu::MoeGemvBf16(d_table, d.p, d.max_groups, R, d_x, true, s.in, s.out, y_list, false, nullptr));
  HARNESS_CHECK_OK(
      cu::MoeGemvBf16(d_table, d.p, d.max_groups, 2, d_x, true, s.in, s.out, y_slots, true, y_shared));
  HARNESS_CHECK_OK(cu::Synchronize());

  // The list, exactly.
  const HostPairs h = SortPairs(ids, s);
  const int64_t groups = static_cast<int64_t>(h.group_expert.size()), listed = static_cast<int64_t>(h.order.size());
  const int32_t n_groups = dev.Download(d.p.n_groups, 1)[0], error = dev.Download(d.error, 1)[0];
  r.mismatched += n_groups != groups;
  r.mismatched += error != (s.bad_id ? 1 : 0);
  auto same = [&](const int32_t* dv, const std::vector<int32_t>& hv) {
    const std::vector<int32_t> got = dev.Download(dv, hv.size());
    for (size_t i = 0; i < hv.size(); ++i) r.mismatched += got[i] != hv[i];
  };
  same(d.p.group_expert, h.group_expert);
  same(d.p.group_start, h.group_start);
  same(d.p.group_count, h.group_count);
  same(d.p.order, h.order);
  same(d.p.src_row, h.src_row);
  if (!r.error.empty() || r.mismatched > 0) {
    r.note = "the pair list differs from the CPU's";
    return r;
  }

  // Products: list layout against the CPU; the scattered copy equal to it bit for bit.
  const std::vector<uint16_t> list = dev.Download(y_list, static_cast<size_t>(listed * s.out));
  const std::vector<uint16_t> slots = dev.Download(y_slots, static_cast<size_t>(R * K * s.out));
  const std::vector<uint16_t> shared = dev.Download(y_shared, static_cast<size_t>(R * s.out));
  std::vector<float> want(static_cast<size_t>(listed * s.out));
  for (int64_t g = 0; g < groups; ++g) {
    for (int32_t j = h.group_start[g]; j < h.group_start[g] + h.group_count[g]; ++j) {
      cpu::Linear(xf.data() + h.src_row[j] * s.in, 1, s.in, wf[h.group_expert[g]].data(), s.out,
                  want.data() + j * s.out);
      const uint16_t* scattered = h.order[j] >= 0 ? slots.data() + h.order[j] * s.out
                                                   : shared.data() + h.src_row[j] * s.out;
      for (int64_t o = 0; o < s.out; ++o) r.mismatched += scattered[o] != list[j * s.out + o];
    }
  }
  r.rel_err = RelErr(ToF32(list), want, &r.unwritten);

  // Batch invariance: row R - 1 dispatched alone gives its pairs' bits.
  {
    const int64_t last = R - 1;
    std::vector<int32_t> one(ids.begin() + last * K, ids.end());
    DevicePairs d1 = TakePairs(dev, s, 1);
    const int32_t* d_one = dev.Upload(one);
    uint16_t* y1 = dev.Poisoned<uint16_t>(static_cast<size_t>(K * s.out));
    uint16_t* y1_shared = dev.Poisoned<uint16_t>(static_cast<size_t>(s.out));
    if (!r.error.empty()) return r;
    HARNESS_CHECK_OK(cu::MoeGroupPairs(d_one, 1, K, E, s.shared, d1.p, d1.error));
    HARNESS_CHECK_OK(cu::MoeGemvBf16(d_table, d1.p, d1.max_groups, 1, d_x + last * s.in, true, s.in, s.out, y1, true,
                                     y1_shared));
    HARNESS_CHECK_OK(cu::Synchronize());
    const std::vector<uint16_t> a = dev.Download(y1, static_cast<size_t>(K * s.out));
    long differ = 0;
    for (int64_t k = 0; k < K; ++k) {
      if (one[k] < 0 || one[k] >= E) continue;  // the bad pair is written by neither
      for (int64_t o = 0; o < s.out; ++o) differ += a[k * s.out + o] != slots[(last * K + k) * s.out + o];
    }
    if (s.shared) {
      const std::vector<uint16_t> b = dev.Download(y1_shared, static_cast<size_t>(s.out));
      for (int64_t o = 0; o < s.out; ++o) differ += b[o] != shared[last * s.out + o];
    }
    r.mismatched += differ;
    if (differ > 0) r.note = absl::StrCat(differ, " outputs of the last row differ from it dispatched alone");
  }
  return r;
}

}  // namespace

void AddMoeCases(std::vector<Case>* cases) {
  const MoeShape shapes[] = {
      {1, 8, 256, 6144, 4096, true, false},   // GLM-5.2 gate_up at batch 1, shared expert fused
      {1, 8, 256, 2048, 6144, true, false},   // GLM-5.2 down at batch 1
      {8, 8, 288, 4096, 1024, true, false},   // GLM-5.3-Flash widths, batch 8
      {64, 8, 256, 512, 200, false, false},   // batch 64 over 12 experts: ~43 pairs a group (passes of 8), ragged out
      {5, 4, 16, 64, 33, true, true},         // an out-of-range id: flagged, left out
      {3, 1, 1024, 8, 1, false, false},       // the smallest widths, most experts
  };
  for (const MoeShape& s : shapes) {
    cases->push_back({absl::StrCat("moe_gemv rows=", s.rows, " k=", s.top_k, " experts=", s.n_experts, " in=", s.in,
                                   " out=", s.out, s.shared ? " shared" : "", s.bad_id ? " bad-id" : ""),
                      [s](std::mt19937& rng) { return MoeGemvCase(rng, s); }});
  }
}

}  // namespace ferry::harness
