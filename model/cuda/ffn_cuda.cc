#include "model/cuda/ffn_cuda.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/options.h"
#include "model/cuda/act_ops.h"
#include "kernels/cuda/gemv_nvfp4.h"
#include "model/cuda/ffn_nvfp4.h"
#include "model/blocks/ffn.h"

namespace ferry::model::cuda {

namespace cu = ferry::kernels::cuda;

namespace {

// Matrix `name` [out, in] of `w` (its window `slice`: a tensor-parallel shard) into *dst when the
// checkpoint stores it in FP8 with 128 x 128 scale blocks and the window falls on whole blocks
// (*kept = true); otherwise *kept = false and nothing is loaded. `staging` is a reusable device
// buffer for the row-major bytes before packing.
absl::Status LoadFp8Matrix(const WeightLoader& w, const std::string& name, int64_t out, int64_t in, const Slice& slice,
                           DeviceBuffer* staging, Fp8Matrix* dst, bool* kept) {
  *kept = false;
  FERRY_ASSIGN_OR_RETURN(Checkpoint::Fp8Tensor t, w.Fp8Matrix(name, out, in));
  const int64_t BR = kernels::cuda::kFp8BlockRows, BC = kernels::cuda::kFp8BlockCols;
  if (t.bytes == nullptr || t.block_rows != BR || t.block_cols != BC) return absl::OkStatus();
  const int64_t r0 = slice.row_begin, r1 = slice.row_end < 0 ? out : slice.row_end;
  const int64_t c0 = slice.col_begin, c1 = slice.col_end < 0 ? in : slice.col_end;
  // A window that cuts a scale block cannot keep the block's scale: upcast instead.
  if (r0 % BR != 0 || (r1 % BR != 0 && r1 != out) || c0 % BC != 0 || (c1 % BC != 0 && c1 != in)) {
    return absl::OkStatus();
  }
  const int64_t rows = r1 - r0, cols = c1 - c0;
  const size_t raw = static_cast<size_t>(rows * cols);
  if (staging->bytes() < raw) {
    FERRY_ASSIGN_OR_RETURN(*staging, DeviceBuffer::Alloc(raw));
  }
  std::vector<float> scales;
  if (rows == out && cols == in) {
    FERRY_RETURN_IF_ERROR(cu::CopyToDevice(staging->get(), t.bytes, raw));
    scales = std::move(t.scales);
  } else {
    std::vector<uint8_t> window(raw);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(window.data() + r * cols, t.bytes + (r0 + r) * in + c0, cols);
    FERRY_RETURN_IF_ERROR(cu::CopyToDevice(staging->get(), window.data(), raw));
    const int64_t scale_cols = (in + BC - 1) / BC;
    for (int64_t br = r0 / BR; br < (r1 + BR - 1) / BR; ++br) {
      for (int64_t bc = c0 / BC; bc < (c1 + BC - 1) / BC; ++bc) scales.push_back(t.scales[br * scale_cols + bc]);
    }
  }
  FERRY_ASSIGN_OR_RETURN(dst->packed, DeviceBuffer::Alloc(static_cast<size_t>(cu::Fp8W8A8PackedBytes(rows, cols))));
  FERRY_RETURN_IF_ERROR(cu::PackFp8W8A8(staging->as<const uint8_t>(), rows, cols, dst->packed.as<uint8_t>()));
  FERRY_ASSIGN_OR_RETURN(dst->scales, Upload(scales.data(), scales.size() * sizeof(float)));
  dst->out = rows;
  dst->in = cols;
  *kept = true;
  return absl::OkStatus();
}

// The SwiGLU MLP under `w` (model::LoadMlp's tensors, shapes and tensor-parallel shard: this
// rank's rows of gate and up, its columns of down), a bf16 checkpoint's bits copied as they are
// (LoadStacked / LoadMatrix). With `staging` (an expert, FP8 wanted and possible): kept in FP8
// when the checkpoint stores all three matrices so and the shard falls on whole scale blocks
// (dst->fp8). With `staging4` (an expert, NVFP4 wanted): kept in NVFP4 the same way
// (LoadMlpNvfp4, dst->nvfp4), with W4A4 numerics under `w4a4`'s scales when given.
absl::Status LoadMlpCuda(const WeightLoader& w, int64_t hidden, int64_t inter, Precision p, const TensorParallel& tp,
                         CudaMlp* dst, int64_t* bytes, DeviceBuffer* staging = nullptr,
                         DeviceBuffer* staging4 = nullptr, const W4a4Scales* w4a4 = nullptr) {
  FERRY_RETURN_IF_ERROR(CheckDivisible(w.prefix() + " intermediate size", inter, tp.world));
  if (staging4 != nullptr) {
    bool kept = false;
    FERRY_RETURN_IF_ERROR(LoadMlpNvfp4(w, hidden, inter, tp, dst, staging4, &kept, w4a4));
    if (kept) {
      *bytes += dst->gate_up4.bytes() + dst->down4.bytes();
      return absl::OkStatus();
    }
  }
  const Slice rows{tp.Begin(inter), tp.End(inter), 0, -1};
  const Slice cols{0, -1, tp.Begin(inter), tp.End(inter)};
  if (staging != nullptr) {
    bool gate = false, up = false, down = false;
    FERRY_RETURN_IF_ERROR(LoadFp8Matrix(w, "gate_proj.weight", inter, hidden, rows, staging, &dst->gate8, &gate));
    if (gate) {
      FERRY_RETURN_IF_ERROR(LoadFp8Matrix(w, "up_proj.weight", inter, hidden, rows, staging, &dst->up8, &up));
      FERRY_RETURN_IF_ERROR(LoadFp8Matrix(w, "down_proj.weight", hidden, inter, cols, staging, &dst->down8, &down));
      if (!up || !down) {
        return absl::InvalidArgumentError(absl::StrCat(w.prefix(), "gate_proj.weight is stored in FP8 (128 x 128 "
                                                       "blocks) but up_proj / down_proj are not"));
      }
      dst->fp8 = true;
      *bytes += dst->gate8.bytes() + dst->up8.bytes() + dst->down8.bytes();
      return absl::OkStatus();
    }
  }
  FERRY_ASSIGN_OR_RETURN(dst->gate_up,
                         LoadStacked(w, "gate_proj.weight", inter, "up_proj.weight", inter, hidden, p, rows));
  FERRY_ASSIGN_OR_RETURN(dst->down, LoadMatrix(w, "down_proj.weight", hidden, inter, p, cols));
  *bytes += dst->gate_up.bytes() + dst->down.bytes();
  return absl::OkStatus();
}

// y [rows, hidden] = down(SwiGLU(x gate_up^T)) through gu [rows, 2I] and h [rows, I]. An MLP
// kept in NVFP4 (bf16 only) runs its two products through LinearNvfp4 (GemvNvfp4, or with many
// rows and s.nvfp4_tiles dequantized tiles and cuBLAS; gate and up each under its global scale);
// with W4A4 numerics each input is rounded to NVFP4 first (x into y, which the down product then
// overwrites; h in place). y must not alias x.
// W4A4: `tap` sees both roundings as MLP `mlp`'s (DecisionLog::Fp4Row), rows row0.. of the step.
template <typename T>
absl::Status MlpRun(const T* x, int64_t rows, int64_t hidden, const CudaMlp& m, float limit, const FfnScratch<T>& s,
                    T* y, const DecisionTap& tap = {}, int64_t mlp = DecisionLog::kFp4DenseMlp, int64_t row0 = 0) {
  const int64_t I = m.inter();
  T *gu = s.gu, *h = s.h;
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (m.nvfp4) {
      const std::vector<Fp4RowId> ids = m.w4a4 ? Fp4RowsOf(tap, mlp, row0, rows) : std::vector<Fp4RowId>{};
      if (m.w4a4) {
        FERRY_RETURN_IF_ERROR(cu::RoundActivationsW4A4(x, rows, hidden, m.w4a4_gate_up, y));
        FERRY_RETURN_IF_ERROR(TapFp4Rows(tap, 0, ids, y, hidden));
        x = y;
      }
      FERRY_RETURN_IF_ERROR(cu::LinearNvfp4(x, rows, hidden, m.gate_up4.packed.as<const uint8_t>(), 2 * I,
                                            /*part_rows=*/I, s.nvfp4_tiles, s.nvfp4_tile_bytes, gu));
      FERRY_RETURN_IF_ERROR(act::SwiGlu(gu, gu + I, rows, I, 2 * I, limit, h));
      if (m.w4a4) {
        FERRY_RETURN_IF_ERROR(cu::RoundActivationsW4A4(h, rows, I, m.w4a4_down, h));
        FERRY_RETURN_IF_ERROR(TapFp4Rows(tap, 1, ids, h, I));
      }
      return cu::LinearNvfp4(h, rows, I, m.down4.packed.as<const uint8_t>(), hidden, /*part_rows=*/hidden,
                             s.nvfp4_tiles, s.nvfp4_tile_bytes, y);
    }
  }
  FERRY_RETURN_IF_ERROR(act::Linear(x, rows, hidden, m.gate_up.as<T>(), 2 * I, gu));
  FERRY_RETURN_IF_ERROR(act::SwiGlu(gu, gu + I, rows, I, 2 * I, limit, h));
  return act::Linear(h, rows, I, m.down.as<T>(), hidden, y);
}

// One expert's Linear in a MoE layer: y [rows, out] = x [rows, in] · w^T.
template <typename T>
struct ExpertProblem {
  const T* x;
  int64_t rows;
  const T* w;
  T* y;
};

// The problems of one projection of a MoE layer (shared in and out). bf16 runs them side by side
// (GroupedLinearBf16: a few rows an expert cannot fill the GPU alone); the float32 verification
// precision one after another.
template <typename T>
absl::Status ExpertLinears(const std::vector<ExpertProblem<T>>& p, int64_t in, int64_t out) {
  if constexpr (sizeof(T) == 2) {
    std::vector<cu::LinearGroupBf16> g;
    g.reserve(p.size());
    for (const ExpertProblem<T>& e : p) g.push_back({e.x, e.rows, e.w, e.y});
    return cu::GroupedLinearBf16(g.data(), static_cast<int64_t>(g.size()), in, out);
  } else {
    for (const ExpertProblem<T>& e : p) FERRY_RETURN_IF_ERROR(act::Linear(e.x, e.rows, in, e.w, out, e.y));
    return absl::OkStatus();
  }
}

// The decode dispatch (FfnAdd's first way, ffn_cuda.h): routing in s.experts / s.route_w already.
absl::Status MoeOnDevice(const CudaFfn& f, const ModelConfig& c, const uint16_t* a, int64_t R,
                         const FfnScratch<uint16_t>& s, uint16_t* y, float* x, bool assign) {
  const int64_t D = c.hidden_size, E = f.routing.n_experts, K = f.routing.top_k, MI = f.moe_inter;
  const bool shared = f.has_shared;
  const cu::MoePairs p{s.group_expert, s.group_start, s.group_count, s.n_groups, s.order, s.src_row};
  FERRY_RETURN_IF_ERROR(cu::MoeGroupPairs(s.experts, R, K, E, shared, p, s.error));
  const int64_t groups = cu::MoeMaxGroups(R, K, E, shared);
  FERRY_RETURN_IF_ERROR(cu::MoeGemvBf16(f.gate_up_table.as<const uint16_t* const>(), p, groups, R, a,
                                        /*gather_x=*/true, D, 2 * MI, s.gu, /*scatter_y=*/false, nullptr));
  FERRY_RETURN_IF_ERROR(act::SwiGlu(s.gu, s.gu + MI, R * K + (shared ? R : 0), MI, 2 * MI, c.swiglu_limit, s.h));
  FERRY_RETURN_IF_ERROR(cu::MoeGemvBf16(f.down_table.as<const uint16_t* const>(), p, groups, R, s.h,
                                        /*gather_x=*/false, MI, D, s.slots, /*scatter_y=*/true, y));
  return act::MoeCombine(s.slots, s.route_w, shared ? y : nullptr, R, K, D, x, assign);
}

// The decode dispatch of FP8 experts (FfnAdd's first way, ffn_cuda.h): routing in s.experts /
// s.route_w already. Quantized rows: a's R rows (then h's pairs) in q8 / s8, scale stride R * K + R.
absl::Status MoeOnDeviceFp8(const CudaFfn& f, const ModelConfig& c, const uint16_t* a, int64_t R,
                            const FfnScratch<uint16_t>& s, uint16_t* y, float* x, bool assign) {
  const int64_t D = c.hidden_size, E = f.routing.n_experts, K = f.routing.top_k, MI = f.moe_inter;
  const bool shared = f.has_shared;
  const int64_t stride = R * K + R;
  const cu::MoePairs p{s.group_expert, s.group_start, s.group_count, s.n_groups, s.order, s.src_row};
  FERRY_RETURN_IF_ERROR(cu::MoeGroupPairs(s.experts, R, K, E, shared, p, s.error));
  const auto* t = f.fp8_tables.as<const void* const>();
  auto table = [&](int k) {
    return cu::W8A8ExpertTable{reinterpret_cast<const uint8_t* const*>(t + (2 * k) * (E + 1)),
                               reinterpret_cast<const float* const*>(t + (2 * k + 1) * (E + 1))};
  };
  const cu::W8A8ExpertTable gate_up[2] = {table(0), table(1)}, down[1] = {table(2)};
  FERRY_RETURN_IF_ERROR(cu::QuantizeActFp8(a, R, D, s.q8, s.s8, stride));
  FERRY_RETURN_IF_ERROR(cu::GroupedLinearW8A8Moe(gate_up, 2, p, R, E, s.q8, s.s8, stride, /*gather_x=*/true, D, MI,
                                                 s.gu, 2 * MI, /*scatter_y=*/false, nullptr, s.w8a8_problems,
                                                 s.error));
  FERRY_RETURN_IF_ERROR(cu::SwiGluQuantizeActFp8(s.gu, s.gu + MI, R * K + (shared ? R : 0), MI, 2 * MI,
                                                 c.swiglu_limit, s.q8, s.s8, stride));
  FERRY_RETURN_IF_ERROR(cu::GroupedLinearW8A8Moe(down, 1, p, R, E, s.q8, s.s8, stride, /*gather_x=*/false, MI, D,
                                                 s.slots, D, /*scatter_y=*/true, y, s.w8a8_problems, s.error));
  return act::MoeCombine(s.slots, s.route_w, shared ? y : nullptr, R, K, D, x, assign);
}

// FfnAdd's W8A8 dispatch of FP8 experts (ffn_cuda.h), after the host ordered the pairs: start[e]
// is expert e's first position in the expert-ordered batch (row j is a's row s.src_row[j]).
// Quantized rows: the R * K routed ones, then the shared expert's R when it is FP8 (scale stride
// R * K + R either way).
absl::Status MoeFp8Experts(const CudaFfn& f, const ModelConfig& c, const uint16_t* a, int64_t R,
                           const FfnScratch<uint16_t>& s, const std::vector<int64_t>& start, uint16_t* y) {
  const int64_t D = c.hidden_size, K = f.routing.top_k, MI = f.moe_inter, slots = R * K;
  const int64_t stride = slots + R;
  const bool shared8 = f.has_shared && f.shared.fp8;
  const int64_t rows8 = slots + (shared8 ? R : 0);
  std::vector<cu::LinearGroupW8A8> gate_up, down;
  auto add = [&](const CudaMlp& m, int64_t j0, int64_t n, uint16_t* out, int64_t row0) {
    const uint8_t* qx = s.q8 + j0 * D;
    gate_up.push_back({qx, s.s8 + j0, n, m.gate8.packed.as<const uint8_t>(), m.gate8.scales.as<const float>(),
                       s.gu + j0 * 2 * MI});
    gate_up.push_back({qx, s.s8 + j0, n, m.up8.packed.as<const uint8_t>(), m.up8.scales.as<const float>(),
                       s.gu + j0 * 2 * MI + MI});
    down.push_back({s.q8 + j0 * MI, s.s8 + j0, n, m.down8.packed.as<const uint8_t>(),
                    m.down8.scales.as<const float>(), out, row0});
  };
  // The routed outputs land in token order (slots' row of pair s.order[j]), the shared expert's in y.
  for (size_t e = 0; e + 1 < start.size(); ++e) {
    const int64_t n = start[e + 1] - start[e];
    if (n > 0) add(f.experts[e], start[e], n, s.slots, start[e]);
  }
  if (shared8) add(f.shared, slots, R, y, -1);
  FERRY_RETURN_IF_ERROR(cu::QuantizeActFp8Rows(a, s.src_row, slots, D, s.q8, s.s8, stride));
  if (shared8) FERRY_RETURN_IF_ERROR(cu::QuantizeActFp8(a, R, D, s.q8 + slots * D, s.s8 + slots, stride));
  FERRY_RETURN_IF_ERROR(
      cu::GroupedLinearW8A8(gate_up.data(), static_cast<int64_t>(gate_up.size()), D, MI, stride, 2 * MI));
  FERRY_RETURN_IF_ERROR(
      cu::SwiGluQuantizeActFp8(s.gu, s.gu + MI, rows8, MI, 2 * MI, c.swiglu_limit, s.q8, s.s8, stride));
  return cu::GroupedLinearW8A8(down.data(), static_cast<int64_t>(down.size()), MI, D, stride, D, s.order);
}

}  // namespace

