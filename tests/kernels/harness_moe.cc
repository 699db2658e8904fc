// ferry-kernel-check cases for the decode MoE dispatch: MoeGroupPairs (the expert-ordered pair
// list, exactly against a CPU counting sort) and MoeGemvBf16 (each pair's product against
// cpu::Linear by norm, and bit for bit against the same row dispatched alone: batch invariance);
// PackFp8 (exactly, against a host packing) and GroupedLinearFp8 (the prefill experts over E4M3
// weights) against cpu::Linear over the weights upcast as the loader does, with the same
// batch-invariance check.
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

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

struct MoeShape {
  int64_t rows, top_k, n_experts, in, out;
  bool shared;
  bool bad_id;  // one pair names expert n_experts (out of range)
};

// The CPU's list: valid pairs by expert then pair index, then the shared rows.
struct HostPairs {
  std::vector<int32_t> group_expert, group_start, group_count, order, src_row;
};
HostPairs SortPairs(const std::vector<int32_t>& ids, const MoeShape& s) {
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
DevicePairs TakePairs(Device& dev, const MoeShape& s, int64_t rows) {
  DevicePairs d;
  d.max_groups = cu::MoeMaxGroups(rows, s.top_k, s.n_experts, s.shared);
  const size_t g = static_cast<size_t>(d.max_groups), n = static_cast<size_t>(rows * s.top_k + rows);
  d.p = {dev.Poisoned<int32_t>(g), dev.Poisoned<int32_t>(g), dev.Poisoned<int32_t>(g), dev.Poisoned<int32_t>(1),
         dev.Poisoned<int32_t>(n), dev.Poisoned<int32_t>(n)};
  d.error = dev.Upload(std::vector<int32_t>{0});
  return d;
}

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

struct Fp8Shape {
  int64_t in, out;
  std::vector<int64_t> rows;  // one problem each
};

// The packed layout of linear_fp8.h on the host: tiles of 128 x 64 (zero outside), each in the
// order of the kernel's A register fragments: for thread t (warpgroup t / 128, warp (t % 128) /
// 32, lane l), k16 step kk and register r = 0..3, the two bytes of mma.m16n8k16's A fragment
// register r.
std::vector<uint8_t> PackFp8Host(const std::vector<uint8_t>& w, int64_t out, int64_t in) {
  const int64_t kb_count = (in + cu::kFp8TileCols - 1) / cu::kFp8TileCols;
  const int64_t tile = cu::kFp8TileRows * cu::kFp8TileCols;
  std::vector<uint8_t> packed(static_cast<size_t>(cu::Fp8PackedBytes(out, in)), 0);
  for (int64_t t = 0; t < static_cast<int64_t>(packed.size()) / tile; ++t) {
    const int64_t ob = t / kb_count, kb = t % kb_count;
    for (int thread = 0; thread < 256; ++thread) {
      const int lane = thread % 32, row0 = 64 * (thread / 128) + 16 * ((thread % 128) / 32) + lane / 4;
      for (int kk = 0; kk < 4; ++kk) {
        for (int reg = 0; reg < 4; ++reg) {
          for (int half = 0; half < 2; ++half) {
            const int64_t row = ob * cu::kFp8TileRows + row0 + 8 * (reg % 2);
            const int64_t col = kb * cu::kFp8TileCols + 16 * kk + 2 * (lane % 4) + half + 8 * (reg / 2);
            const size_t at = static_cast<size_t>(t * tile + thread * 32 + kk * 8 + reg * 2 + half);
            packed[at] = row < out && col < in ? w[static_cast<size_t>(row * in + col)] : 0;
          }
        }
      }
    }
  }
  return packed;
}

// Random E4M3 bytes (never the NaN codes 0x7f / 0xff) and block scales; *upcast gets
// bf16_rn(float(e4m3) * scale) as float, the loader's weight.
void RandomFp8(int64_t out, int64_t in, std::mt19937& rng, std::vector<uint8_t>* w, std::vector<float>* scale,
               std::vector<float>* upcast) {
  const int64_t srows = (out + cu::kFp8BlockRows - 1) / cu::kFp8BlockRows;
  const int64_t scols = (in + cu::kFp8BlockCols - 1) / cu::kFp8BlockCols;
  std::uniform_int_distribution<int> byte(0, 253);
  std::uniform_real_distribution<float> sd(0.5e-3f, 2e-3f);
  w->resize(static_cast<size_t>(out * in));
  scale->resize(static_cast<size_t>(srows * scols));
  upcast->resize(w->size());
  for (float& v : *scale) v = sd(rng);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      int b = byte(rng);
      if (b >= 0x7f) ++b;  // skip 0x7f; 0xff is past the range
      const size_t k = static_cast<size_t>(o * in + i);
      (*w)[k] = static_cast<uint8_t>(b);
      const float s = (*scale)[static_cast<size_t>((o / cu::kFp8BlockRows) * scols + i / cu::kFp8BlockCols)];
      (*upcast)[k] = Bf16ToF32(F32ToBf16(F8E4M3ToF32(static_cast<uint8_t>(b)) * s));
    }
  }
}

