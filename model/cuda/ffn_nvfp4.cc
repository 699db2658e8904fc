#include "model/cuda/ffn_nvfp4.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/gemv_nvfp4.h"
#include "kernels/cuda/ops.h"
#include "model/cuda/act_ops.h"

namespace ferry::model::cuda {

namespace cu = ferry::kernels::cuda;

namespace {

// Packs rows [row0, row0 + rows) of the packed [out, cols] matrix at `packed` from stored codes
// [rows, cols / 2] and scales [rows, cols / 16] in host memory, through `staging`.
absl::Status PackFromHost(const uint8_t* codes, const uint8_t* scales, float global_scale, int64_t rows, int64_t cols,
                          uint8_t* packed, int64_t out, int64_t row0, DeviceBuffer* staging) {
  const size_t code_bytes = static_cast<size_t>(rows * cols / 2), scale_bytes = static_cast<size_t>(rows * cols / 16);
  const size_t scale_at = (code_bytes + 255) / 256 * 256;
  if (staging->bytes() < scale_at + scale_bytes) {
    FERRY_ASSIGN_OR_RETURN(*staging, DeviceBuffer::Alloc(scale_at + scale_bytes));
  }
  // cudaMemcpy on the default stream: ordered behind the previous pack, which read the staging
  // bytes, and done with the host bytes when it returns.
  FERRY_RETURN_IF_ERROR(cu::CopyToDevice(staging->get(), codes, code_bytes));
  FERRY_RETURN_IF_ERROR(cu::CopyToDevice(staging->as<uint8_t>() + scale_at, scales, scale_bytes));
  return cu::PackNvfp4(staging->as<const uint8_t>(), staging->as<const uint8_t>() + scale_at, global_scale, rows, cols,
                       packed, out, row0);
}

}  // namespace

absl::StatusOr<W4a4Scales> MlpW4a4Scales(const WeightLoader& w, int64_t hidden, int64_t inter) {
  W4a4Scales s;
  FERRY_ASSIGN_OR_RETURN(const Checkpoint::Nvfp4Tensor gate, w.Nvfp4Matrix("gate_proj.weight", inter, hidden));
  FERRY_ASSIGN_OR_RETURN(const Checkpoint::Nvfp4Tensor up, w.Nvfp4Matrix("up_proj.weight", inter, hidden));
  FERRY_ASSIGN_OR_RETURN(const Checkpoint::Nvfp4Tensor down, w.Nvfp4Matrix("down_proj.weight", hidden, inter));
  if (gate.packed == nullptr || up.packed == nullptr || down.packed == nullptr) return s;
  return W4a4ScalesOf(w.prefix(), gate, up, down);
}

absl::Status LoadMlpNvfp4(const WeightLoader& w, int64_t hidden, int64_t inter, const TensorParallel& tp,
                          CudaMlp* dst, DeviceBuffer* staging, bool* kept, const W4a4Scales* w4a4) {
  *kept = false;
  FERRY_ASSIGN_OR_RETURN(const Checkpoint::Nvfp4Tensor gate, w.Nvfp4Matrix("gate_proj.weight", inter, hidden));
  if (gate.packed == nullptr) return absl::OkStatus();
  FERRY_ASSIGN_OR_RETURN(const Checkpoint::Nvfp4Tensor up, w.Nvfp4Matrix("up_proj.weight", inter, hidden));
  FERRY_ASSIGN_OR_RETURN(const Checkpoint::Nvfp4Tensor down, w.Nvfp4Matrix("down_proj.weight", hidden, inter));
  if (up.packed == nullptr || down.packed == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(w.prefix(), "gate_proj.weight is stored in NVFP4 but up_proj / down_proj are not"));
  }
  // The shard: rows [r0, r1) of gate and up (stacked at a 16-row tile), columns [r0, r1) of down
  // (whole 16-column groups).
  const int64_t r0 = tp.Begin(inter), n = tp.Local(inter);
  if (n % 16 != 0 || r0 % 16 != 0 || hidden % 16 != 0) {
    if (w4a4 == nullptr) return absl::OkStatus();  // upcast: W4A16 numerics
    return absl::InvalidArgumentError(absl::StrCat(
        w.prefix(), ": this rank's rows [", r0, ", ", r0 + n, ") of ", inter, " at tensor-parallel width ", tp.world,
        " do not fall on NVFP4 groups of 16 (W4A4 numerics keep the weights as stored)"));
  }
  // W4A4: the activation scale joins each matrix's global scale (the product's alpha).
  const float gu_scale = w4a4 != nullptr ? w4a4->gate_up : 1.0f, down_scale = w4a4 != nullptr ? w4a4->down : 1.0f;
  const int64_t code_row = hidden / 2, scale_row = hidden / 16;
  FERRY_ASSIGN_OR_RETURN(dst->gate_up4.packed,
                         DeviceBuffer::Alloc(static_cast<size_t>(cu::Nvfp4PackedBytes(2 * n, hidden))));
  auto global = [&](float weight_scale, float act_scale) { return w4a4 != nullptr ? act_scale * weight_scale : weight_scale; };
  FERRY_RETURN_IF_ERROR(PackFromHost(gate.packed + r0 * code_row, gate.scales + r0 * scale_row,
                                     global(gate.global_scale, gu_scale), n, hidden,
                                     dst->gate_up4.packed.as<uint8_t>(), 2 * n, 0, staging));
  FERRY_RETURN_IF_ERROR(PackFromHost(up.packed + r0 * code_row, up.scales + r0 * scale_row,
                                     global(up.global_scale, gu_scale), n, hidden, dst->gate_up4.packed.as<uint8_t>(),
                                     2 * n, n, staging));
  std::vector<uint8_t> codes(static_cast<size_t>(hidden * n / 2)), scales(static_cast<size_t>(hidden * n / 16));
  for (int64_t r = 0; r < hidden; ++r) {
    std::memcpy(codes.data() + r * n / 2, down.packed + r * (inter / 2) + r0 / 2, static_cast<size_t>(n / 2));
    std::memcpy(scales.data() + r * n / 16, down.scales + r * (inter / 16) + r0 / 16, static_cast<size_t>(n / 16));
  }
  FERRY_ASSIGN_OR_RETURN(dst->down4.packed, DeviceBuffer::Alloc(static_cast<size_t>(cu::Nvfp4PackedBytes(hidden, n))));
  FERRY_RETURN_IF_ERROR(PackFromHost(codes.data(), scales.data(), global(down.global_scale, down_scale), hidden, n,
                                     dst->down4.packed.as<uint8_t>(), hidden, 0, staging));
  if (w4a4 != nullptr) {
    dst->w4a4 = true;
    dst->w4a4_gate_up = gu_scale;
    dst->w4a4_down = down_scale;
  }
  dst->gate_up4.out = 2 * n;
  dst->gate_up4.in = hidden;
  dst->down4.out = hidden;
  dst->down4.in = n;
  dst->nvfp4 = true;
  *kept = true;
  return absl::OkStatus();
}

