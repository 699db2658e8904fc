// The feed-forward blocks of both families on the device (model/blocks/ffn.h's math): the SwiGLU MLP
// (dense layers, each expert, the shared expert; glm5_next's clamp via swiglu_limit) and the
// sigmoid-routed MoE.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/ops.h"
#include "model/checkpoint/config.h"
#include "model/parallel/tensor_parallel.h"
#include "model/cuda/decision_tap.h"
#include "model/cuda/device_buffer.h"
#include "model/checkpoint/weights.h"

namespace ferry::model::cuda {

// A matrix [out, in] kept in the checkpoint's FP8 for kernels::cuda::GroupedLinearW8A8: the E4M3
// bytes packed (PackFp8W8A8) and the float32 128 x 128 block scales, [ceil(out / 128), ceil(in / 128)].
struct Fp8Matrix {
  DeviceBuffer packed, scales;
  int64_t out = 0, in = 0;
  int64_t bytes() const { return static_cast<int64_t>(packed.bytes() + scales.bytes()); }
};

// A matrix [out, in] kept in the checkpoint's NVFP4, packed for kernels::cuda::MoeGemvNvfp4
// (PackNvfp4's tiles, a global scale a 16-row tile: gate and up stack in one with their own).
struct Nvfp4Matrix {
  DeviceBuffer packed;
  int64_t out = 0, in = 0;
  int64_t bytes() const { return static_cast<int64_t>(packed.bytes()); }
};

struct CudaMlp {
  DeviceWeight gate_up;  // [2 * inter, hidden]: gate rows, then up rows
  DeviceWeight down;     // [hidden, inter]
  // An expert kept in FP8 instead (gate_up and down then empty): gate and up apart (their
  // 128-row scale blocks need not fall on the boundary between them).
  bool fp8 = false;
  Fp8Matrix gate8, up8, down8;
  // An expert kept in NVFP4 instead: gate_up4 [2 * inter, hidden] (gate rows, then up rows) and
  // down4 [hidden, inter] (ffn_nvfp4.h).
  bool nvfp4 = false;
  Nvfp4Matrix gate_up4, down4;
  // NVFP4 with W4A4 numerics (Nvfp4Numerics::kW4A4): gate_up4 and down4 packed with global scale
  // input scale x weight_scale_2, each input rounded to NVFP4 first (RoundActivationsW4A4) under
  // w4a4_gate_up / w4a4_down (model/blocks/ffn.h's choice of scales).
  bool w4a4 = false;
  float w4a4_gate_up = 0.0f, w4a4_down = 0.0f;
  int64_t inter() const { return fp8 ? down8.in : nvfp4 ? down4.in : down.cols; }
};

struct CudaFfn {
  bool dense = false;
  CudaMlp mlp;  // dense layers
  DeviceWeight router;  // [E, hidden]
  DeviceBuffer bias;    // float32 [E] (selection only)
  std::vector<CudaMlp> experts;
  int64_t moe_inter = 0;  // a routed expert's intermediate width on this rank (its shard)
  bool has_shared = false;
  CudaMlp shared;
  kernels::cpu::RoutingParams routing;
  // Every routed expert (and the shared expert, one expert wide) in FP8 (CudaMlp::fp8): the
  // checkpoint stores them so, the precision is bf16, the device runs GroupedLinearW8A8 and the
  // load options ask for it (CudaLoadOptions::fp8_experts; else they are upcast to bf16, as the
  // CPU reference does).
  bool fp8_experts = false;
  // bf16 experts only: device arrays of n_experts + 1 pointers, expert e's gate_up / down matrix at [e]
  // and the shared expert's at [n_experts] when it is bf16 and one expert wide (else null): the tables
  // through which the decode dispatch (kernels::cuda::MoeGemvBf16) finds the chosen experts.
  DeviceBuffer gate_up_table, down_table;
  // FP8 experts only: the same for the W8A8 decode dispatch (kernels::cuda::GroupedLinearW8A8Moe),
  // six device arrays of n_experts + 1 pointers in this order: gate packed, gate scales, up packed,
  // up scales, down packed, down scales (the shared expert at [n_experts] when it is FP8 and one
  // expert wide, else null).
  DeviceBuffer fp8_tables;
  // Every routed expert in NVFP4 (CudaMlp::nvfp4; CudaLoadOptions::nvfp4_experts, bf16): device
  // arrays of n_experts + 1 packed matrices, gate_up and down, for MoeGemvNvfp4 (the shared
  // expert at [n_experts] when it is NVFP4 and one expert wide, else null: it then runs apart).
  bool nvfp4_experts = false;
  DeviceBuffer nvfp4_gate_up_table, nvfp4_down_table;
};

// Loads this rank's shard of layer `layer`'s FFN under `w` ("...mlp.") in precision p (one
// expert at a time: the float32 copies of all experts never coexist): model::LoadFfn's split,
// every MLP's intermediate rows over tp's ranks, the router replicated. Adds the device bytes to
// *bytes. FP8 experts stay FP8 as CudaFfn::fp8_experts says (a shard must fall on whole 128 x 128
// scale blocks, else they are upcast); INVALID_ARGUMENT when only some of a layer's experts are
// FP8, or a width does not split over the ranks.
absl::StatusOr<CudaFfn> LoadFfnCuda(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                                    const CudaLoadOptions& opts, const TensorParallel& tp, int64_t* bytes);

// A step's FFN scratch for R rows (the widest of the dense MLP, the routed experts' R * top_k
// rows and the shared expert), T the activation type (uint16_t bf16 bits or float).
template <typename T>
struct FfnScratch {
  T *gu, *h, *xin, *yout, *slots;
  float *logits, *route_w;
  int32_t *experts, *order, *src_row;
  // The decode dispatch's expert groups (kernels::cuda::MoePairs) and its error word, zeroed
  // when the scratch is taken, brought back with the step's logits and judged by FfnErrorStatus.
  int32_t *group_expert, *group_start, *group_count, *n_groups, *error;
  // FP8 experts (bf16 only; null otherwise): one projection's quantized inputs, the routed rows
  // then the shared expert's, E4M3 [R * top_k + R, width] and their scales [width / 128][R * top_k
  // + R] (kernels::cuda::QuantizeActFp8). They share yout's memory (the FP8 path writes the
  // routed outputs straight into slots, in token order).
  uint8_t* q8;
  float* s8;
  // The W8A8 decode dispatch's problem list (kGroupedW8A8MoeScratchBytes; bf16 with experts and
  // decode-sized rows only, else null).
  void* w8a8_problems;
  // The dequantized tiles of an NVFP4 MLP's many-row products (kernels::cuda::LinearNvfp4; bf16,
  // nvfp4_tile_bytes > 0 and rows >= KernelOptions::nvfp4_gemm_min_rows only, else null and 0).
  uint16_t* nvfp4_tiles;
  int64_t nvfp4_tile_bytes;
};
// nvfp4_tile_bytes: the most the model's NVFP4 MLPs want (Nvfp4TileBytes over its layers).
template <typename T>
absl::StatusOr<FfnScratch<T>> TakeFfnScratch(Workspace& ws, const ModelConfig& c, int64_t rows,
                                             int64_t nvfp4_tile_bytes = 0);
// The scratch for dequantized tiles that the NVFP4 MLPs of `f` which run alone (a dense layer's,
// a shared expert outside the experts' dispatch) want at many rows; 0 when none.
int64_t Nvfp4TileBytes(const CudaFfn& f);

// x [R, hidden] float32 += FFN(a) (= with assign), a [R, hidden] of type T; y [R, hidden] T is scratch.
// MoE dispatch, two ways:
//  - decode-sized batches in bf16 (R <= kMoeGemvMaxRows, the shared expert absent or bf16 and one
//    expert wide): on the device alone. MoeGroupPairs orders the (row, slot) pairs by expert and
//    MoeGemvBf16 streams each chosen expert's matrices once (gate_up, then down into the slots),
//    so the host queues the whole layer without waiting for the routing; FP8 experts the same
//    way with W8A8 numerics: a's rows quantized once, then GroupedLinearW8A8Moe (gate and up
//    over the pairs' gathered rows), SwiGluQuantizeActFp8, GroupedLinearW8A8Moe (down into the
//    slots and the shared expert's rows into y);
//  - NVFP4 experts (CudaFfn::nvfp4_experts, bf16), every batch size: the same device dispatch
//    through MoeGemvNvfp4 (ffn_nvfp4.h), in pieces of up to kMoeMaxPairs / top_k rows;
//  - otherwise the chosen expert ids come to the host (one sync), which orders the pairs by
//    expert and runs each expert with rows as one cuBLAS call, in bf16 the experts (and a
//    one-expert-wide shared expert) side by side on the side streams of GroupedLinearBf16; FP8
//    experts (CudaFfn::fp8_experts, larger batches) as the FP8 releases run them (W8A8): each
//    projection's input quantized per row in groups of 128 (QuantizeActFp8), then every expert's
//    product in one GroupedLinearW8A8 launch a projection, the down outputs scattered to token
//    order as they are stored.
// MoeCombine then sums each row's slots in model::MoeForward's order, with the shared expert.
// `tap` (off by default) sees the routing right after MoeRoute and may pin it (decision_tap.h).
// With `assign`, x = FFN(a) instead of x += FFN(a) (x need not be initialised; no zero fill).
// Instantiated for uint16_t and float (ffn_cuda.cc).
inline constexpr int64_t kMoeGemvMaxRows = 64;
template <typename T>
absl::Status FfnAdd(const CudaFfn& f, const ModelConfig& c, const T* a, int64_t rows, const FfnScratch<T>& s, T* y,
                    float* x, const DecisionTap& tap = {}, bool assign = false);

// After a step that ran FfnAdd, given its error word (FfnScratch::error, 4 bytes; 0 when the
// scratch has none): INTERNAL when the decode dispatch met an expert id outside [0, n_experts), or
// (FP8 experts) one expert picked twice in a row (a corrupt or wrongly pinned routing: MoeRoute
// itself always picks distinct ids in range, NaN logits included, which give NaN weights
// instead). The step's output is then void, and so is the state
// of the conversations in it: their caches and glm5_next's KDA state took the step's tokens, their
// lengths did not (drop them).
absl::Status FfnErrorStatus(int32_t error, int64_t n_experts);

}  // namespace ferry::model::cuda
