// The tensor-core path of MlaDecodeAttention (kernels/cuda/ops.h), for the model shapes: latent
// 512, rope 0 or 64. mla_decode.cu checks the arguments and calls this first; it falls back to
// the per-head kernel when this path does not apply.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/paged.cuh"

namespace ferry::kernels::cuda {

// Work split, fixed by the row's own selection length n, never by `rows` or the device:
//   the selection is cut into tiles of kMlaTcTile tokens; the kMlaTcCluster CTAs of one
//   thread-block cluster take tiles k, k + K, k + 2K, ... of the row each (K = kMlaTcCluster),
//   with an online softmax over their tiles; the K partial results (max, sum, unnormalised
//   output) are merged through distributed shared memory in rank order 0..K-1.
// So one row's output is bitwise the same whichever other rows share the launch.
// K = 8: at batch 8 a 16-CTA cluster would not fit in one wave (an H200 co-schedules 7 of them,
// 112 CTAs), and measured slower at batch 8 and 64 (bench/results/h200-mla-decode.md).
// Tiles of 32 (not 64) so that a CTA keeps three in flight beside the one it computes.
inline constexpr int kMlaTcTile = 32;
inline constexpr int kMlaTcCluster = 8;

// True when the tensor-core path takes these arguments on the current device: latent 512,
// rope 0 or 64, q_abs and q_pe 16-byte aligned, rows * kMlaTcCluster <= INT32_MAX, compute
// capability >= 9.0 with the shared memory (up to 226 KiB a CTA) and clusters of kMlaTcCluster.
// Thread safety: safe from several host threads (the per-device set-up is done once, locked).
bool MlaTcApplies(const void* q_abs, const void* q_pe, int64_t rows, int64_t heads, int64_t latent,
                  int64_t rope);

// Launches the path. REQUIRES: MlaTcApplies(...) returned true, the arguments passed
// MlaDecodeAttention's checks, rows >= 1.
absl::Status MlaDecodeTc(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads, int64_t rope,
                         const PagedView& cache, const int32_t* sel, const int32_t* sel_offsets, float scale,
                         uint16_t* out, void* stream);

}  // namespace ferry::kernels::cuda