absl::StatusOr<CudaFfn> LoadFfnCuda(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                                    const CudaLoadOptions& opts, const TensorParallel& tp, int64_t* bytes) {
  const Precision p = opts.precision;
  CudaFfn f;
  const int64_t D = c.hidden_size;
  f.dense = c.mlp_types[static_cast<size_t>(layer)] == MlpType::kDense;
  if (f.dense) {
    // NVFP4 (as ModelOpt's releases store the dense layers' MLPs) stays packed like the experts.
    DeviceBuffer staging4;
    const bool try_nvfp4 = p == Precision::kBf16 && opts.nvfp4_experts;
    W4a4Scales scales;
    if (try_nvfp4 && opts.nvfp4_numerics == Nvfp4Numerics::kW4A4) {
      FERRY_ASSIGN_OR_RETURN(scales, MlpW4a4Scales(w, D, c.intermediate_size));
    }
    FERRY_RETURN_IF_ERROR(LoadMlpCuda(w, D, c.intermediate_size, p, tp, &f.mlp, bytes, nullptr,
                                      try_nvfp4 ? &staging4 : nullptr, scales.gate_up > 0 ? &scales : nullptr));
    return f;
  }
  const int64_t E = c.n_routed_experts;
  FERRY_ASSIGN_OR_RETURN(Weight router, w.Matrix("gate.weight", E, D));
  FERRY_ASSIGN_OR_RETURN(f.router, UploadWeight(router, p));
  *bytes += f.router.bytes();
  FERRY_ASSIGN_OR_RETURN(Weight bias, w.Vector("gate.e_score_correction_bias", E));
  FERRY_ASSIGN_OR_RETURN(f.bias, UploadF32(bias.data));
  f.experts.resize(static_cast<size_t>(E));
  // FP8 experts stay FP8 when GroupedLinearW8A8 can run them (widths: in % 16, out % 8).
  FERRY_RETURN_IF_ERROR(CheckDivisible(w.prefix() + " moe_intermediate_size", c.moe_intermediate_size, tp.world));
  const int64_t MI = tp.Local(c.moe_intermediate_size);
  f.moe_inter = MI;
  const bool try_fp8 = p == Precision::kBf16 && opts.fp8_experts && cu::GroupedLinearFp8Available() &&
                       D % 16 == 0 && MI % 16 == 0;
  // NVFP4 experts stay packed in bf16 (MoeGemvNvfp4: in % 16, whole 16-row tiles a shard).
  const bool try_nvfp4 = p == Precision::kBf16 && opts.nvfp4_experts;
  // W4A4: the layer's largest activation scales, for every expert and the shared one (a token is
  // rounded once for all its experts; model/blocks/ffn.h).
  W4a4Scales largest;
  const bool joins = c.n_shared_experts == 1;
  if (try_nvfp4 && opts.nvfp4_numerics == Nvfp4Numerics::kW4A4) {
    for (int64_t e = -1; e < E; ++e) {
      const bool shared = e < 0;
      if (shared && c.n_shared_experts == 0) continue;
      FERRY_ASSIGN_OR_RETURN(const W4a4Scales s,
                             MlpW4a4Scales(w.Sub(shared ? std::string("shared_experts.") : absl::StrCat("experts.", e, ".")),
                                           D, c.moe_intermediate_size * (shared ? c.n_shared_experts : 1)));
      largest.gate_up = std::max(largest.gate_up, s.gate_up);
      largest.down = std::max(largest.down, s.down);
    }
  }
  const W4a4Scales* w4a4 = largest.gate_up > 0 ? &largest : nullptr;
  DeviceBuffer staging, staging4;
  for (int64_t e = 0; e < E; ++e) {
    CudaMlp& ex = f.experts[static_cast<size_t>(e)];
    FERRY_RETURN_IF_ERROR(LoadMlpCuda(w.Sub(absl::StrCat("experts.", e, ".")), D, c.moe_intermediate_size, p, tp,
                                      &ex, bytes, try_fp8 ? &staging : nullptr, try_nvfp4 ? &staging4 : nullptr,
                                      w4a4));
    if (e == 0) {
      f.fp8_experts = ex.fp8;
      f.nvfp4_experts = ex.nvfp4;
    }
    if (ex.fp8 != f.fp8_experts || ex.nvfp4 != f.nvfp4_experts) {
      const bool fp8 = ex.fp8 != f.fp8_experts, kept = fp8 ? ex.fp8 : ex.nvfp4;
      return absl::InvalidArgumentError(absl::StrCat("layer ", layer, ": expert ", e,
                                                     kept ? " is stored in " : " is not stored in ",
                                                     fp8 ? "FP8" : "NVFP4",
                                                     kept ? " but expert 0 is not" : " but expert 0 is",
                                                     " (a layer's experts must share one format)"));
    }
  }
  f.has_shared = c.n_shared_experts > 0;
  if (f.has_shared) {
    // In FP8 or NVFP4 with the routed experts when one expert wide (it joins their launches).
    const int64_t inter = c.moe_intermediate_size * c.n_shared_experts;
    // W4A4 keeps it in NVFP4 however wide and whatever the routed experts are (it then runs apart,
    // MlpRun), as the CPU reference does.
    FERRY_RETURN_IF_ERROR(LoadMlpCuda(w.Sub("shared_experts."), D, inter, p, tp, &f.shared, bytes,
                                      f.fp8_experts && joins ? &staging : nullptr,
                                      (f.nvfp4_experts && joins) || w4a4 != nullptr ? &staging4 : nullptr, w4a4));
  }
  if (f.nvfp4_experts) FERRY_RETURN_IF_ERROR(MakeNvfp4Tables(&f));
  if (p == Precision::kBf16 && !f.fp8_experts && !f.nvfp4_experts) {
    // The decode dispatch's tables of expert matrices (the shared expert last when one expert wide).
    std::vector<const uint16_t*> gate_up(static_cast<size_t>(E) + 1, nullptr), down(gate_up.size(), nullptr);
    for (int64_t e = 0; e < E; ++e) {
      gate_up[static_cast<size_t>(e)] = f.experts[static_cast<size_t>(e)].gate_up.ptr();
      down[static_cast<size_t>(e)] = f.experts[static_cast<size_t>(e)].down.ptr();
    }
    if (f.has_shared && f.shared.inter() == MI && !f.shared.nvfp4) {  // NVFP4 (W4A4): it runs apart
      gate_up[static_cast<size_t>(E)] = f.shared.gate_up.ptr();
      down[static_cast<size_t>(E)] = f.shared.down.ptr();
    }
    FERRY_ASSIGN_OR_RETURN(f.gate_up_table, Upload(gate_up.data(), gate_up.size() * sizeof(const uint16_t*)));
    FERRY_ASSIGN_OR_RETURN(f.down_table, Upload(down.data(), down.size() * sizeof(const uint16_t*)));
  }
  if (f.fp8_experts) {
    // The W8A8 decode dispatch's tables (CudaFfn::fp8_tables).
    std::vector<const void*> t(6 * (static_cast<size_t>(E) + 1), nullptr);
    auto put = [&](int64_t at, const CudaMlp& m) {
      const Fp8Matrix* parts[3] = {&m.gate8, &m.up8, &m.down8};
      for (int k = 0; k < 3; ++k) {
        t[static_cast<size_t>((2 * k) * (E + 1) + at)] = parts[k]->packed.get();
        t[static_cast<size_t>((2 * k + 1) * (E + 1) + at)] = parts[k]->scales.get();
      }
    };
    for (int64_t e = 0; e < E; ++e) put(e, f.experts[static_cast<size_t>(e)]);
    if (f.has_shared && f.shared.fp8 && f.shared.inter() == MI) put(E, f.shared);
    FERRY_ASSIGN_OR_RETURN(f.fp8_tables, Upload(t.data(), t.size() * sizeof(const void*)));
  }
  f.routing.n_experts = E;
  f.routing.top_k = c.num_experts_per_tok;
  f.routing.n_group = c.n_group;
  f.routing.topk_group = c.topk_group;
  f.routing.norm_topk_prob = c.norm_topk_prob;
  f.routing.routed_scaling_factor = c.routed_scaling_factor;
  return f;
}