// Counts the bytes of `got` that differ from `want` into r's mismatches (noting `what`).
void CountDiffering(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const char* what, Result* r) {
  long differ = 0;
  for (size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
  r->mismatched += differ;
  if (differ > 0) r->note += absl::StrCat(" ", differ, " ", what);
}

// Batch invariance of a grouped call: the largest problem's last row alone, as a problem of one
// row (`one_row(problem, row)` makes it, its y poisoned), gives the bits it had in the call (ys).
// run(&one) runs the op on it.
template <typename Group, typename OneRow, typename Run>
void CheckLastRowAlone(Device& dev, const Fp8Shape& s, const std::vector<Group>& g,
                       const std::vector<std::vector<uint16_t>>& ys, OneRow one_row, Run run, Result* r) {
  const size_t big = static_cast<size_t>(std::max_element(s.rows.begin(), s.rows.end()) - s.rows.begin());
  if (s.rows[big] == 0) return;
  Group one = one_row(g[big], s.rows[big] - 1);
  one.rows = 1;
  one.y = dev.Poisoned<uint16_t>(static_cast<size_t>(s.out));
  if (!r->error.empty()) return;
  absl::Status st = run(&one);
  if (st.ok()) st = cu::Synchronize();
  if (!st.ok()) {
    r->error = std::string(st.message());
    return;
  }
  const std::vector<uint16_t> a = dev.Download(one.y, static_cast<size_t>(s.out));
  long differ = 0;
  for (int64_t o = 0; o < s.out; ++o) differ += a[o] != ys[big][(s.rows[big] - 1) * s.out + o];
  r->mismatched += differ;
  if (differ > 0) r->note += absl::StrCat(" ", differ, " outputs of the last row differ from it alone");
}

Result GroupedFp8Case(std::mt19937& rng, const Fp8Shape& s) {
  Result r;
  r.tolerance = 1e-2;
  if (!cu::GroupedLinearFp8Available()) {
    r.note = "skipped: GroupedLinearFp8 needs sm_90a code and a compute capability 9.0 device";
    return r;
  }
  Device dev(&r.error);
  const size_t n = s.rows.size();
  const size_t packed_bytes = static_cast<size_t>(cu::Fp8PackedBytes(s.out, s.in));
  std::vector<std::vector<float>> wf(n), xf(n);
  std::vector<std::vector<uint8_t>> want_packed(n);
  std::vector<cu::LinearGroupFp8> g(n);
  for (size_t p = 0; p < n; ++p) {
    std::vector<uint8_t> wb;
    std::vector<float> scale;
    RandomFp8(s.out, s.in, rng, &wb, &scale, &wf[p]);
    want_packed[p] = PackFp8Host(wb, s.out, s.in);
    std::vector<uint16_t> xb;
    RandomBf16(static_cast<size_t>(s.rows[p] * s.in), 1.0f, 0.0f, rng, &xb, &xf[p]);
    uint8_t* packed = dev.Poisoned<uint8_t>(packed_bytes);
    const uint8_t* row_major = dev.Upload(wb);
    if (!r.error.empty()) return r;
    HARNESS_CHECK_OK(cu::PackFp8(row_major, s.out, s.in, packed));
    g[p] = {dev.Upload(xb), s.rows[p], packed, dev.Upload(scale),
            dev.Poisoned<uint16_t>(static_cast<size_t>(s.rows[p] * s.out))};
  }
  if (!r.error.empty()) return r;
  // The packing, exactly (every byte: the tiles and their zero padding).
  for (size_t p = 0; p < n; ++p) {
    CountDiffering(dev.Download(g[p].w, packed_bytes), want_packed[p], "packed bytes differ from the host's packing",
                   &r);
  }
  HARNESS_CHECK_OK(cu::GroupedLinearFp8(g.data(), static_cast<int64_t>(n), s.in, s.out));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got, want;
  std::vector<std::vector<uint16_t>> ys(n);
  for (size_t p = 0; p < n; ++p) {
    ys[p] = dev.Download(g[p].y, static_cast<size_t>(s.rows[p] * s.out));
    std::vector<float> ref(static_cast<size_t>(s.rows[p] * s.out));
    if (s.rows[p] > 0) cpu::Linear(xf[p].data(), s.rows[p], s.in, wf[p].data(), s.out, ref.data());
    const std::vector<float> y = ToF32(ys[p]);
    got.insert(got.end(), y.begin(), y.end());
    want.insert(want.end(), ref.begin(), ref.end());
  }
  r.rel_err = RelErr(got, want, &r.unwritten);

  CheckLastRowAlone(
      dev, s, g, ys,
      [&](cu::LinearGroupFp8 one, int64_t row) {
        one.x += row * s.in;
        return one;
      },
      [&](const cu::LinearGroupFp8* one) { return cu::GroupedLinearFp8(one, 1, s.in, s.out); }, &r);
  // Bad shapes are refused with the numbers, nothing launched.
  if (cu::GroupedLinearFp8(g.data(), static_cast<int64_t>(n), s.in + 8, s.out).ok()) {
    ++r.mismatched;
    r.note += " in % 16 != 0 was accepted";
  }
  return r;
}


// QuantizeActFp8 against cpu::QuantizeActFp8, every byte and scale exactly; a group of zeros and
// groups of very different sizes included.
Result QuantizeActCase(std::mt19937& rng, int64_t rows, int64_t in, bool gather) {
  Result r;
  Device dev(&r.error);
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  RandomBf16(static_cast<size_t>(rows * in), 1.0f, 0.0f, rng, &xb, &xf);
  for (int64_t row = 0; row < rows; ++row) {  // rows of different magnitudes
    const float m = std::ldexp(1.0f, static_cast<int>(row % 7) * 3 - 9);
    for (int64_t c = 0; c < in; ++c) xb[row * in + c] = F32ToBf16(xf[row * in + c] * m);
  }
  for (int64_t c = 0; c < std::min<int64_t>(in, 128); ++c) xb[c] = 0;  // row 0's first group: zeros
  xf = ToF32(xb);
  const int64_t groups = (in + 127) / 128, stride = rows + 3;
  // Gathered: row i quantizes x's row (3 i + 1) % rows (repeats, any order).
  std::vector<int32_t> src(static_cast<size_t>(rows));
  std::vector<float> xg = xf;
  for (int64_t i = 0; i < rows; ++i) {
    src[i] = static_cast<int32_t>(gather ? (3 * i + 1) % rows : i);
    std::copy_n(xf.begin() + src[i] * in, in, xg.begin() + i * in);
  }
  std::vector<uint8_t> want_q(static_cast<size_t>(rows * in));
  std::vector<float> want_s(static_cast<size_t>(groups * stride), 0.0f);
  cpu::QuantizeActFp8(xg.data(), rows, in, want_q.data(), want_s.data(), stride);
  const uint16_t* d_x = dev.Upload(xb);
  const int32_t* d_src = dev.Upload(src);
  uint8_t* d_q = dev.Poisoned<uint8_t>(want_q.size());
  float* d_s = dev.Upload(std::vector<float>(want_s.size(), 0.0f));
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(gather ? cu::QuantizeActFp8Rows(d_x, d_src, rows, in, d_q, d_s, stride)
                          : cu::QuantizeActFp8(d_x, rows, in, d_q, d_s, stride));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint8_t> q = dev.Download(d_q, want_q.size());
  const std::vector<float> sc = dev.Download(d_s, want_s.size());
  for (size_t i = 0; i < q.size(); ++i) r.mismatched += q[i] != want_q[i];
  for (size_t i = 0; i < sc.size(); ++i) r.mismatched += sc[i] != want_s[i];
  if (!gather && want_s[0] != 0.0f) r.note = "the zero group's scale is not 0";
  return r;
}

// SwiGluQuantizeActFp8 over a fused gate_up [rows, 2 cols]: its bytes and scales must equal
// SwiGluBf16 then QuantizeActFp8 on the device (mismatched counts any difference), and its
// dequantized values the CPU twins' (cpu::SwiGlu rounded to bf16, cpu::QuantizeActFp8; rel_err:
// only expf against std::exp may move a value across a rounding boundary).
Result SwiGluQuantizeCase(std::mt19937& rng, int64_t rows, int64_t cols, float limit) {
  Result r;
  r.tolerance = 1e-2;
  const int64_t stride = 2 * cols, groups = (cols + 127) / 128, sstride = rows + 2;
  std::vector<uint16_t> gub;
  std::vector<float> guf;
  RandomBf16(static_cast<size_t>(rows * stride), 6.0f, 0.0f, rng, &gub, &guf);
  std::vector<float> want(static_cast<size_t>(rows * cols));
  for (int64_t t = 0; t < rows; ++t) {
    cpu::SwiGlu(guf.data() + t * stride, guf.data() + t * stride + cols, cols, limit, want.data() + t * cols);
  }
  for (float& v : want) v = Bf16ToF32(F32ToBf16(v));
  {
    std::vector<uint8_t> wq(want.size());
    std::vector<float> ws(static_cast<size_t>(groups * sstride));
    cpu::QuantizeActFp8(want.data(), rows, cols, wq.data(), ws.data(), sstride);
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t c = 0; c < cols; ++c) {
        want[t * cols + c] = F8E4M3ToF32(wq[t * cols + c]) * ws[(c / 128) * sstride + t];
      }
    }
  }
  Device dev(&r.error);
  const uint16_t* d_gu = dev.Upload(gub);
  uint16_t* d_h = dev.Poisoned<uint16_t>(static_cast<size_t>(rows * cols));
  uint8_t* d_q1 = dev.Poisoned<uint8_t>(static_cast<size_t>(rows * cols));
  uint8_t* d_q2 = dev.Poisoned<uint8_t>(static_cast<size_t>(rows * cols));
  float* d_s1 = dev.Upload(std::vector<float>(static_cast<size_t>(groups * sstride), -1.0f));
  float* d_s2 = dev.Upload(std::vector<float>(static_cast<size_t>(groups * sstride), -1.0f));
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::SwiGluBf16(d_gu, d_gu + cols, rows, cols, stride, limit, d_h));
  HARNESS_CHECK_OK(cu::QuantizeActFp8(d_h, rows, cols, d_q1, d_s1, sstride));
  HARNESS_CHECK_OK(cu::SwiGluQuantizeActFp8(d_gu, d_gu + cols, rows, cols, stride, limit, d_q2, d_s2, sstride));
  HARNESS_CHECK_OK(cu::Synchronize());
  const std::vector<uint8_t> q1 = dev.Download(d_q1, rows * cols), q2 = dev.Download(d_q2, rows * cols);
  const std::vector<float> s1 = dev.Download(d_s1, groups * sstride), s2 = dev.Download(d_s2, groups * sstride);
  if (!r.error.empty()) return r;
  for (size_t i = 0; i < q1.size(); ++i) r.mismatched += q1[i] != q2[i];
  for (size_t i = 0; i < s1.size(); ++i) r.mismatched += std::memcmp(&s1[i], &s2[i], sizeof(float)) != 0;
  std::vector<float> got(want.size());
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t c = 0; c < cols; ++c) {
      got[t * cols + c] = F8E4M3ToF32(q2[t * cols + c]) * s2[(c / 128) * sstride + t];
    }
  }
  r.rel_err = RelErr(got, want, &r.unwritten);
  return r;
}

