// The GB10's (sm_121a) W4A4 NVFP4 decode product: activations quantized to NVFP4 on the device
// under the checkpoint's static activation scale, then multiplied by NVFP4 weights on the
// block-scaled FP4 tensor cores (mma.sync m16n8k64 kind::mxf4nvf4.block_scale.scale_vec::4X,
// e2m1 x e2m1 with ue4m3 scales). These are NVFP4's W4A4 numerics, as vLLM and TensorRT-LLM run
// ModelOpt NVFP4 checkpoints on Blackwell, not gemv_nvfp4.h's (bf16 activations, exact weights):
// the activations lose precision here. The model's W4A4 numerics (--nvfp4-numerics w4a4) run on
// every GPU through gemv_nvfp4.h (RoundActivationsW4A4, then the NVFP4 products: the same terms);
// nothing calls this native path yet. Decode on a GB10 is bandwidth bound, so it gains there only
// at prefill-sized products, which this rows <= 8 form does not cover.
//
// Built only when FERRY_CUDA_ARCHS holds 121a (kernels/CMakeLists.txt): the instruction exists
// only in sm_121a code (nvcc -gencode arch=compute_121a,code=sm_121a). CPU twin:
// kernels/cpu/nvfp4_w4a4.h; layouts and the lane loader shared with the harness' host form:
// kernels/nvfp4_mma_layout.h. No GB10 was lent when this was written: the host form checks the
// kernel's layout through the shared loader and an emulator of the instruction; the device run is
// the kernel harness' job on a GB10.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace ferry::kernels::cuda {

// Quantizes x [rows, in] (bf16) to NVFP4 activations: codes [rows, w4a4::PaddedCols(in) / 2]
// (element 2i in the low nibble), E4M3 scales [rows, w4a4::PaddedCols(in) / 16], padding columns
// zero codes under scale 0; input_scale: the weight's checkpoint input_scale (float32, > 0). Byte
// for byte cpu::QuantizeActivationsNvfp4 (stride PaddedCols(in)) of the bf16 values as float32.
// Plain code (cvt.rn.satfinite e4m3, no FP4 instruction): runs on every target the file is built
// for. REQUIRES: rows >= 1, in a positive multiple of 16, both <= INT32_MAX; x finite; codes and
// scales 16-byte aligned, disjoint from x. Errors: INVALID_ARGUMENT with the numbers.
absl::Status QuantizeActivationsW4A4(const uint16_t* x, int64_t rows, int64_t in, float input_scale, uint8_t* codes,
                                     uint8_t* scales, void* stream = nullptr);

// y[rows, out] (bf16) = the W4A4 product of the quantized activations (codes, scales as
// QuantizeActivationsW4A4 writes them) and W [out, in] packed by cpu::PackW4A4 (w4a4::PackedBytes
// (out, in) bytes; a float32 global scale a row tile). One warp a 16-row tile runs its mmas in K
// order into one float32 accumulator; the output is that sum times input_scale * the tile's
// global scale, rounded to bf16 once. Batch invariant: an output depends on its row, its input
// row and the shape only. CPU twin: cpu::LinearW4A4 (same order; whether the GB10's tensor cores
// round each group's addition as the twin does is to be measured). REQUIRES: 1 <= rows <= 8, in
// a positive multiple of 16, out >= 1, both <= INT32_MAX; packed, codes, scales 16-byte
// aligned; y aliases none of them. Errors: INVALID_ARGUMENT with the numbers, FAILED_PRECONDITION
// on a device other than sm_121 (the kernel's body exists only in sm_121a code); nothing launched.
absl::Status GemvW4A4(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t in, const uint8_t* packed,
                      int64_t out, float input_scale, uint16_t* y, void* stream = nullptr);

}  // namespace ferry::kernels::cuda
