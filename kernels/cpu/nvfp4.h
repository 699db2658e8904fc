// The CPU twins of the NVFP4 decode products (kernels/cuda/gemv_nvfp4.h): the product over the
// weights decoded exactly as common/nvfp4.h defines them, and the device layout's packing
// (kernels/nvfp4_layout.h) on the host. Plain C++.
#pragma once

#include <cstdint>

namespace ferry::kernels::cpu {

// y[T, N] = x[T, K] · W^T with W [N, K] an NVFP4 weight in ModelOpt's layout: codes [N, K / 2]
// (element 2i in the low nibble), E4M3 group scales [N, K / 16], global scale `global_scale`; each
// row decoded by ferry::DequantNvfp4Row (e2m1 * e4m3 * global in float32), then cpu::Dot (the
// fixed order of every CPU product). REQUIRES: in % 16 == 0; y aliases nothing.
void LinearNvfp4(const float* x, int64_t rows, int64_t in, const uint8_t* codes, const uint8_t* scales,
                 float global_scale, int64_t out, float* y);

// The device layout's packing (kernels/nvfp4_layout.h), the twin of cuda::PackNvfp4 (byte for
// byte): rows [row0, row0 + rows) of the packed matrix `packed` [out, in] from a ModelOpt weight
// of `rows` rows (codes [rows, in / 2], scales [rows, in / 16]) with global scale `global_scale`:
// the row tiles that hold those rows (their padding rows past `out` zero) and their global scales.
// A negative scale's sign moves into its group's codes, a zero scale zeroes them (same values).
// REQUIRES: in % 16 == 0; row0 % 16 == 0; row0 + rows <= out; rows % 16 == 0 unless
// row0 + rows == out; packed holds nvfp4::PackedBytes(out, in) bytes.
void PackNvfp4(const uint8_t* codes, const uint8_t* scales, float global_scale, int64_t rows, int64_t in,
               uint8_t* packed, int64_t out, int64_t row0);

}  // namespace ferry::kernels::cpu