int64_t Nvfp4TileBytes(const CudaFfn& f) {
  int64_t bytes = 0;
  auto mlp = [&bytes](const CudaMlp& m) {
    if (!m.nvfp4) return;
    bytes = std::max({bytes, cu::Nvfp4GemmScratchBytes(m.gate_up4.out, m.gate_up4.in),
                      cu::Nvfp4GemmScratchBytes(m.down4.out, m.down4.in)});
  };
  if (f.dense) mlp(f.mlp);
  // A shared expert one expert wide beside NVFP4 experts joins their dispatch (MoeNvfp4).
  const bool joins = f.nvfp4_experts && f.shared.nvfp4 && f.shared.inter() == f.moe_inter;
  if (f.has_shared && !joins) mlp(f.shared);
  return bytes;
}

template <typename T>
absl::StatusOr<FfnScratch<T>> TakeFfnScratch(Workspace& ws, const ModelConfig& c, int64_t R,
                                             int64_t nvfp4_tile_bytes) {
  const int64_t KE = c.num_experts_per_tok, E = c.n_routed_experts, MI = c.moe_intermediate_size, D = c.hidden_size;
  // gu / h hold the routed slots and then the shared expert's rows (FfnAdd runs them together).
  const int64_t inter = std::max(c.intermediate_size, (KE + c.n_shared_experts) * MI);
  const int64_t moe_rows = E > 0 ? R * KE : 0;
  // The expert-ordered pair list holds the routed pairs, then one shared pair a row.
  const int64_t pairs = E > 0 ? R * KE + R : 0, groups = E > 0 ? std::min(R * KE, E) + 1 : 0;
  FfnScratch<T> s;
  FERRY_ASSIGN_OR_RETURN(s.gu, ws.Take<T>(R * 2 * inter));
  FERRY_ASSIGN_OR_RETURN(s.h, ws.Take<T>(R * inter));
  FERRY_ASSIGN_OR_RETURN(s.xin, ws.Take<T>(moe_rows * D));
  FERRY_ASSIGN_OR_RETURN(s.yout, ws.Take<T>(moe_rows * D));
  FERRY_ASSIGN_OR_RETURN(s.slots, ws.Take<T>(moe_rows * D));
  FERRY_ASSIGN_OR_RETURN(s.logits, ws.Take<float>(R * E));
  FERRY_ASSIGN_OR_RETURN(s.route_w, ws.Take<float>(moe_rows));
  FERRY_ASSIGN_OR_RETURN(s.experts, ws.Take<int32_t>(moe_rows));
  FERRY_ASSIGN_OR_RETURN(s.order, ws.Take<int32_t>(pairs));
  FERRY_ASSIGN_OR_RETURN(s.src_row, ws.Take<int32_t>(pairs));
  FERRY_ASSIGN_OR_RETURN(s.group_expert, ws.Take<int32_t>(groups));
  FERRY_ASSIGN_OR_RETURN(s.group_start, ws.Take<int32_t>(groups));
  FERRY_ASSIGN_OR_RETURN(s.group_count, ws.Take<int32_t>(groups));
  FERRY_ASSIGN_OR_RETURN(s.n_groups, ws.Take<int32_t>(1));
  FERRY_ASSIGN_OR_RETURN(s.error, ws.Take<int32_t>(1));
  FERRY_RETURN_IF_ERROR(cu::ZeroWords(s.error, 1));
  s.q8 = nullptr;
  s.s8 = nullptr;
  if (sizeof(T) == 2 && E > 0) {
    // The FP8 path's quantized rows (the wider of its two projections' inputs) and scales, in
    // yout's memory (which that path leaves unused) when they fit there (with bf16 they do at
    // top_k >= 2).
    const int64_t rows8 = moe_rows + R, width = std::max(D, MI);
    const int64_t q_bytes = (rows8 * width + 255) / 256 * 256, s_bytes = (width + 127) / 128 * rows8 * 4;
    if (q_bytes + s_bytes <= moe_rows * D * static_cast<int64_t>(sizeof(T))) {
      s.q8 = reinterpret_cast<uint8_t*>(s.yout);
    } else {
      FERRY_ASSIGN_OR_RETURN(s.q8, ws.Take<uint8_t>(q_bytes + s_bytes));
    }
    s.s8 = reinterpret_cast<float*>(s.q8 + q_bytes);
  }
  s.w8a8_problems = nullptr;
  if (sizeof(T) == 2 && E > 0 && R <= kMoeGemvMaxRows) {
    FERRY_ASSIGN_OR_RETURN(uint8_t * problems, ws.Take<uint8_t>(cu::kGroupedW8A8MoeScratchBytes));
    s.w8a8_problems = problems;
  }
  s.nvfp4_tiles = nullptr;
  s.nvfp4_tile_bytes = 0;
  if (sizeof(T) == 2 && nvfp4_tile_bytes > 0 && R >= cu::GetKernelOptions().nvfp4_gemm_min_rows) {
    FERRY_ASSIGN_OR_RETURN(s.nvfp4_tiles, ws.Take<uint16_t>(nvfp4_tile_bytes / 2));
    s.nvfp4_tile_bytes = nvfp4_tile_bytes;
  }
  return s;
}