absl::Status MakeNvfp4Tables(CudaFfn* f) {
  const size_t E = f->experts.size();
  std::vector<const void*> gate_up(E + 1, nullptr), down(E + 1, nullptr);
  for (size_t e = 0; e < E; ++e) {
    gate_up[e] = f->experts[e].gate_up4.packed.get();
    down[e] = f->experts[e].down4.packed.get();
  }
  if (f->has_shared && f->shared.nvfp4 && f->shared.inter() == f->moe_inter) {
    gate_up[E] = f->shared.gate_up4.packed.get();
    down[E] = f->shared.down4.packed.get();
  }
  FERRY_ASSIGN_OR_RETURN(f->nvfp4_gate_up_table, Upload(gate_up.data(), gate_up.size() * sizeof(const void*)));
  FERRY_ASSIGN_OR_RETURN(f->nvfp4_down_table, Upload(down.data(), down.size() * sizeof(const void*)));
  return absl::OkStatus();
}

namespace {

// TapFp4Rows over the pairs' rows h [pairs, cols] of a piece whose first row is row0: each listed
// pair as its expert's (the shared group, id n_experts, as the shared expert's) at its token.
absl::Status TapPairRows(const DecisionTap& tap, const cu::MoePairs& p, int64_t max_groups, int64_t pairs,
                         int64_t n_experts, int64_t row0, uint16_t* h, int64_t cols) {
  if (tap.log == nullptr || pairs == 0) return absl::OkStatus();
  int32_t groups = 0;
  FERRY_RETURN_IF_ERROR(cu::CopyToHost(&groups, p.n_groups, sizeof(int32_t)));
  groups = std::min<int32_t>(groups, static_cast<int32_t>(max_groups));
  std::vector<int32_t> expert(static_cast<size_t>(groups)), start(expert.size()), count(expert.size());
  std::vector<int32_t> src(static_cast<size_t>(pairs));
  if (groups > 0) {
    FERRY_RETURN_IF_ERROR(cu::CopyToHost(expert.data(), p.group_expert, expert.size() * sizeof(int32_t)));
    FERRY_RETURN_IF_ERROR(cu::CopyToHost(start.data(), p.group_start, start.size() * sizeof(int32_t)));
    FERRY_RETURN_IF_ERROR(cu::CopyToHost(count.data(), p.group_count, count.size() * sizeof(int32_t)));
  }
  FERRY_RETURN_IF_ERROR(cu::CopyToHost(src.data(), p.src_row, src.size() * sizeof(int32_t)));
  // The listed pairs are [0, their number): the rows past them (ids flagged invalid) hold nothing.
  std::vector<Fp4RowId> ids;
  for (int32_t g = 0; g < groups; ++g) {
    const int64_t mlp = expert[g] == n_experts ? DecisionLog::kFp4SharedExpert : expert[g];
    for (int32_t j = start[g]; j < start[g] + count[g]; ++j) ids.push_back({mlp, row0 + src[static_cast<size_t>(j)]});
  }
  return TapFp4Rows(tap, 1, ids, h, cols);
}

}  // namespace

