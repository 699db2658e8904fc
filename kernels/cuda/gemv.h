// The decode-sized products (gemv.cu): matrix-vector kernels for batches of up to kGemvMaxRows
// rows that stream the weights at the memory rate, several products in one launch, and the MoE
// dispatch of a decode batch on the device (no host round trip). LinearBf16 (ops.h) takes
// GemvBf16 by itself where GemvApplies.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace ferry::kernels::cuda {

// LinearBf16's contract for 1 <= rows <= kGemvMaxRows, read at the memory rate: every matrix row
// streamed once for all the rows. Each output is summed in a fixed order that depends on nothing
// but its matrix row, its input row and the matrix shape (in, out) (batch invariant up to
// kGemvMaxRows rows). May begin before the previous kernel in the stream ends (pdl.cuh); it waits
// for it before reading anything.
// REQUIRES: GemvApplies(x, rows, in, w) (rows in range, in % 8 == 0, x and w 16-byte aligned),
// 1 <= out <= INT32_MAX; y aliases neither x nor w.
inline constexpr int64_t kGemvMaxRows = 4;
bool GemvApplies(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w);
absl::Status GemvBf16(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out, uint16_t* y,
                      void* stream = nullptr);
// Several LinearBf16 products of one row count: y_i [rows, out_i] = x_i [rows, in_i] · w_i^T. One
// launch when every problem is a GemvBf16 one (GemvApplies), each y_i bit for bit what GemvBf16
// gives it alone; else one LinearBf16 call each. For the projections of one input (q, k, v, ...)
// whose matrices are too small to stream at the memory rate one launch each.
// REQUIRES: 1 <= n <= kLinearManyMax; each problem LinearBf16's; no y_i overlaps any x_j, w_j or y_j.
struct LinearProblemBf16 {
  const uint16_t* x = nullptr;
  int64_t in = 0;
  const uint16_t* w = nullptr;
  int64_t out = 0;
  uint16_t* y = nullptr;
};
inline constexpr int kLinearManyMax = 8;
absl::Status LinearBf16Many(const LinearProblemBf16* p, int64_t n, int64_t rows, void* stream = nullptr);
// LinearBf16F32's contract the same way (float32 result, times alpha). LinearBf16F32 takes it only
// up to kGemvMaxOutF32 outputs (cuBLAS streams a vocabulary-wide lm_head faster).
inline constexpr int64_t kGemvMaxOutF32 = 65536;
absl::Status GemvBf16F32(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out, float alpha,
                         float* y, void* stream = nullptr);

// A routing's (row, slot) pairs grouped by expert, on the device. The pair list holds the pairs
// with a valid expert id ordered by expert, then by pair index i = row * top_k + slot; with a
// shared expert it ends with one pair per row 0..rows-1 (expert id n_experts, order -1). Group
// g < *n_groups is the list's slice [group_start[g], +group_count[g]) of expert group_expert[g]
// (ascending ids; the shared group last). order[j] = pair j's i (-1: shared), src_row[j] its row.
struct MoePairs {
  int32_t* group_expert = nullptr;  // [MoeMaxGroups]
  int32_t* group_start = nullptr;   // [MoeMaxGroups]
  int32_t* group_count = nullptr;   // [MoeMaxGroups]
  int32_t* n_groups = nullptr;      // [1]
  int32_t* order = nullptr;         // [rows * top_k + rows]
  int32_t* src_row = nullptr;       // [rows * top_k + rows]
};
inline constexpr int64_t kMoeMaxExperts = 1024;
inline constexpr int64_t kMoeMaxPairs = 4096;
// The most groups a routing of `rows` rows can have (the grid of MoeGemvBf16).
int64_t MoeMaxGroups(int64_t rows, int64_t top_k, int64_t n_experts, bool shared);
// experts [rows, top_k] int32 (MoeRoute's) -> p. An id outside [0, n_experts) sets *error to 1
// (device int32; the caller zeroes it and reads it after the step) and its pair joins no group.
// CPU twin: the stable counting sort by expert of model::MoeForward's dispatch (exact).
// REQUIRES: 1 <= n_experts <= kMoeMaxExperts, rows * top_k <= kMoeMaxPairs, rows <= kMoeMaxPairs.
absl::Status MoeGroupPairs(const int32_t* experts, int64_t rows, int64_t top_k, int64_t n_experts, bool shared,
                           const MoePairs& p, int32_t* error, void* stream = nullptr);
// For each pair j of each group g < *p.n_groups: y_j = W · x_j with W = weights[group_expert[g]]
// ([out, in] bf16 row-major; weights a device array of n_experts (+1 with the shared expert)
// pointers), float32 accumulation, rounded to bf16. x_j = x + (gather_x ? src_row[j] : j) * in;
// y_j = y + j * out, or with scatter_y y + order[j] * out (y_shared + src_row[j] * out for the
// shared group's pairs). Each group's matrix is read once per pass of min(max_group_pairs, 8)
// pairs (rounded up to 1, 2, 4 or 8; any group may hold more pairs: it takes more passes); an
// output's sum runs in a fixed order that depends on nothing but its row and vector (batch
// invariant, whatever max_group_pairs). May begin before the previous kernel in the stream ends
// (pdl.cuh); it waits for it before reading anything.
// CPU twin: cpu::Linear per pair (float32 sums in another order: bf16 tolerance).
// REQUIRES: in a positive multiple of 8, out >= 1, 16-byte-aligned matrices and vectors,
// max_groups >= *p.n_groups (MoeMaxGroups), max_groups <= 65535; the y rows disjoint from x.
absl::Status MoeGemvBf16(const uint16_t* const* weights, const MoePairs& p, int64_t max_groups,
                         int64_t max_group_pairs, const uint16_t* x, bool gather_x, int64_t in, int64_t out,
                         uint16_t* y, bool scatter_y, uint16_t* y_shared,
                         void* stream = nullptr);

}  // namespace ferry::kernels::cuda
