// What a model's weights take on each rank, from config.json alone: every tensor the engine
// loads (model/checkpoint/tensor_list.h), in the format its checkpoint stores it
// (model/checkpoint/quantization.h), split over the ranks as the loaders split it. For sizing a
// deployment before any weight is on disk (`ferry plan`), and for a loader to hold itself to.
//
// Bytes of a tensor of V values on one rank (V counts the rank's share of a split tensor):
//   bf16                 2 V (every tensor that is not a quantized Linear weight; the few that
//                        a release keeps in float32, such as router biases, are counted so too)
//   fp8 (block scales)   V + 4 x blocks: one float32 a weight_block_size block of the rank's
//                        rows x columns (a partial block at an edge counts whole)
//   fp8 (a scale a tensor)  V + 4 (+ 4 with input scales)
//   nvfp4                V / 2 + V / 16 + 4 (+ 4 with input scales): two E2M1 values a byte, an
//                        E4M3 scale a group of 16, the float32 global scale
// A rank keeps every weight as stored: the serving target. (Today's CUDA backend keeps bf16
// weights, NVFP4 MLPs and experts (in bf16 precision), and FP8 experts on sm_90 so, and upcasts
// every other FP8 weight to bf16, on the GB10 too; the CPU backend holds float32.)
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/quantization.h"
#include "model/checkpoint/tensor_list.h"

namespace ferry::model {

// The format `t` is stored in under `q`: q.FormatOf for a Linear weight, bf16 otherwise.
// REQUIRES: q.known().
WeightFormat TensorFormat(const ModelTensor& t, const QuantizationScheme& q);

// The bytes of `t`, stored as `format`, that one of `ranks` ranks holds (the whole tensor when
// it is replicated).
// Errors: INVALID_ARGUMENT naming the tensor and the numbers when its split_units do not divide
// by `ranks`, or when a rank's share of an NVFP4 tensor's columns is not whole groups of 16.
absl::StatusOr<int64_t> RankBytes(const ModelTensor& t, WeightFormat format, const QuantizationScheme& q,
                                  int64_t ranks);

struct WeightBytes {
  int64_t bytes = 0;             // the weights one rank holds, in their stored formats
  int64_t values = 0;            // weight values one rank holds (scales not counted)
  int64_t replicated_bytes = 0;  // of `bytes`, in tensors every rank holds whole
  int64_t tensors[kWeightFormats] = {};      // tensors by format (their scales not counted apart)
  int64_t format_bytes[kWeightFormats] = {}; // `bytes` by format, scales with their weights
};

// What each of `ranks` ranks holds of `c`'s weights stored as `q` says (every rank holds the
// same: splits are even).
// Errors: UNIMPLEMENTED when !q.known(); INVALID_ARGUMENT for ranks < 1 and as RankBytes.
absl::StatusOr<WeightBytes> WeightBytesPerRank(const ModelConfig& c, const QuantizationScheme& q, int64_t ranks);

}  // namespace ferry::model
