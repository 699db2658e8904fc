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
// So one row's output is bitwise the same whichever other rows share the launch. (The sm_90a
// form below splits the same way with tiles of 64 tokens.)
// K = 8: at batch 8 a 16-CTA cluster would not fit in one wave (an H200 co-schedules 7 of them,
// 112 CTAs), and measured slower at batch 8 and 64 (bench/results/h200-mla-decode.md).
// Tiles of 32 (not 64) so that a CTA keeps two (64 heads, rope 64) or three in flight beside the
// one it computes.
inline constexpr int kMlaTcTile = 32;
inline constexpr int kMlaTcCluster = 8;

// Shared memory a CTA of the path may need (every (head tile, width) variant stays within it,
// static_assert in mla_decode_tc.cu): on a device of compute capability >= 9.0 whose opt-in
// shared memory a block is at least this, the device conditions of MlaTcApplies hold
// (ferry-kernel-check asserts that the model-shape cases take the path there).
inline constexpr int64_t kMlaTcSmemBytes = 232448;  // 227 KiB, the sm_90 opt-in limit

// True when the tensor-core path takes these arguments on the current device; MlaDecodeAttention
// runs the per-head kernel otherwise (same contract, ops.h). All of:
//   shape: latent 512, rope 0 or 64, cache.width == latent + rope, and the grid's limits:
//     rows * kMlaTcCluster <= INT32_MAX, heads <= 65535 * 64 (65535 * 32 for the small form);
//   alignment, for its 16-byte cp.async loads and 16-byte stores: q_abs, q_pe (when rope > 0),
//     out and cache.arena 16-byte aligned, cache.page_stride a multiple of 8 values (with rows of
//     512 or 576 values every cached row then starts 16-byte aligned). sel, sel_offsets and the
//     page table are read an int32 at a time, as by the per-head kernel: no extra alignment;
//   device: compute capability >= 9.0, co-resident clusters of kMlaTcCluster CTAs, and the
//     shared memory of the standard form (up to kMlaTcSmemBytes a CTA) or else of the small
//     form (at most 99 KiB, the opt-in of sm_120 / sm_121, a GB10: q in registers, 32-head
//     groups, two stages; mla_decode_tc.cu). FERRY_MLA_TC_SMALL=1 in the environment takes the
//     small form wherever it runs, instead of the standard and the wgmma forms (to check and
//     time it on an H200).
// Thread safety: safe from several host threads (the per-device set-up is done once, locked).
bool MlaTcApplies(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads, int64_t latent,
                  int64_t rope, const PagedCacheBf16& cache, const uint16_t* out);

// The shape, device and q conditions of MlaTcApplies alone, without the cache and out: what
// bench_mla.cu reports per shape. Not a launch decision (a misaligned out or arena would fault
// in the path); kept until bench_mla.cu moves to the overload above.
bool MlaTcApplies(const void* q_abs, const void* q_pe, int64_t rows, int64_t heads, int64_t latent,
                  int64_t rope);

// Launches the path. REQUIRES: MlaTcApplies(q_abs, q_pe, rows, heads, 512, rope, cache, out)
// returned true for the PagedCacheBf16 `cache` was made from, the arguments passed
// MlaDecodeAttention's checks, rows >= 1.
// workspace / workspace_bytes: MlaDecodeAttention's (may be null / 0), passed to MlaDecodeWg.
absl::Status MlaDecodeTc(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads, int64_t rope,
                         const PagedView& cache, const int32_t* sel, const int32_t* sel_offsets, float scale,
                         uint16_t* out, void* workspace, int64_t workspace_bytes, void* stream);

// The sm_90a form of the path (mla_decode_wg.cu: wgmma, 64-token tiles, two warpgroups a CTA;
// same split over the cluster, same contract and rounding points, its own summation order inside
// the products). MlaDecodeTc takes it for more than 32 heads whenever this is true: the build has sm_90a code
// (FERRY_CUDA_SM90A, set when FERRY_CUDA_ARCHS lists 90a), the current device is compute
// capability 9.0 with the shared memory and co-resident clusters it needs, for cached rows of
// `width` values (512 or 576), and the environment does not set FERRY_MLA_WGMMA=0 (which keeps
// the mma.sync kernel, for comparisons). Thread safe.
bool MlaWgAvailable(int64_t width);