absl::Status MoeNvfp4(const CudaFfn& f, const ModelConfig& c, const uint16_t* a, int64_t R,
                      const FfnScratch<uint16_t>& s, uint16_t* y, float* x, bool assign,
                      const SharedRun& shared_apart, const DecisionTap& tap) {
  const int64_t D = c.hidden_size, E = f.routing.n_experts, K = f.routing.top_k, MI = f.moe_inter;
  const bool fused = f.has_shared && f.shared.nvfp4 && f.shared.inter() == MI;
  // MoeGroupPairs takes up to kMoeMaxPairs pairs a call; the scratch holds R rows' pairs.
  const int64_t piece = std::max<int64_t>(1, cu::kMoeMaxPairs / std::max<int64_t>(K, 1));
  const cu::MoePairs p{s.group_expert, s.group_start, s.group_count, s.n_groups, s.order, s.src_row};
  const auto* up = f.nvfp4_gate_up_table.as<const uint8_t* const>();
  const auto* down = f.nvfp4_down_table.as<const uint8_t* const>();
  const CudaMlp& ex0 = f.experts.front();
  const bool w4a4 = ex0.w4a4;  // the layer's experts share format and scales (LoadFfnCuda)
  for (int64_t r0 = 0; r0 < R; r0 += piece) {
    const int64_t n = std::min(piece, R - r0);
    const uint16_t* an = a + r0 * D;
    uint16_t* yn = y + r0 * D;
    FERRY_RETURN_IF_ERROR(cu::MoeGroupPairs(s.experts + r0 * K, n, K, E, fused, p, s.error));
    const int64_t groups = cu::MoeMaxGroups(n, K, E, fused), pairs = n * K + (fused ? n : 0);
    const uint16_t* xn = an;
    if (w4a4) {  // a's rows rounded once for every expert (into yn, free until the down product)
      FERRY_RETURN_IF_ERROR(cu::RoundActivationsW4A4(an, n, D, ex0.w4a4_gate_up, yn));
      FERRY_RETURN_IF_ERROR(TapFp4Rows(tap, 0, Fp4RowsOf(tap, DecisionLog::kFp4RoutedInput, r0, n), yn, D));
      xn = yn;
    }
    FERRY_RETURN_IF_ERROR(cu::MoeGemvNvfp4(up, p, groups, n, xn, /*gather_x=*/true, D, 2 * MI, s.gu, false, nullptr));
    FERRY_RETURN_IF_ERROR(act::SwiGlu(s.gu, s.gu + MI, pairs, MI, 2 * MI, c.swiglu_limit, s.h));
    if (w4a4) {
      FERRY_RETURN_IF_ERROR(cu::RoundActivationsW4A4(s.h, pairs, MI, ex0.w4a4_down, s.h));
      FERRY_RETURN_IF_ERROR(TapPairRows(tap, p, groups, pairs, E, r0, s.h, MI));
    }
    FERRY_RETURN_IF_ERROR(cu::MoeGemvNvfp4(down, p, groups, n, s.h, /*gather_x=*/false, MI, D, s.slots, true, yn));
    if (f.has_shared && !fused) FERRY_RETURN_IF_ERROR(shared_apart(an, n, yn, r0));
    FERRY_RETURN_IF_ERROR(act::MoeCombine(s.slots, s.route_w + r0 * K, f.has_shared ? yn : nullptr, n, K, D,
                                          x + r0 * D, assign));
  }
  return absl::OkStatus();
}

}  // namespace ferry::model::cuda
