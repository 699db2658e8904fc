// ferry-cuda-model-check's NVFP4 experts section (cuda_nvfp4_check.cc).
#pragma once

#include <string>

namespace ferry::model {

// The checkpoint at `dir` with its expert projections quantized to NVFP4 (ModelOpt's layout, as
// `ferry quantize --format nvfp4` writes them), run in bf16 with the experts kept packed
// (MoeGemvNvfp4) and upcast, against a float32 run over the same (exactly decoded) weights with
// its indexer and routing decisions replayed; and a layer whose experts mix formats refused. Then
// W4A4 numerics: calibrated input scales, the device's bf16 W4A4 run against the CPU reference's
// W4A4 run (decisions replayed). 0 when every prompt is within its bound and the refusals hold.
int Nvfp4Main(const std::string& dir);

}  // namespace ferry::model
