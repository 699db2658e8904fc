// EncodePagedRowsMap (tma.h): cuTensorMapEncodeTiled through the runtime's driver entry point, so
// that nothing links libcuda directly.
#include "kernels/cuda/tma.h"

#include <cuda_runtime.h>

namespace ferry::kernels::cuda {
namespace {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn EncodeTiled() {
  static const EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<EncodeTiledFn>(nullptr);
    }
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

}  // namespace

bool EncodePagedRowsMap(CUtensorMap* map, const void* arena, int64_t width, int64_t page_rows, int64_t page_stride,
                        int64_t n_pages, int box_rows) {
  const EncodeTiledFn encode = EncodeTiled();
  if (encode == nullptr || map == nullptr || arena == nullptr) return false;
  if (n_pages < 1 || n_pages >= (int64_t{1} << 31) || page_rows < 1 || page_rows >= (int64_t{1} << 31) ||
      width < 64 || width % 64 != 0 || page_stride < page_rows * width || page_stride % 8 != 0 ||
      reinterpret_cast<uintptr_t>(arena) % 16 != 0 || page_stride * 2 >= (int64_t{1} << 40) || box_rows < 1 ||
      box_rows > 256 || box_rows > page_rows) {
    return false;
  }
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(width), static_cast<cuuint64_t>(page_rows),
                              static_cast<cuuint64_t>(n_pages)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(width) * 2, static_cast<cuuint64_t>(page_stride) * 2};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box_rows), 1}, elem_strides[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(arena), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace ferry::kernels::cuda
