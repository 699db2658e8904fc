// ferry-cuda-model-check's check of carries over device pages (cuda_carry_check.cc).
#pragma once

#include "model/cuda/device_buffer.h"

namespace ferry::model {

// 0 when a conversation's device rows carried from rank 0 to rank 1 arrive byte for byte.
int CarryMain(cuda::Precision precision);

}  // namespace ferry::model
