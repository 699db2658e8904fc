// A MoE layer's experts kept in the checkpoint's NVFP4 on the device (ffn_cuda.h's CudaMlp::nvfp4):
// loading an expert's tensor-parallel shard packed for kernels::cuda::MoeGemvNvfp4, and the
// layer's dispatch over them, grouped on the device (MoeGroupPairs), at every batch size.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/blocks/ffn.h"
#include "model/cuda/decision_tap.h"
#include "model/cuda/ffn_cuda.h"

namespace ferry::model::cuda {

// The SwiGLU MLP under `w` (gate_proj and up_proj [inter, hidden], down_proj [hidden, inter]; this
// rank's rows of gate and up, its columns of down: LoadMlpCuda's shard) kept in NVFP4 when the
// checkpoint stores all three so and the shard falls on whole 16-row tiles and 16-column groups:
// dst->gate_up4 (gate rows then up rows, each with its tensor's global scale) and dst->down4,
// dst->nvfp4 = *kept = true. Otherwise *kept = false and nothing is loaded (the caller upcasts).
// `staging` is reusable device memory for the stored bytes before packing. With `w4a4` (W4A4
// numerics: activation scales for gate/up and down, > 0) each matrix is packed with its global
// scale times its input's scale and dst->w4a4 is set; a shard off whole tiles is then an error.
// Errors: INVALID_ARGUMENT naming the MLP when gate_proj is NVFP4 but up_proj or down_proj is not
// (or, with w4a4, its shard is not whole 16-row tiles); the checkpoint's (Nvfp4Data) and the
// allocator's as they come.
absl::Status LoadMlpNvfp4(const WeightLoader& w, int64_t hidden, int64_t inter, const TensorParallel& tp,
                          CudaMlp* dst, DeviceBuffer* staging, bool* kept, const W4a4Scales* w4a4 = nullptr);

// W4a4ScalesOf (model/blocks/ffn.h) of the MLP under `w`; {0, 0} when it is not stored in NVFP4.
absl::StatusOr<W4a4Scales> MlpW4a4Scales(const WeightLoader& w, int64_t hidden, int64_t inter);

// f->nvfp4_gate_up_table / nvfp4_down_table from f's experts (all NVFP4) and its shared expert
// at [n_experts] when it is NVFP4 and one expert wide (else null there).
absl::Status MakeNvfp4Tables(CudaFfn* f);

// FfnAdd's NVFP4 way, the routing in s.experts / s.route_w already: x [R, hidden] (+)= the MoE of
// a [R, hidden], in pieces of up to kMoeMaxPairs / top_k rows, each MoeGroupPairs, MoeGemvNvfp4
// (gate_up over the pairs' rows of a), SwiGlu, MoeGemvNvfp4 (down into the slots, the shared
// expert's rows into y), MoeCombine. A shared expert outside the tables runs as
// shared_apart(a rows, rows, y rows) after the routed ones. y [R, hidden] is scratch. W4A4
// experts (CudaMlp::w4a4) round each piece of a (into y, before the down product writes there)
// and the SwiGlu output to NVFP4 first, under the layer's scales; `tap` sees each rounding
// (TapFp4Rows: a's rows as DecisionLog::kFp4RoutedInput's, each pair's SwiGlu row as its expert's
// or the shared expert's). shared_apart gets the piece's first row of a.
using SharedRun = std::function<absl::Status(const uint16_t* a, int64_t rows, uint16_t* y, int64_t row0)>;
absl::Status MoeNvfp4(const CudaFfn& f, const ModelConfig& c, const uint16_t* a, int64_t R,
                      const FfnScratch<uint16_t>& s, uint16_t* y, float* x, bool assign, const SharedRun& shared_apart,
                      const DecisionTap& tap = {});

}  // namespace ferry::model::cuda