template <typename T>
absl::Status FfnAdd(const CudaFfn& f, const ModelConfig& c, const T* a, int64_t R, const FfnScratch<T>& s, T* y,
                    float* x, const DecisionTap& tap, bool assign) {
  const int64_t D = c.hidden_size;
  if (f.dense) {
    FERRY_RETURN_IF_ERROR(MlpRun(a, R, D, f.mlp, c.swiglu_limit, s, y, tap));
    return assign ? act::ToF32(y, R * D, x) : act::AddResidual(x, y, R * D);
  }
  const int64_t E = f.routing.n_experts, K = f.routing.top_k, MI = f.moe_inter;
  FERRY_RETURN_IF_ERROR(act::LinearToF32(a, R, D, f.router.as<T>(), E, 1.0f, s.logits));
  FERRY_RETURN_IF_ERROR(cu::MoeRoute(s.logits, f.bias.as<const float>(), R, f.routing, s.experts, s.route_w));
  FERRY_RETURN_IF_ERROR(TapMoeRoute(tap, s.logits, R, f.routing, s.experts, s.route_w));
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (f.nvfp4_experts) {
      return MoeNvfp4(
          f, c, a, R, s, y, x, assign,
          [&](const uint16_t* an, int64_t n, uint16_t* yn, int64_t row0) {
            return MlpRun(an, n, D, f.shared, c.swiglu_limit, s, yn, tap, DecisionLog::kFp4SharedExpert, row0);
          },
          tap);
    }
    const bool shared_fits = !f.has_shared || f.shared.inter() == MI;
    // The bf16 dispatch takes the shared expert in with the routed ones: only a bf16 one (under
    // W4A4 an NVFP4 shared expert beside bf16 routed ones runs apart, below).
    const bool shared_bf16 = !f.has_shared || (!f.shared.fp8 && !f.shared.nvfp4);
    const bool widths_fit = c.hidden_size % 8 == 0 && MI % 8 == 0;  // MoeGemvBf16's 16-byte pieces
    if (f.gate_up_table.get() != nullptr && shared_fits && shared_bf16 && widths_fit && R <= kMoeGemvMaxRows &&
        R * K <= cu::kMoeMaxPairs) {
      return MoeOnDevice(f, c, a, R, s, y, x, assign);
    }
    // FP8: the shared expert (if any) in FP8 and one expert wide too.
    if (f.fp8_experts && f.fp8_tables.get() != nullptr && (!f.has_shared || (f.shared.fp8 && shared_fits)) &&
        s.w8a8_problems != nullptr && R <= kMoeGemvMaxRows && R * K <= cu::kMoeMaxPairs) {
      return MoeOnDeviceFp8(f, c, a, R, s, y, x, assign);
    }
  }

  std::vector<int32_t> chosen(static_cast<size_t>(R * K));
  FERRY_RETURN_IF_ERROR(cu::CopyToHost(chosen.data(), s.experts, chosen.size() * sizeof(int32_t)));
  std::vector<int64_t> start(static_cast<size_t>(E) + 1, 0);
  for (int32_t e : chosen) {
    if (e < 0 || e >= E) {
      return absl::InternalError(absl::StrCat("MoE routing chose expert ", e, " of ", E, " (a corrupt routing)"));
    }
    ++start[static_cast<size_t>(e) + 1];
  }
  for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
  // order[j]: the (row * K + slot) pair at position j of the expert-ordered batch; src_row its row.
  std::vector<int32_t> order(static_cast<size_t>(R * K)), src_row(order.size());
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < R * K; ++i) {
      const int64_t j = next[chosen[i]]++;
      order[j] = static_cast<int32_t>(i);
      src_row[j] = static_cast<int32_t>(i / K);
    }
  }
  FERRY_RETURN_IF_ERROR(cu::CopyToDevice(s.order, order.data(), order.size() * sizeof(int32_t)));
  FERRY_RETURN_IF_ERROR(cu::CopyToDevice(s.src_row, src_row.data(), src_row.size() * sizeof(int32_t)));

  if constexpr (std::is_same_v<T, uint16_t>) {
    if (f.fp8_experts) {
      FERRY_RETURN_IF_ERROR(MoeFp8Experts(f, c, a, R, s, start, y));
      // The routed outputs are in slots already; the shared expert's into y when it is not FP8.
      if (f.has_shared && !f.shared.fp8) {
        FERRY_RETURN_IF_ERROR(MlpRun(a, R, D, f.shared, c.swiglu_limit, s, y, tap, DecisionLog::kFp4SharedExpert));
      }
      return act::MoeCombine(s.slots, s.route_w, f.has_shared ? y : nullptr, R, K, D, x, assign);
    }
  }
  FERRY_RETURN_IF_ERROR(act::CopyRows(a, D, s.src_row, s.xin, D, nullptr, R * K, D));
  // Every expert with rows, and the shared expert when it is one expert wide (its rows after the
  // routed slots in gu and h, its output in y), as one group of problems per projection: side by
  // side on the device (ExpertLinears), each the same Linear call as alone.
  const bool fuse_shared = f.has_shared && f.shared.inter() == MI && !f.shared.fp8 && !f.shared.nvfp4;
  const int64_t slots = R * K;
  std::vector<ExpertProblem<T>> up, down;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = start[e + 1] - start[e], j0 = start[e];
    if (n == 0) continue;
    const CudaMlp& ex = f.experts[static_cast<size_t>(e)];
    up.push_back({s.xin + j0 * D, n, ex.gate_up.as<T>(), s.gu + j0 * 2 * MI});
    down.push_back({s.h + j0 * MI, n, ex.down.as<T>(), s.yout + j0 * D});
  }
  if (fuse_shared) {
    up.push_back({a, R, f.shared.gate_up.as<T>(), s.gu + slots * 2 * MI});
    down.push_back({s.h + slots * MI, R, f.shared.down.as<T>(), y});
  }
  FERRY_RETURN_IF_ERROR(ExpertLinears(up, D, 2 * MI));
  FERRY_RETURN_IF_ERROR(act::SwiGlu(s.gu, s.gu + MI, slots + (fuse_shared ? R : 0), MI, 2 * MI, c.swiglu_limit, s.h));
  FERRY_RETURN_IF_ERROR(ExpertLinears(down, MI, D));
  FERRY_RETURN_IF_ERROR(act::CopyRows(s.yout, D, nullptr, s.slots, D, s.order, R * K, D));
  const T* shared = nullptr;
  if (f.has_shared) {
    // Wider than one expert, or not bf16: alone, now that gu and h are free again (the routed
    // outputs are in slots).
    if (!fuse_shared) {
      FERRY_RETURN_IF_ERROR(MlpRun(a, R, D, f.shared, c.swiglu_limit, s, y, tap, DecisionLog::kFp4SharedExpert));
    }
    shared = y;
  }
  return act::MoeCombine(s.slots, s.route_w, shared, R, K, D, x, assign);
}