// The sm_90a form comes in two launches of the same work items (row, 64-head group, cluster rank
// c) and the same bits:
//   cluster: a cluster of kMlaTcCluster CTAs a (row, group), merged through distributed shared
//     memory (no workspace). Each CTA pays its own q load, lookups and merge: at batch 64 about
//     half of the time (bench/results/h200-mla-decode.md).
//   persistent: when a workspace is given (16-byte aligned, at least MlaWgWorkspaceBytes(1,
//     heads) bytes): one wave of at most one CTA an SM, each walking a contiguous range of items
//     with a producer warpgroup (row lookups and copies into two stages, across item
//     boundaries) and two consumer warpgroups split by role, with WgTile's arithmetic
//     (warpgroup 0: S over the whole tile, the softmax and O's first 256 columns; warpgroup 1:
//     O's last 256 columns), q reloaded only when the row changes, then each item's bf16 partial
//     and scalars into the workspace; a second kernel (programmatic dependent launch) folds each
//     row's partials in rank order as the cluster's owner CTA does. Rows beyond what the
//     workspace holds, or beyond kMaxItemsP (12) items an SM, run in further launch pairs (the
//     workspace is reused, stream-ordered). H200, 64 heads, rope 64: batch 64 75.7 vs 110.7 us,
//     32 42.6 vs 67.3, 16 26.4 vs 45.5, 8 22.3 vs 24.9, 1 20.5 vs 23.5.
// Bytes of workspace for `rows` rows at once (kMlaWgRowGroupBytes a row and 64-head group:
// kMlaTcCluster partials of 64 heads x 512 bf16 and 256 floats of scalars); 0 for 32 heads or
// fewer, which run the mma.sync kernel.
inline constexpr int64_t kMlaWgRowGroupBytes = int64_t{kMlaTcCluster} * (64 * 512 * 2 + 256 * 4);
int64_t MlaWgWorkspaceBytes(int64_t rows, int64_t heads);

// The persistent form's pieces (mla_decode_wg_persistent.cu), for MlaWgAvailable and MlaDecodeWg:
//   MlaWgPersistentSetUp: readies its kernel for rows of `width` values (512 or 576) on `device`
//     (shared memory, SM count); false when it cannot run there. Called once a device and width,
//     under MlaWgAvailable's lock, before any launch.
//   MlaWgPersistentRows: the rows a launch pair takes with this workspace on the current device,
//     or 0 when MlaDecodeWg runs the cluster form (no usable workspace, or not set up).
//   MlaDecodeWgPersistent: the launch pairs. REQUIRES: pair_rows == MlaWgPersistentRows(...) > 0
//     and what MlaDecodeWg requires.
bool MlaWgPersistentSetUp(int device, int64_t width);
int64_t MlaWgPersistentRows(int64_t heads, int64_t width, const void* workspace, int64_t workspace_bytes);
absl::Status MlaDecodeWgPersistent(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads,
                                   int64_t rope, const PagedView& cache, const int32_t* sel,
                                   const int32_t* sel_offsets, float scale, uint16_t* out, void* workspace,
                                   int64_t pair_rows, void* stream);

// Launches the sm_90a form (persistent when the workspace allows, else cluster). REQUIRES: what
// MlaDecodeTc requires, and MlaWgAvailable(512 + rope).
absl::Status MlaDecodeWg(const uint16_t* q_abs, const uint16_t* q_pe, int64_t rows, int64_t heads, int64_t rope,
                         const PagedView& cache, const int32_t* sel, const int32_t* sel_offsets, float scale,
                         uint16_t* out, void* workspace, int64_t workspace_bytes, void* stream);

}  // namespace ferry::kernels::cuda
