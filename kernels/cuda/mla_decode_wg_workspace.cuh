// The workspace of the persistent MLA decode form (mla_decode_tc.h: MlaDecodeWg with a
// workspace), shared by its two kernels: the item kernel (mla_decode_wg_persistent.cu) stores each
// work item's partial and scalars there, the fold (mla_decode_wg_fold.cu) merges them. Included by
// those two files alone, inside an anonymous namespace (each its own copy), like
// mla_decode_wg_tile.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/mla_decode_tc.h"
#include "kernels/cuda/mla_decode_wg_tile.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kMlP = 256;         // floats of an item's scalars: m [64], l [2][64], the bad flag
constexpr int64_t kItemOP = int64_t{kHeadsW} * kLatentW;  // bf16 of an item's partial
static_assert(kMlaWgRowGroupBytes == kK * (kItemOP * 2 + kMlP * 4), "workspace of a (row, head group)");

// Where thread t (of 128) of warpgroup wg keeps, after a tile, its eight outputs of column groups
// 2 jp and 2 jp + 1 (o[8 jp .. 8 jp + 7] as WgTile leaves them: heads 16 (t / 32) + (t % 32) / 4
// and that + 8, latent columns 256 wg + 8 jj + 2 (t % 4) and + 1): an item's partial is stored in
// this layout, bf16 [2][16][128][8], one 16-byte store a thread and column-group pair.
__host__ __device__ constexpr int PartialAt(int wg, int jp, int t) { return ((wg * 16 + jp) * 128 + t) * 8; }

}  // namespace

// The fold of one launch's `items` work items (rows row0 .. of sel_offsets and out, `groups` head
// groups of 64 a row): 16 CTAs of 256 threads a (row, group), each two column-group pairs of one
// warpgroup half of the partials for every head, launched as the programmatic
// dependent of the item kernel just queued on `stream` (it waits for all of that kernel before
// reading the workspace). ws_o / ws_ml: the items' partials and scalars in the layout above.
absl::Status LaunchMlaWgFold(const __nv_bfloat16* ws_o, const float* ws_ml, const int32_t* sel_offsets, int64_t row0,
                             int items, int groups, int heads, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace ferry::kernels::cuda
