// Decode-sized products over NVFP4 weights kept packed on the device (gemv_nvfp4.cu): the weights
// are streamed once a pass of up to 8 input rows at the memory rate (0.5625 bytes a weight, a
// quarter of bf16's plus the scales) and decoded in registers, exactly, into the bf16 operands of
// mma.m16n8k16 with float32 accumulation. The MoE layer's experts are the users (ModelOpt
// quantizes the MLP and expert projections).
//
// Device layout ("packed", kernels/nvfp4_layout.h): tiles of 16 rows x 256 columns, 2304 bytes
// each (2048 bytes of codes in the order a warp's lanes hold them as A fragments, 256 of per-group
// scale codes), row tile major, then a float32 global scale a row tile; Nvfp4PackedBytes(out, in)
// bytes in all (up to 15 of them alignment after the global scales, which PackNvfp4 leaves as
// they are). Each lane's 16-byte load is one scale group of two rows, so a warp reads a tile in
// 512-byte coalesced pieces and applies two scales a chunk of 64 columns.
//
// Architectures: the bf16 mma.sync path is sm_80+ code and is built for every FERRY_CUDA_ARCHS
// target (sm_90a and sm_121 alike). The GB10's (sm_121) block-scaled FP4 tensor-core MMA
// (mma.sync ... kind::mxf4nvf4.block_scale, e2m1 x e2m1 with ue4m3 scales) multiplies FP4
// activations too, so it serves NVFP4's W4A4 numerics (activations quantized with the
// checkpoint's input_scale), not these (bf16 activations, exact): that is gemv_w4a4_sm121.h, its
// own contract and CPU twin, built only for the arch-specific target (FERRY_CUDA_ARCHS with 121a;
// plain sm_121 refuses the instruction) and not yet chosen by the loader.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cuda/gemv.h"