// PackFp8W8A8's tiles on the host: 128 x 128, row r's 16-byte chunk c at r * 128 + 16 (c ^ r % 8).
std::vector<uint8_t> PackW8A8Host(const std::vector<uint8_t>& w, int64_t out, int64_t in) {
  const int64_t kb_count = (in + 127) / 128;
  std::vector<uint8_t> packed(static_cast<size_t>(cu::Fp8W8A8PackedBytes(out, in)), 0);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      const int64_t tile = (o / 128) * kb_count + i / 128, r = o % 128, c = (i % 128) / 16;
      packed[static_cast<size_t>(tile * 16384 + r * 128 + ((c ^ (r % 8)) * 16) + i % 16)] =
          w[static_cast<size_t>(o * in + i)];
    }
  }
  return packed;
}

// GroupedLinearW8A8 against cpu::LinearW8A8 over the same quantized x (cpu::QuantizeActFp8 of a
// shared buffer, each problem a slice of its rows) and packed weights; PackFp8W8A8 exactly; the
// last row of the largest problem alone gives its bits.
Result GroupedW8A8Case(std::mt19937& rng, const Fp8Shape& s) {
  Result r;
  r.tolerance = 1e-2;
  if (!cu::GroupedLinearFp8Available()) {
    r.note = "skipped: GroupedLinearW8A8 needs sm_90a code and a compute capability 9.0 device";
    return r;
  }
  Device dev(&r.error);
  const size_t n = s.rows.size();
  int64_t total = 0;
  for (int64_t rows : s.rows) total += rows;
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  RandomBf16(static_cast<size_t>(std::max<int64_t>(total, 1) * s.in), 1.0f, 0.0f, rng, &xb, &xf);
  const int64_t groups = (s.in + 127) / 128, stride = std::max<int64_t>(total, 1);
  std::vector<uint8_t> qx(static_cast<size_t>(stride * s.in));
  std::vector<float> sx(static_cast<size_t>(groups * stride));
  cpu::QuantizeActFp8(xf.data(), total, s.in, qx.data(), sx.data(), stride);
  const uint8_t* d_qx = dev.Upload(qx);
  const float* d_sx = dev.Upload(sx);
  std::vector<cu::LinearGroupW8A8> g(n);
  std::vector<std::vector<uint8_t>> wq(n);
  std::vector<std::vector<float>> ws(n);
  const size_t packed_bytes = static_cast<size_t>(cu::Fp8W8A8PackedBytes(s.out, s.in));
  const int64_t ldy = s.out + 8;  // y rows 8 columns wider than `out`: those must stay poisoned
  // Even problems scatter their rows into one shared matrix through a row map (a permutation of
  // all rows: row t of a problem starting at j0 lands on row perm[j0 + t]); odd ones store
  // contiguously into their own.
  std::vector<int32_t> perm(static_cast<size_t>(std::max<int64_t>(total, 1)));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  const int32_t* d_perm = dev.Upload(perm);
  uint16_t* y_all = dev.Poisoned<uint16_t>(perm.size() * static_cast<size_t>(ldy));
  int64_t j0 = 0;
  for (size_t p = 0; p < n; ++p) {
    std::vector<float> unused;
    RandomFp8(s.out, s.in, rng, &wq[p], &ws[p], &unused);
    uint8_t* packed = dev.Poisoned<uint8_t>(packed_bytes);
    const uint8_t* row_major = dev.Upload(wq[p]);
    if (!r.error.empty()) return r;
    HARNESS_CHECK_OK(cu::PackFp8W8A8(row_major, s.out, s.in, packed));
    CountDiffering(dev.Download(packed, packed_bytes), PackW8A8Host(wq[p], s.out, s.in),
                   "packed bytes differ from the host's packing", &r);
    const bool scatter = p % 2 == 0;
    g[p] = {d_qx + j0 * s.in, d_sx + j0, s.rows[p], packed, dev.Upload(ws[p]),
            scatter ? y_all : dev.Poisoned<uint16_t>(static_cast<size_t>(s.rows[p] * ldy)), scatter ? j0 : -1};
    j0 += s.rows[p];
  }
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::GroupedLinearW8A8(g.data(), static_cast<int64_t>(n), s.in, s.out, stride, ldy, d_perm));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got, want;
  std::vector<std::vector<uint16_t>> ys(n);
  const std::vector<uint16_t> all = dev.Download(y_all, perm.size() * static_cast<size_t>(ldy));
  std::vector<bool> mapped(perm.size(), false);
  j0 = 0;
  for (size_t p = 0; p < n; ++p) {
    const int64_t rows = s.rows[p];
    const bool scatter = g[p].y_row0 >= 0;
    const std::vector<uint16_t> own =
        scatter ? std::vector<uint16_t>() : dev.Download(g[p].y, static_cast<size_t>(rows * ldy));
    ys[p].resize(static_cast<size_t>(rows * s.out));
    for (int64_t t = 0; t < rows; ++t) {
      const uint16_t* row = scatter ? all.data() + perm[j0 + t] * ldy : own.data() + t * ldy;
      if (scatter) mapped[perm[j0 + t]] = true;
      std::copy_n(row, s.out, ys[p].begin() + t * s.out);
      for (int64_t o = s.out; o < ldy; ++o) r.mismatched += row[o] != 0xffff;
    }
    // The problem's own scales, stride = its rows (cpu::LinearW8A8's layout).
    std::vector<float> sxp(static_cast<size_t>(groups * std::max<int64_t>(rows, 1)));
    for (int64_t gi = 0; gi < groups; ++gi) {
      for (int64_t t = 0; t < rows; ++t) sxp[gi * rows + t] = sx[gi * stride + j0 + t];
    }
    std::vector<float> ref(static_cast<size_t>(rows * s.out));
    if (rows > 0) cpu::LinearW8A8(qx.data() + j0 * s.in, sxp.data(), rows, s.in, wq[p].data(), ws[p].data(), s.out,
                                  ref.data());
    const std::vector<float> y = ToF32(ys[p]);
    got.insert(got.end(), y.begin(), y.end());
    want.insert(want.end(), ref.begin(), ref.end());
    j0 += rows;
  }
  r.rel_err = RelErr(got, want, &r.unwritten);
  // Rows of the shared matrix that no mapped row names: untouched.
  for (size_t i = 0; i < mapped.size(); ++i) {
    if (mapped[i]) continue;
    for (int64_t o = 0; o < ldy; ++o) r.mismatched += all[i * ldy + o] != 0xffff;
  }
  CheckLastRowAlone(
      dev, s, g, ys,
      [&](cu::LinearGroupW8A8 one, int64_t row) {
        one.qx += row * s.in;
        one.sx += row;
        one.y_row0 = -1;
        return one;
      },
      [&](const cu::LinearGroupW8A8* one) { return cu::GroupedLinearW8A8(one, 1, s.in, s.out, stride, s.out); }, &r);
  return r;
}

}  // namespace

