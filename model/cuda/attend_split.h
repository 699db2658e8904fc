// The CUDA backend's tensor-parallel transfers: the float32 reduction, and the latent split's
// attention on the device (model/blocks/mla.h's MlaAttendSplit, the CUDA backend's AttendSplit): the same plan (PlanSplit), the same exchanges in the same order, and every row
// attended by act::MlaDecode over the same selected rows in the same order as the replicated
// layout would, so the owner split on and off give the same bits. The exchanges go through the
// group's Collective, staged through host memory (the UCX data plane's transport; NCCL's
// collective takes the staged buffers too).
// Internal to model/cuda.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "model/checkpoint/config.h"
#include "model/cuda/act_ops.h"
#include "model/cuda/device_buffer.h"
#include "model/cache/split_rows.h"
#include "model/parallel/tensor_parallel.h"

namespace ferry::model::cuda {

// x [n] float32 (device) summed over tp's ranks in the collective's fixed order: handed over as it
// is when the collective takes device buffers (NCCL), else staged through host memory (*staging,
// grown as needed). No-op on one rank.
absl::Status ReduceOverGroup(const TensorParallel& tp, float* x, int64_t n, std::vector<float>* staging);

// What AttendSplitCuda keeps between calls: its device scratch (reset at every call) and host
// staging.
struct SplitScratch {
  Workspace device;
  std::vector<int32_t> offsets, sel, table;
};

// o_lat [rows, heads, L] of a step's rows from q_abs [rows, heads, L] and q_pe [rows, heads, P]
// (null when P == 0), the rows' selections in CSR form (sel, offsets, device) and their latent
// cache `latent` (a row this rank does not hold has no pages there), `owners` as
// ReserveSplitRows filled it. Counts what moved in *stats (floats_sent in 4-byte words: bf16
// values travel as they are). T: uint16_t (bf16 bits) or float.
// Errors: the collective's; INVALID_ARGUMENT when the arena's rows cannot be addressed as one
// array of latent rows (a region width that does not divide the page, or past int32).
template <typename T>
absl::Status AttendSplitCuda(SplitScratch& scratch, const ModelConfig& c, int64_t heads, const T* q_abs,
                             const T* q_pe, int64_t rows, const RowOwners& owners, const TensorParallel& tp,
                             const act::Cache<T>& latent, const int32_t* sel, const int32_t* offsets, T* o_lat,
                             OwnerSplitStats* stats);

}  // namespace ferry::model::cuda