namespace ferry::kernels::cuda {

// The input rows (vectors) one pass over the weights takes: one mma's N, or (wide passes, for
// many rows) four of them sharing one decode of the weights.
inline constexpr int64_t kNvfp4PassRows = 8;
inline constexpr int64_t kNvfp4WidePassRows = 32;

int64_t Nvfp4PackedBytes(int64_t out, int64_t in);

// The decode products' launch shape, for benchmarks comparing shapes (the defaults are what the
// engine runs): warps wanted over one matrix, which sets how many warps share a row tile's columns
// from the shape alone (a lone GemvNvfp4 must fill the device by itself; a MoE launch runs many
// matrices at once), tiles a warp keeps in flight, and blocks an SM holds (registers capped to
// fit). Set before launching, from one thread. INVALID_ARGUMENT for a form not built (the message
// lists them).
struct Nvfp4GemvShape {
  int64_t gemv_warp_target = 4096;
  int64_t moe_warp_target = 512;
  int depth = 2;
  int min_blocks = 3;
};
absl::Status SetNvfp4GemvShape(const Nvfp4GemvShape& shape);
// Every form built (the default's warp target), the default first.
std::vector<Nvfp4GemvShape> Nvfp4GemvForms();

// Packs rows [row0, row0 + rows) of the packed matrix [out, in] at `packed` from a ModelOpt NVFP4
// weight of `rows` rows on the device: codes [rows, in / 2] (element 2i in the low nibble), E4M3
// group scales [rows, in / 16], global scale `global_scale` (host value). Two calls stack two
// weights with their own global scales (an expert's gate at row0 0 and up at row0 inter). Writes
// the row tiles holding those rows (padding rows past `out` zero) and their global scales. A
// negative group scale moves its sign into the group's codes, a zero one zeroes them; a NaN one
// decodes to NaN (the values are those of common/nvfp4.h's decode). CPU twin: cpu::PackNvfp4
// (byte for byte). REQUIRES: in a positive multiple of 16, rows >= 1, row0 >= 0 a multiple of 16,
// row0 + rows <= out, rows % 16 == 0 unless row0 + rows == out, out <= INT32_MAX, in <= INT32_MAX;
// packed 16-byte aligned and disjoint from codes and scales.
absl::Status PackNvfp4(const uint8_t* codes, const uint8_t* scales, float global_scale, int64_t rows, int64_t in,
                       uint8_t* packed, int64_t out, int64_t row0, void* stream = nullptr);

// y[rows, out] (bf16) = x[rows, in] (bf16) · W^T, W [out, in] NVFP4 packed as above: each weight
// decoded exactly (e2m1 * e4m3 scale; the global scale applied to each output's float32 sum), the
// products summed in float32 by the tensor cores, rounded to bf16 once. The matrix is read once
// per pass of up to kNvfp4PassRows rows (kNvfp4WidePassRows when rows > kNvfp4PassRows). Each
// output is summed in a fixed order that depends on nothing but its matrix row, its input row and
// the shape (in, out): batch invariant, whatever `rows`. May begin before the previous kernel in
// the stream ends (pdl.cuh); it waits for it before reading anything. CPU twin:
// cpu::LinearNvfp4 (float32 sums in another order, then bf16 rounding: see the harness' tolerance).
// REQUIRES: rows >= 1, in a positive multiple of 16, out >= 1, both <= INT32_MAX; x and packed
// 16-byte aligned; y aliases neither. Errors: INVALID_ARGUMENT with the numbers, nothing launched.
absl::Status GemvNvfp4(const uint16_t* x, int64_t rows, int64_t in, const uint8_t* packed, int64_t out, uint16_t* y,
                       void* stream = nullptr);

// Many rows (a prefill's dense MLPs): LinearNvfp4 below multiplies from this many rows
// (KernelOptions::nvfp4_gemm_min_rows, options.h) through the packed matrix dequantized into bf16
// tiles and cuBLAS, which reads it once whatever the rows; fewer through GemvNvfp4.
//
// w [rows, in] (bf16) = rows [row0, row0 + rows) of the packed matrix [out, in] decoded without
// their global scale: e2m1 * e4m3 scale, exact in bf16 (NaN where the scale is NaN). CPU twin:
// common/nvfp4.h's decode with a global scale of 1 (bit for bit). REQUIRES: in a positive multiple
// of 16, row0 >= 0 a multiple of 16, rows >= 1, row0 + rows <= out, all <= INT32_MAX; packed
// 16-byte aligned; w disjoint from it. Errors: INVALID_ARGUMENT with the numbers, nothing launched.
absl::Status DequantizeNvfp4(const uint8_t* packed, int64_t out, int64_t in, int64_t row0, int64_t rows, uint16_t* w,
                             void* stream = nullptr);

// The scratch LinearNvfp4 wants for a matrix [out, in]: the whole matrix in bf16 up to 16 MiB,
// at least one row tile's.
int64_t Nvfp4GemmScratchBytes(int64_t out, int64_t in);

// y[rows, out] (bf16) = x[rows, in] (bf16) · W^T, W NVFP4 packed as above and stacking weights of
// `part_rows` rows each (the last may have fewer), each under one global scale (as the loaders
// pack an MLP's gate and up: part_rows = inter; one weight: part_rows >= out). Below
// KernelOptions::nvfp4_gemm_min_rows rows, or without scratch for one row tile, GemvNvfp4.
// Otherwise each part in pieces of whole row tiles that fit `scratch`: DequantizeNvfp4 into it,
// then LinearBf16Scaled (cuBLAS, float32 sums, alpha = the part's global scale, read on the
// device), so the packed matrix is read once and each output is the float32 sum of exact products
// times the global scale rounded to bf16 once, as GemvNvfp4's, in cuBLAS's summation order (not
// batch invariant across the threshold). CPU twin: cpu::LinearNvfp4. REQUIRES: GemvNvfp4's;
// part_rows >= 1, a multiple of 16 unless >= out; scratch (when not null) 16-byte aligned and
// disjoint from x, packed and y. Errors: INVALID_ARGUMENT with the numbers, nothing launched.
absl::Status LinearNvfp4(const uint16_t* x, int64_t rows, int64_t in, const uint8_t* packed, int64_t out,
                         int64_t part_rows, uint16_t* scratch, int64_t scratch_bytes, uint16_t* y,
                         void* stream = nullptr);

// MoeGemvBf16's contract (gemv.h) over NVFP4 experts: for each pair j of each group g <
// *p.n_groups, y_j = W · x_j with W = the packed [out, in] matrix weights[group_expert[g]]
// (weights: a device array of n_experts (+1 with the shared expert) pointers, each
// Nvfp4PackedBytes(out, in) bytes, 16-byte aligned), float32 sums as GemvNvfp4, rounded to bf16.
// x_j = x + (gather_x ? src_row[j] : j) * in; y_j = y + j * out, or with scatter_y y + order[j] *
// out (y_shared + src_row[j] * out for the shared group's pairs). Each chosen expert's matrix is
// read once per pass over its pairs: of up to kNvfp4PassRows pairs when max_group_pairs (a bound
// the caller knows, e.g. the step's rows) is at most that, else of up to kNvfp4WidePassRows (a
// prefill's or the shared expert's many pairs). An output's sum depends on nothing but its row and
// vector (batch invariant, whatever max_group_pairs). May begin before the previous kernel ends; it waits for it before
// reading anything. CPU twin: cpu::LinearNvfp4 per pair.
// REQUIRES: in a positive multiple of 16, out >= 1, both <= INT32_MAX; x 16-byte aligned;
// max_groups >= *p.n_groups (MoeMaxGroups), max_groups <= 65535; y_shared non-null with scatter_y; the y
// rows disjoint from x. Errors: INVALID_ARGUMENT with the numbers, nothing launched.
absl::Status MoeGemvNvfp4(const uint8_t* const* weights, const MoePairs& p, int64_t max_groups,
                          int64_t max_group_pairs, const uint16_t* x, bool gather_x, int64_t in, int64_t out,
                          uint16_t* y, bool scatter_y, uint16_t* y_shared, void* stream = nullptr);

// W4A4 numerics through the products above (--nvfp4-numerics w4a4 on any GPU): y [rows, in]
// (bf16) = x rounded to NVFP4 a group of 16 at a time under the activation scale `input_scale`
// (kernels/nvfp4_mma_layout.h's recipe, the CPU twin's cpu::QuantizeActivationsNvfp4), each
// value written as e2m1 x its group's E4M3 scale, without the 1 / input_scale factor: exact in
// bf16 (at most 6 significant bits). A product over such rows and weights packed with global
// scale input_scale x weight_scale_2 is then the W4A4 product: every term exact, float32 sums
// (in the tensor cores' order, not the twin's), one bf16 rounding. y may be x. REQUIRES: rows
// >= 1, in a positive multiple of 16, both <= INT32_MAX; input_scale finite and > 0; x finite.
// Errors: INVALID_ARGUMENT with the numbers, nothing launched.
absl::Status RoundActivationsW4A4(const uint16_t* x, int64_t rows, int64_t in, float input_scale, uint16_t* y,
                                  void* stream = nullptr);

}  // namespace ferry::kernels::cuda