absl::Status FfnErrorStatus(int32_t error, int64_t n_experts) {
  if ((error & 1) != 0) {
    return absl::InternalError(absl::StrCat("MoE routing chose an expert id outside [0, ", n_experts,
                                            ") (a corrupt routing); the step's output is void"));
  }
  if (error != 0) {
    return absl::InternalError("MoE routing chose one expert more often than the step has rows (an expert "
                               "picked twice in a row: a corrupt or wrongly pinned routing); the step's output "
                               "is void");
  }
  return absl::OkStatus();
}

template absl::StatusOr<FfnScratch<uint16_t>> TakeFfnScratch<uint16_t>(Workspace&, const ModelConfig&, int64_t,
                                                                       int64_t);
template absl::StatusOr<FfnScratch<float>> TakeFfnScratch<float>(Workspace&, const ModelConfig&, int64_t, int64_t);
template absl::Status FfnAdd<uint16_t>(const CudaFfn&, const ModelConfig&, const uint16_t*, int64_t,
                                       const FfnScratch<uint16_t>&, uint16_t*, float*, const DecisionTap&, bool);
template absl::Status FfnAdd<float>(const CudaFfn&, const ModelConfig&, const float*, int64_t, const FfnScratch<float>&,
                                    float*, float*, const DecisionTap&, bool);

}  // namespace ferry::model::cuda
