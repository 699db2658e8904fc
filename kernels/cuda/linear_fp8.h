// Linear layers whose weights stay FP8 (E4M3 with float32 block scales, the official FP8
// releases' format) on the device: half the bytes of the bf16 upcast, read once and widened in
// shared memory. The MoE layer's experts are the users: at prefill their weights are most of the
// bytes a step moves.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/gemv.h"

namespace ferry::kernels::cuda {

// The scale blocks of the FP8 weights (checkpoint.h: [128, 128] in every release so far).
inline constexpr int64_t kFp8BlockRows = 128;
inline constexpr int64_t kFp8BlockCols = 128;

// The device layout of an E4M3 matrix W [out, in] for GroupedLinearFp8 ("packed"): tiles of
// 128 rows x 64 columns, each 8 KiB contiguous, ordered by row block then column block, zero past
// `out` and `in`. A tile is one pipeline step of a block, so a block's weights arrive as one
// sequential stream of 8 KiB copies (row-major rows read 64 bytes at a time measured at under
// half the bandwidth). Inside a tile the bytes are in the order the kernel's threads hold them
// as wgmma A fragments: 32 bytes a thread t (warpgroup t / 128, warp (t % 128) / 32, lane l),
// 8 a k16 step kk, 2 a register r of the mma.m16n8k16 A fragment: row 64 (t / 128) +
// 16 ((t % 128) / 32) + l / 4 + 8 (r % 2), columns 16 kk + 2 (l % 4) + {0, 1} + 8 (r / 2).
inline constexpr int64_t kFp8TileRows = 128;
inline constexpr int64_t kFp8TileCols = 64;
int64_t Fp8PackedBytes(int64_t out, int64_t in);
// packed [Fp8PackedBytes(out, in)] = the layout above of row-major `w` [out, in] (device).
// CPU twin: the index map (exact). REQUIRES: out, in >= 1; packed disjoint from w.
absl::Status PackFp8(const uint8_t* w, int64_t out, int64_t in, uint8_t* packed, void* stream = nullptr);

// One problem of GroupedLinearFp8: y [rows, out] = x [rows, in] · W^T, x and y dense row-major,
// W [out, in] E4M3 `w` packed as above with `scale` float32 [ceil(out / 128), ceil(in / 128)].
struct LinearGroupFp8 {
  const uint16_t* x = nullptr;  // bf16
  int64_t rows = 0;
  const uint8_t* w = nullptr;   // packed
  const float* scale = nullptr;
  uint16_t* y = nullptr;  // bf16
};

// Whether GroupedLinearFp8 runs here: built with sm_90a code (FERRY_CUDA_SM90A) and the current
// device is compute capability 9.0 with the shared memory it needs. Elsewhere callers keep the
// weights upcast to bf16 (the loader's way).
bool GroupedLinearFp8Available();

// For each of `n` problems sharing `in` and `out` (a MoE layer's experts, each over the rows
// routed to it), in one launch: weight element (o, i) is used as
//   bf16_rn(float(e4m3 w[o, i]) * scale[o / 128][i / 128])
// (exactly the bf16 weight the loader's upcast would hold), the products accumulate in float32
// and y is rounded to bf16 once. Each y row depends only on its own x row and W (no split over
// `in` between blocks), so a problem's result does not depend on the others or on its row count.
// CPU twin: cpu::Linear over the upcast weights. groups: a host array; rows == 0 is skipped.
// REQUIRES: GroupedLinearFp8Available(); in % 16 == 0, out % 8 == 0; x, w and y 16-byte aligned;
// the y's disjoint from each other and from every x, w, scale. Errors: INVALID_ARGUMENT naming
// the numbers otherwise (nothing launched).
absl::Status GroupedLinearFp8(const LinearGroupFp8* groups, int64_t n, int64_t in, int64_t out,
                              void* stream = nullptr);

// W8A8, the FP8 releases' own numerics (transformers' fine-grained FP8, vLLM and SGLang run them
// so): the activations quantized per row in groups of 128 columns, then a block-FP8 product.

// cpu::QuantizeActFp8 on the device, x bf16 (bits equal to the CPU twin's on x's float values).
// REQUIRES: rows >= 0, in >= 1, scale_stride >= rows; q and s disjoint from x.
absl::Status QuantizeActFp8(const uint16_t* x, int64_t rows, int64_t in, uint8_t* q, float* s, int64_t scale_stride,
                            void* stream = nullptr);
// The same over gathered rows: row i of q and s quantizes x's row src_row[i] (src_row on the
// device, rows entries, each a row of x), without the gathered copy (a MoE layer's expert-ordered
// inputs). REQUIRES as QuantizeActFp8, src_row non-null when rows > 0.
absl::Status QuantizeActFp8Rows(const uint16_t* x, const int32_t* src_row, int64_t rows, int64_t in, uint8_t* q,
                                float* s, int64_t scale_stride, void* stream = nullptr);

// SwiGluBf16 (ops.h) of gate / up, then QuantizeActFp8 of that bf16 output, in one pass: the same
// bytes and scales as the two calls, without the bf16 [rows, cols] in between (a MoE layer's
// h before the down projection). q [rows, cols], scales s [groups][scale_stride].
// REQUIRES: cols >= 1, in_stride >= cols, scale_stride >= rows; q and s disjoint from gate / up.
absl::Status SwiGluQuantizeActFp8(const uint16_t* gate, const uint16_t* up, int64_t rows, int64_t cols,
                                  int64_t in_stride, float limit, uint8_t* q, float* s, int64_t scale_stride,
                                  void* stream = nullptr);

// The device layout of an E4M3 matrix W [out, in] for GroupedLinearW8A8: tiles of 128 rows x 128
// columns (16 KiB, one scale block), ordered by row block then column block, zero past `out` and
// `in`; inside a tile row r's 16-byte chunk c sits at r * 128 + 16 (c ^ (r % 8)) (the 128-byte
// swizzle wgmma reads).
int64_t Fp8W8A8PackedBytes(int64_t out, int64_t in);
absl::Status PackFp8W8A8(const uint8_t* w, int64_t out, int64_t in, uint8_t* packed, void* stream = nullptr);

// One problem of GroupedLinearW8A8: y [rows, out] = cpu::LinearW8A8 of (qx, sx) and W (packed as
// above, `scale` its 128 x 128 block scales), y bf16, row t at y + t * y_stride (columns past
// `out` untouched); sx holds group g of row r at sx[g * scale_stride + r] (QuantizeActFp8's
// layout: a problem's rows are a slice of a buffer's).
struct LinearGroupW8A8 {
  const uint8_t* qx = nullptr;
  const float* sx = nullptr;
  int64_t rows = 0;
  const uint8_t* w = nullptr;  // packed
  const float* scale = nullptr;
  uint16_t* y = nullptr;
  // >= 0 (with the call's y_rows): row t lands at y + y_rows[y_row0 + t] * y_stride instead (the
  // rows scattered, y the matrix's base); -1: contiguous from y.
  int64_t y_row0 = -1;
};

// All problems in one launch (sm_90a wgmma e4m3 x e4m3, float32 accumulation a group, the two
// scales applied to each group's partial sum). Batch invariant as GroupedLinearFp8. CPU twin:
// cpu::LinearW8A8. REQUIRES: GroupedLinearFp8Available(); in % 16 == 0, out % 8 == 0,
// y_stride >= out and % 8 == 0; qx, w and y 16-byte aligned; scale_stride >= every problem's
// rows; y_rows (device, may be null) holds every mapped row's destination, no two the same. Up
// to 580 problems a launch (more: several launches). Errors: INVALID_ARGUMENT with the numbers
// (nothing launched).
absl::Status GroupedLinearW8A8(const LinearGroupW8A8* groups, int64_t n, int64_t in, int64_t out, int64_t scale_stride,
                               int64_t y_stride, const int32_t* y_rows = nullptr, void* stream = nullptr);

// One projection of a MoE layer's FP8 experts for a routing grouped on the device (MoeGroupPairs),
// without the host: the problem list is built on the device from the groups and the expert tables
// (FfnAdd's decode dispatch; GroupedLinearW8A8's numerics, batch invariant). parts[k] (k < n_parts,
// at most 2) are device arrays of n_experts + 1 packed matrices [out, in] (PackFp8W8A8) and their
// block scales, the shared expert at [n_experts]. For each pair j of group g < *pairs.n_groups
// (expert e = group_expert[g]) and each part k: out values of W_k[e] · x_j (cpu::LinearW8A8) into
// columns [k out, (k + 1) out) of y_j, where
//   x_j: row src_row[j] of (qx, sx) when gather_x (a's rows quantized once), else row j;
//   y_j: scatter_y: y + order[j] * y_stride for routed groups, y_shared + src_row[j] * y_stride for
//        the shared group; else y + j * y_stride.
// sx holds group c of x row r at sx[c * scale_stride + r]. scratch: kGroupedW8A8MoeScratchBytes
// of device memory (16-byte aligned), overwritten. Every group is one tile of max_rows (rounded up
// to 16) pairs: a group with more (a routing that picked one expert twice in a row; MoeRoute never
// does) keeps its first ones and sets bit 2 of *error (device int32, may be null; MoeGroupPairs
// sets bit 1), the other pairs' outputs unwritten. REQUIRES: GroupedLinearFp8Available();
// 1 <= max_rows <= 128 (decode-sized: the step's rows); in % 16 == 0, out % 8 == 0, y_stride >=
// n_parts out, % 8 == 0; qx, y and (with scatter_y) y_shared non-null and 16-byte aligned; every
// chosen expert's table entries non-null. Errors: INVALID_ARGUMENT with the numbers (nothing
// launched).
inline constexpr int64_t kGroupedW8A8MoeMaxRows = 128;
struct W8A8ExpertTable {
  const uint8_t* const* packed = nullptr;  // device array of n_experts + 1
  const float* const* scales = nullptr;    // device array of n_experts + 1
};
extern const int64_t kGroupedW8A8MoeScratchBytes;
absl::Status GroupedLinearW8A8Moe(const W8A8ExpertTable* parts, int n_parts, const MoePairs& pairs, int64_t max_rows,
                                  int64_t n_experts, const uint8_t* qx, const float* sx, int64_t scale_stride,
                                  bool gather_x, int64_t in, int64_t out, uint16_t* y, int64_t y_stride,
                                  bool scatter_y, uint16_t* y_shared, void* scratch, int32_t* error,
                                  void* stream = nullptr);

}  // namespace ferry::kernels::cuda
