// Section 2d: the routed experts' GEMMs of one MoE layer alone (both projections, no routing or
// activation), five ways: one cuBLAS call an expert in turn (the dispatch before
// GroupedLinearBf16), GroupedLinearBf16's side streams (FfnAdd today), and one
// cublasGemmGroupedBatchedEx call a projection; then the same GEMMs over E4M3 weights with
// 128 x 128 block scales, half the weight bytes: GroupedLinearFp8 (bf16 activations, W8A16) and
// QuantizeActFp8 + GroupedLinearW8A8 (the FP8 releases' W8A8), one launch a projection.
#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/roofline.h"
#include "bench/roofline_cuda.h"
#include "common/status.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/ops.h"

namespace ferry::bench {

namespace cu = ferry::kernels::cuda;

namespace {

// Rows each expert gets when `tokens` tokens each pick top_k distinct experts uniformly.
std::vector<int64_t> RouteUniform(std::mt19937_64& rng, int64_t tokens, int64_t experts, int64_t top_k) {
  std::vector<int64_t> rows(static_cast<size_t>(experts), 0);
  std::vector<int32_t> ids(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < experts; ++e) ids[e] = static_cast<int32_t>(e);
    for (int64_t j = 0; j < top_k; ++j) {
      std::uniform_int_distribution<int64_t> d(j, experts - 1);
      std::swap(ids[j], ids[d(rng)]);
      ++rows[static_cast<size_t>(ids[j])];
    }
  }
  return rows;
}

absl::Status RunCase(const NamedConfig& m, int64_t tokens, const Options& o, std::mt19937_64& rng, Table* t) {
  const model::ModelConfig& c = m.config;
  const int64_t D = c.hidden_size, MI = c.moe_intermediate_size, E = c.n_routed_experts, K = c.num_experts_per_tok;
  const std::vector<int64_t> rows = RouteUniform(rng, tokens, E, K);
  const int64_t slots = tokens * K;
  DeviceBlocks b;
  FERRY_ASSIGN_OR_RETURN(uint16_t* w_up, b.Take<uint16_t>(E * 2 * MI * D));
  FERRY_ASSIGN_OR_RETURN(uint16_t* w_down, b.Take<uint16_t>(E * D * MI));
  FERRY_ASSIGN_OR_RETURN(uint16_t* x, b.Take<uint16_t>(slots * D));
  FERRY_ASSIGN_OR_RETURN(uint16_t* gu, b.Take<uint16_t>(slots * 2 * MI));
  FERRY_ASSIGN_OR_RETURN(uint16_t* h, b.Take<uint16_t>(slots * MI));
  FERRY_ASSIGN_OR_RETURN(uint16_t* y, b.Take<uint16_t>(slots * D));
  FERRY_ASSIGN_OR_RETURN(void** ptrs, b.Take<void*>(3 * E));
  FERRY_RETURN_IF_ERROR(FillRandomBf16(w_up, E * 2 * MI * D, o.seed + 60, 0.02f));
  FERRY_RETURN_IF_ERROR(FillRandomBf16(w_down, E * D * MI, o.seed + 61, 0.02f));
  FERRY_RETURN_IF_ERROR(FillRandomBf16(x, slots * D, o.seed + 62, 1.0f));
  FERRY_RETURN_IF_ERROR(FillRandomBf16(h, slots * MI, o.seed + 63, 1.0f));
  // The FP8 copies: E4M3 weights (random bytes stand for linear_fp8.h's packed layout; no padding
  // at these widths) and their 128 x 128 block scales.
  const int64_t up_scales = ((2 * MI + 127) / 128) * ((D + 127) / 128);
  const int64_t down_scales = ((D + 127) / 128) * ((MI + 127) / 128);
  const int64_t up_packed = cu::Fp8PackedBytes(2 * MI, D), down_packed = cu::Fp8PackedBytes(D, MI);
  FERRY_ASSIGN_OR_RETURN(uint8_t* q_up, b.Take<uint8_t>(E * up_packed));
  FERRY_ASSIGN_OR_RETURN(uint8_t* q_down, b.Take<uint8_t>(E * down_packed));
  FERRY_ASSIGN_OR_RETURN(float* s_up, b.Take<float>(E * up_scales));
  FERRY_ASSIGN_OR_RETURN(float* s_down, b.Take<float>(E * down_scales));
  FERRY_RETURN_IF_ERROR(FillRandomFp8(q_up, E * up_packed, o.seed + 64, 100.0f));
  FERRY_RETURN_IF_ERROR(FillRandomFp8(q_down, E * down_packed, o.seed + 65, 100.0f));
  FERRY_RETURN_IF_ERROR(FillRandomF32(s_up, E * up_scales, o.seed + 66, 1e-4f, 2e-4f));
  FERRY_RETURN_IF_ERROR(FillRandomF32(s_down, E * down_scales, o.seed + 67, 1e-4f, 2e-4f));
  // W8A8: the same weights packed for GroupedLinearW8A8 and the activations quantized per call.
  const int64_t up_packed8 = cu::Fp8W8A8PackedBytes(2 * MI, D), down_packed8 = cu::Fp8W8A8PackedBytes(D, MI);
  FERRY_ASSIGN_OR_RETURN(uint8_t* p_up, b.Take<uint8_t>(E * up_packed8));
  FERRY_ASSIGN_OR_RETURN(uint8_t* p_down, b.Take<uint8_t>(E * down_packed8));
  FERRY_RETURN_IF_ERROR(FillRandomFp8(p_up, E * up_packed8, o.seed + 68, 100.0f));
  FERRY_RETURN_IF_ERROR(FillRandomFp8(p_down, E * down_packed8, o.seed + 69, 100.0f));
  FERRY_ASSIGN_OR_RETURN(uint8_t* qx, b.Take<uint8_t>(slots * D));
  FERRY_ASSIGN_OR_RETURN(uint8_t* qh, b.Take<uint8_t>(slots * MI));
  FERRY_ASSIGN_OR_RETURN(float* sx, b.Take<float>(slots * ((D + 127) / 128)));
  FERRY_ASSIGN_OR_RETURN(float* sh, b.Take<float>(slots * ((MI + 127) / 128)));
  std::vector<GemmProblem> up, down;
  std::vector<cu::LinearGroupBf16> gup, gdown;
  std::vector<cu::LinearGroupFp8> fup, fdown;
  std::vector<cu::LinearGroupW8A8> qup, qdown;
  int64_t j0 = 0, used = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = rows[static_cast<size_t>(e)];
    if (n > 0) ++used;
    up.push_back({x + j0 * D, n, w_up + e * 2 * MI * D, gu + j0 * 2 * MI});
    down.push_back({h + j0 * MI, n, w_down + e * D * MI, y + j0 * D});
    gup.push_back({up.back().x, n, up.back().w, up.back().y});
    gdown.push_back({down.back().x, n, down.back().w, down.back().y});
    fup.push_back({up.back().x, n, q_up + e * up_packed, s_up + e * up_scales, up.back().y});
    fdown.push_back({down.back().x, n, q_down + e * down_packed, s_down + e * down_scales, down.back().y});
    qup.push_back({qx + j0 * D, sx + j0, n, p_up + e * up_packed8, s_up + e * up_scales, up.back().y});
    qdown.push_back({qh + j0 * MI, sh + j0, n, p_down + e * down_packed8, s_down + e * down_scales, down.back().y});
    j0 += n;
  }
  const double flops = 2.0 * slots * (2 * MI * D + D * MI);
  const double activations = 2.0 * slots * (D + 2 * MI + MI + D);
  const double bytes = 2.0 * used * (2 * MI * D + D * MI) + activations;
  const double fp8_bytes = used * (2 * MI * D + D * MI + 4.0 * (up_scales + down_scales)) + activations;
  auto serial = [&]() -> absl::Status {
    for (const GemmProblem& p : up) FERRY_RETURN_IF_ERROR(cu::LinearBf16(p.x, p.rows, D, p.w, 2 * MI, p.y));
    for (const GemmProblem& p : down) FERRY_RETURN_IF_ERROR(cu::LinearBf16(p.x, p.rows, MI, p.w, D, p.y));
    return absl::OkStatus();
  };
  auto streams = [&]() -> absl::Status {
    FERRY_RETURN_IF_ERROR(cu::GroupedLinearBf16(gup.data(), E, D, 2 * MI));
    return cu::GroupedLinearBf16(gdown.data(), E, MI, D);
  };
  auto grouped = [&]() -> absl::Status {
    FERRY_RETURN_IF_ERROR(GroupedBatchedGemmBf16(up, D, 2 * MI, ptrs));
    return GroupedBatchedGemmBf16(down, MI, D, ptrs);
  };
  auto fp8 = [&]() -> absl::Status {
    FERRY_RETURN_IF_ERROR(cu::GroupedLinearFp8(fup.data(), E, D, 2 * MI));
    return cu::GroupedLinearFp8(fdown.data(), E, MI, D);
  };
  auto w8a8 = [&]() -> absl::Status {
    FERRY_RETURN_IF_ERROR(cu::QuantizeActFp8(x, slots, D, qx, sx, slots));
    FERRY_RETURN_IF_ERROR(cu::GroupedLinearW8A8(qup.data(), E, D, 2 * MI, slots, 2 * MI));
    FERRY_RETURN_IF_ERROR(cu::QuantizeActFp8(h, slots, MI, qh, sh, slots));
    return cu::GroupedLinearW8A8(qdown.data(), E, MI, D, slots, D);
  };
  const std::string base = absl::StrCat(m.name, " ", tokens, tokens == 1 ? " token" : " tokens");
  for (const auto& [label, fn] : std::vector<std::pair<std::string, std::function<absl::Status()>>>{
           {"one call an expert", serial},
           {"8 side streams", streams},
           {"cublasGemmGroupedBatchedEx", grouped},
           {"fp8 weights, GroupedLinearFp8", fp8},
           {"fp8 W8A8, QuantizeActFp8 + GroupedLinearW8A8", w8a8}}) {
    Row r(absl::StrCat(base, ", ", label));
    const bool is_fp8 = label.rfind("fp8", 0) == 0;
    if (is_fp8 && !cu::GroupedLinearFp8Available()) {
      t->rows.push_back(Row::Failed(r.name, "the FP8 kernels need sm_90a code and a compute capability 9.0 device"));
      continue;
    }
    absl::StatusOr<std::vector<double>> ms = TimeEvents(fn, std::min(o.warmup, 2), o.reps);
    if (!ms.ok()) {
      t->rows.push_back(Row::Failed(r.name, std::string(ms.status().message())));
      continue;
    }
    r.bytes = is_fp8 ? fp8_bytes : bytes;
    r.flops = flops;
    r.SetTimes(*ms);
    r.note = absl::StrFormat("%lld experts with rows, at most %lld", static_cast<long long>(used),
                             static_cast<long long>(*std::max_element(rows.begin(), rows.end())));
    t->rows.push_back(r);
  }
  return absl::OkStatus();
}

}  // namespace

Table ExpertGemmTable(const std::vector<NamedConfig>& models, const Options& o, const Ceilings& c) {
  Table t;
  t.title = "2d. The routed experts' GEMMs alone (gate_up then down of every expert with rows), five dispatches";
  t.explanation =
      "Rows an expert from uniform random top-8 routing of the tokens; no routing, activation or combine. FLOPs = 2 x "
      "slots x 3 x hidden x moe_inter; bytes = the weights of every expert with rows (bf16, or E4M3 + float32 scales "
      "for the fp8 rows) + the activations in and out. "
      "Events around the host calls (each dispatch's host cost shows when the GPU waits for it).";
  std::mt19937_64 rng(o.seed + 70);
  std::vector<int64_t> sizes = {1, 64};
  sizes.insert(sizes.end(), o.prefill_tokens.begin(), o.prefill_tokens.end());
  for (const NamedConfig& m : models) {
    for (int64_t tokens : sizes) {
      absl::Status st = RunCase(m, tokens, o, rng, &t);
      if (!st.ok()) t.rows.push_back(Row::Failed(absl::StrCat(m.name, " ", tokens), std::string(st.message())));
    }
  }
  return t;
}

}  // namespace ferry::bench