// The FP8 ops' argument checks and layout sizes: host-side, so they run without a device too.
int RunFp8HostChecks() {
  int failed = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      printf("host check FAILED: %s\n", what.c_str());
      ++failed;
    }
  };
  auto refused = [&](const absl::Status& st, const std::string& needle, const std::string& what) {
    expect(absl::IsInvalidArgument(st) && std::string(st.message()).find(needle) != std::string::npos,
           absl::StrCat(what, ": got ", st.ToString()));
  };
  expect(cu::Fp8PackedBytes(200, 272) == 256 * 320, "Fp8PackedBytes(200, 272)");
  expect(cu::Fp8W8A8PackedBytes(200, 272) == 256 * 384, "Fp8W8A8PackedBytes(200, 272)");
  alignas(16) static uint16_t x[64];
  alignas(16) static uint8_t w[64];
  alignas(16) static float scale[4];
  alignas(16) static uint16_t y[64];
  cu::LinearGroupFp8 g{x, 1, w, scale, y};
  refused(cu::GroupedLinearFp8(&g, 1, 24, 8), "in 24", "GroupedLinearFp8 in % 16 != 0");
  refused(cu::GroupedLinearFp8(&g, 1, 16, 12), "out 12", "GroupedLinearFp8 out % 8 != 0");
  cu::LinearGroupFp8 bad = g;
  bad.y = y + 1;  // 2-byte aligned
  refused(cu::GroupedLinearFp8(&bad, 1, 16, 8), "problem 0", "GroupedLinearFp8 misaligned y");
  bad = g;
  bad.rows = -3;
  refused(cu::GroupedLinearFp8(&bad, 1, 16, 8), "-3 rows", "GroupedLinearFp8 negative rows");
  bad.rows = 0;
  expect(cu::GroupedLinearFp8(&bad, 1, 16, 8).ok(), "GroupedLinearFp8 with no rows does nothing");
  alignas(16) static uint8_t qx[64];
  cu::LinearGroupW8A8 q{qx, scale, 5, w, scale, y};
  refused(cu::GroupedLinearW8A8(&q, 1, 16, 8, 4, 8), "past the scale stride 4", "GroupedLinearW8A8 rows > stride");
  refused(cu::GroupedLinearW8A8(&q, 1, 16, 16, 8, 12), "a y row stride of 12 for 16 columns",
          "GroupedLinearW8A8 y stride < out");
  cu::LinearGroupW8A8 mapped = q;
  mapped.rows = 2;
  mapped.y_row0 = 3;
  refused(cu::GroupedLinearW8A8(&mapped, 1, 16, 8, 8, 8), "a row-map start of 3 but no row map",
          "GroupedLinearW8A8 row-map start without a map");
  mapped.y_row0 = -2;
  refused(cu::GroupedLinearW8A8(&mapped, 1, 16, 8, 8, 8), "a row-map start of -2",
          "GroupedLinearW8A8 row-map start below -1");
  refused(cu::QuantizeActFp8(x, 6, 32, qx, scale, 5), "scale stride of 5", "QuantizeActFp8 stride < rows");
  refused(cu::PackFp8(w, 0, 16, qx), "0 x 16", "PackFp8 of no rows");
  refused(cu::PackFp8W8A8(w, 8, 0, qx), "8 x 0", "PackFp8W8A8 of no columns");
  printf("fp8 host checks: %s\n", failed == 0 ? "all passed" : "FAILED");
  return failed;
}

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
  std::vector<Fp8Shape> fp8 = {
      {2048, 1024, {70, 0, 1, 130, 17, 64}},  // ragged experts: empty, one row, two row tiles
      {272, 200, {5, 128, 129}},              // in and out past the blocks (in % 64 = 16, out % 128 = 72)
      {16, 8, {3}},                           // the smallest widths
      {6144, 4096, {84, 23}},                 // GLM-5.2 gate_up
      {256, 64, {}},                          // 700 problems of 0-3 rows (175 empty, 525 with rows):
                                              // three launches of W8A16 (256 a launch), one of W8A8
      {256, 64, {}},                          // 700 problems of 1-3 rows: two launches of W8A8 (600)
      {256, 64, {600}},                       // one of 600 rows among 20 of 40: tiles of 64 rows
  };
  for (int i = 0; i < 700; ++i) fp8[4].rows.push_back(i % 4);
  for (int i = 0; i < 700; ++i) fp8[5].rows.push_back(1 + i % 3);
  for (int i = 0; i < 20; ++i) fp8[6].rows.push_back(40);
  for (const Fp8Shape& s : fp8) {
    cases->push_back({absl::StrCat("grouped_linear_fp8 in=", s.in, " out=", s.out, " problems=", s.rows.size()),
                      [s](std::mt19937& rng) { return GroupedFp8Case(rng, s); }});
    cases->push_back({absl::StrCat("grouped_linear_w8a8 in=", s.in, " out=", s.out, " problems=", s.rows.size()),
                      [s](std::mt19937& rng) { return GroupedW8A8Case(rng, s); }});
  }
  // 2048 columns: GLM-5.x's moe_intermediate (vector loads); 200: a partial group, an odd row stride
  // for 4-column loads (400 bytes: every other lane's gate is 8-byte aligned).
  for (const auto& [rows, cols, limit] : std::vector<std::tuple<int64_t, int64_t, float>>{
           {37, 2048, 0.0f}, {37, 2048, 7.0f}, {5, 200, 7.0f}, {3, 36, 0.0f}}) {
    cases->push_back({absl::StrCat("swiglu_quantize_act_fp8 rows=", rows, " cols=", cols, " limit=", limit),
                      [rows, cols, limit](std::mt19937& rng) { return SwiGluQuantizeCase(rng, rows, cols, limit); }});
  }
  // 16-byte loads a lane where in % 8 == 0 (a partial group at 200, two lanes at 16); 100: four
  // columns a lane.
  for (const auto& [rows, in] : std::vector<std::pair<int64_t, int64_t>>{{9, 6144}, {3, 200}, {2, 16}, {4, 100}}) {
    for (bool gather : {false, true}) {
      cases->push_back({absl::StrCat("quantize_act_fp8", gather ? "_rows" : "", " rows=", rows, " in=", in),
                        [rows, in, gather](std::mt19937& rng) { return QuantizeActCase(rng, rows, in, gather); }});
    }
  }
}

}  // namespace ferry::harness
