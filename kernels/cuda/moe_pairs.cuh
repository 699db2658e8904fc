// Device-side helpers of the decode MoE dispatch's pair list (gemv.h's MoePairs), shared by the
// bf16 and NVFP4 expert products (gemv.cu, gemv_nvfp4.cu).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/gemv.h"

namespace ferry::kernels::cuda {

// The output row of pair j: row j of y (the list's order), or with scatter_y the row of its pair
// index (row * top_k + slot), the shared group's pairs (order -1) in y_shared's row of their source
// row. Rows are `out` values wide.
__device__ __forceinline__ __nv_bfloat16* MoePairOutRow(const MoePairs& p, int j, bool scatter_y, __nv_bfloat16* y,
                                                        __nv_bfloat16* y_shared, int64_t out) {
  if (!scatter_y) return y + static_cast<int64_t>(j) * out;
  if (p.order[j] >= 0) return y + static_cast<int64_t>(p.order[j]) * out;
  return y_shared + static_cast<int64_t>(p.src_row[j]) * out;
}

}  // namespace ferry::kernels::cuda
