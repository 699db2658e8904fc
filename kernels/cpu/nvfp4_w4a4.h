// The CPU twin of the GB10's W4A4 NVFP4 product (kernels/cuda/gemv_w4a4_sm121.h): activations
// quantized to NVFP4 on the fly under the checkpoint's static activation scale, multiplied by
// the NVFP4 weights as the block-scaled FP4 tensor cores do; and the packing of its weight layout
// (kernels/nvfp4_mma_layout.h) on the host. Plain C++.
//
// Numerics (kernels/nvfp4_mma_layout.h states the quantization recipe): a group of 16 products
// e2m1(x) * e2m1(w) sums exactly, and times its two E4M3 scales stays exact in float32 (at most
// 12 significant bits times 8), so the only roundings of the sum are the float32 additions of
// those group terms, done in K order starting from 0; the sum times input_scale * weight global
// scale (itself rounded to float32 first) is the output.
#pragma once

#include <cstdint>

namespace ferry::kernels::cpu {

// Quantizes x [rows, in] (float32) to NVFP4 under the activation scale `input_scale` (the
// checkpoint's input_scale: the quantizer's global scale is 1 / input_scale): codes [rows,
// stride / 2] (element 2i in the low nibble), E4M3 scales [rows, stride / 16]; columns
// [in, stride) get zero codes and zero scales. REQUIRES: in % 16 == 0, stride >= in,
// stride % 16 == 0, input_scale finite and > 0, x finite.
void QuantizeActivationsNvfp4(const float* x, int64_t rows, int64_t in, float input_scale, uint8_t* codes,
                              uint8_t* scales, int64_t stride);

// One group's term of the product: sum over 16 values of e2m1(a) e2m1(w), times e4m3(sa) e4m3(sw)
// (exact in float32; NaN when a scale is). `a` and `w` are 8 code bytes each (ModelOpt packing).
float GroupTerm(const uint8_t* a, uint8_t sa, const uint8_t* w, uint8_t sw);

// y[rows, out] (float32) = the W4A4 product of x [rows, in] and W [out, in] (ModelOpt NVFP4:
// codes [out, in / 2], E4M3 scales [out, in / 16], global scale `global_scale`): x quantized by
// QuantizeActivationsNvfp4, each output the K-ordered float32 sum of GroupTerm from 0, times
// (input_scale * global_scale). REQUIRES: as QuantizeActivationsNvfp4; y aliases nothing.
void LinearW4A4(const float* x, int64_t rows, int64_t in, float input_scale, const uint8_t* codes,
                const uint8_t* scales, float global_scale, int64_t out, float* y);

// The same product over already quantized activations (codes [rows, act_stride / 2], scales
// [rows, act_stride / 16]).
void LinearW4A4Quantized(const uint8_t* act_codes, const uint8_t* act_scales, int64_t act_stride, int64_t rows,
                         int64_t in, float input_scale, const uint8_t* codes, const uint8_t* scales,
                         float global_scale, int64_t out, float* y);

// The W4A4 weight layout (kernels/nvfp4_mma_layout.h): rows [row0, row0 + rows) of the packed
// matrix `packed` [out, in] from a ModelOpt weight of `rows` rows (codes [rows, in / 2], scales
// [rows, in / 16]) with global scale `global_scale`: the row tiles holding those rows and their
// global scales. A negative scale's sign moves into its group's codes, a zero scale zeroes them
// (the products are the same). REQUIRES: in % 16 == 0; row0 % 16 == 0; row0 + rows <= out;
// rows % 16 == 0 unless row0 + rows == out; packed holds w4a4::PackedBytes(out, in) bytes.
void PackW4A4(const uint8_t* codes, const uint8_t* scales, float global_scale, int64_t rows, int64_t in,
              uint8_t* packed, int64_t out, int64_t row0);

}  // namespace ferry::kernels::cpu
