// The tensor-core path of IndexerScores (kernels/cuda/ops.h), for the model shapes: dim 128,
// heads a multiple of 16 up to 64. indexer.cu checks the arguments and calls this first; it falls
// back to the CUDA-core kernel when this path does not apply.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/paged.cuh"

namespace ferry::kernels::cuda {

// Work split, fixed by the key index alone, never by `rows`, the other rows or the device: CTA
// (x, r) scores keys [x * kIndexerTcKeys, (x + 1) * kIndexerTcKeys) of row r, clipped to
// n_keys[r]; within it a warp computes 16 keys' full sums over the heads in a fixed order (so a
// row's scores are bitwise the same whichever other rows share the launch).
inline constexpr int kIndexerTcKeys = 256;

// True when the tensor-core path takes these arguments on the current device: dim 128, heads a
// multiple of 16 in [16, 64], qi 4-byte aligned, the arena 16-byte aligned and page_stride a
// multiple of 8 (16-byte row loads), compute capability 9.x with the opt-in shared memory.
// Thread safety: safe from several host threads (the per-device set-up is done once, locked).
bool IndexerTcApplies(const void* qi, int64_t heads, int64_t dim, const PagedView& keys);

// Launches the path. REQUIRES: IndexerTcApplies(...) returned true and the arguments passed
// IndexerScores's checks.
absl::Status IndexerScoresTc(const uint16_t* qi, const float* w, int64_t rows, int64_t heads, const PagedView& keys,
                             const int32_t* n_keys, float scale, float* scores, int64_t score_stride,
                             void* stream);

}  // namespace ferry::kernels::cuda
