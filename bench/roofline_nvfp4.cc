// Section 2g: the routed and shared experts' decode products of one MoE layer (gate_up over the
// step's rows, then down over the pairs), dispatched on the device from a routing grouped by
// MoeGroupPairs, over the same routing three ways: bf16 experts (MoeGemvBf16), FP8 experts with
// 128 x 128 block scales as the FP8 releases run them (GroupedLinearW8A8Moe over activations
// quantized beforehand, the quantization not timed) and NVFP4 experts kept packed (MoeGemvNvfp4).
// Decode is memory-bound: the figure of merit is achieved bandwidth over the bytes each format
// must read (the chosen experts' weights once, their scales, the activations).
#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/roofline.h"
#include "bench/roofline_cuda.h"
#include "common/status.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/gemv_nvfp4.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/ops.h"

namespace ferry::bench {

namespace cu = ferry::kernels::cuda;

namespace {

// `tokens` rows each picking top_k distinct experts of `experts` uniformly, renumbered 0.. by first
// use (the weights exist only for the experts chosen); *used = how many.
std::vector<int32_t> Route(std::mt19937_64& rng, int64_t tokens, int64_t experts, int64_t top_k, int64_t* used) {
  std::vector<int32_t> ids(static_cast<size_t>(experts)), out, compact(static_cast<size_t>(experts), -1);
  int32_t next = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < experts; ++e) ids[e] = static_cast<int32_t>(e);
    for (int64_t j = 0; j < top_k; ++j) {
      std::uniform_int_distribution<int64_t> d(j, experts - 1);
      std::swap(ids[j], ids[d(rng)]);
    }
    std::sort(ids.begin(), ids.begin() + top_k);
    for (int64_t j = 0; j < top_k; ++j) {
      int32_t& c = compact[static_cast<size_t>(ids[j])];
      if (c < 0) c = next++;
      out.push_back(c);
    }
  }
  *used = next;
  return out;
}

absl::Status RunCase(const NamedConfig& m, int64_t rows, const Options& o, std::mt19937_64& rng, Table* t) {
  const model::ModelConfig& c = m.config;
  const int64_t D = c.hidden_size, MI = c.moe_intermediate_size, K = c.num_experts_per_tok;
  int64_t U = 0;
  const std::vector<int32_t> ids = Route(rng, rows, c.n_routed_experts, K, &U);
  const int64_t n = U + 1, pairs = rows * K + rows;  // the shared expert (one expert wide) last
  DeviceBlocks b;
  // The routing, grouped once (not timed).
  const int64_t groups = cu::MoeMaxGroups(rows, K, U, true);
  FERRY_ASSIGN_OR_RETURN(int32_t * d_ids, b.Upload(ids));
  FERRY_ASSIGN_OR_RETURN(int32_t * words, b.Take<int32_t>(3 * groups + 2 + 2 * pairs));
  const cu::MoePairs p{words, words + groups, words + 2 * groups, words + 3 * groups, words + 3 * groups + 2,
                       words + 3 * groups + 2 + pairs};
  FERRY_RETURN_IF_ERROR(cu::ZeroWords(words + 3 * groups + 1, 1));
  FERRY_RETURN_IF_ERROR(cu::MoeGroupPairs(d_ids, rows, K, U, true, p, words + 3 * groups + 1));
  // Activations: x [rows, D], the pairs' h [pairs, MI]; outputs gu [pairs, 2 MI], slots, shared.
  FERRY_ASSIGN_OR_RETURN(uint16_t * x, b.Take<uint16_t>(rows * D));
  FERRY_ASSIGN_OR_RETURN(uint16_t * h, b.Take<uint16_t>(pairs * MI));
  FERRY_ASSIGN_OR_RETURN(uint16_t * gu, b.Take<uint16_t>(pairs * 2 * MI));
  FERRY_ASSIGN_OR_RETURN(uint16_t * slots, b.Take<uint16_t>(rows * K * D));
  FERRY_ASSIGN_OR_RETURN(uint16_t * y_shared, b.Take<uint16_t>(rows * D));
  FERRY_RETURN_IF_ERROR(FillRandomBf16(x, rows * D, o.seed + 80, 1.0f));
  FERRY_RETURN_IF_ERROR(FillRandomBf16(h, pairs * MI, o.seed + 81, 1.0f));
  const double activations = 2.0 * (rows * D + pairs * MI + pairs * 2 * MI + pairs * D);
  const double weights = static_cast<double>(n) * 3 * MI * D;

  // bf16: every chosen expert's gate_up [2 MI, D] and down [D, MI].
  FERRY_ASSIGN_OR_RETURN(uint16_t * w_up, b.Take<uint16_t>(n * 2 * MI * D));
  FERRY_ASSIGN_OR_RETURN(uint16_t * w_down, b.Take<uint16_t>(n * D * MI));
  FERRY_RETURN_IF_ERROR(FillRandomBf16(w_up, n * 2 * MI * D, o.seed + 82, 0.02f));
  FERRY_RETURN_IF_ERROR(FillRandomBf16(w_down, n * D * MI, o.seed + 83, 0.02f));
  std::vector<const uint16_t*> up16, down16;
  for (int64_t e = 0; e < n; ++e) {
    up16.push_back(w_up + e * 2 * MI * D);
    down16.push_back(w_down + e * D * MI);
  }
  FERRY_ASSIGN_OR_RETURN(const uint16_t** t_up16, b.Upload(up16));
  FERRY_ASSIGN_OR_RETURN(const uint16_t** t_down16, b.Upload(down16));
  auto bf16 = [&]() -> absl::Status {
    FERRY_RETURN_IF_ERROR(cu::MoeGemvBf16(t_up16, p, groups, rows, x, true, D, 2 * MI, gu, false, nullptr));
    return cu::MoeGemvBf16(t_down16, p, groups, rows, h, false, MI, D, slots, true, y_shared);
  };

  // NVFP4: one random ModelOpt weight per projection, packed once per expert (gate and up
  // stacked, each with its own global scale) from the same source bytes.
  const int64_t up_bytes = cu::Nvfp4PackedBytes(2 * MI, D), down_bytes = cu::Nvfp4PackedBytes(D, MI);
  FERRY_ASSIGN_OR_RETURN(uint8_t * src_codes, b.Take<uint8_t>(D * std::max(MI, D) / 2));
  FERRY_ASSIGN_OR_RETURN(uint8_t * src_scales, b.Take<uint8_t>(D * std::max(MI, D) / 16));
  FERRY_RETURN_IF_ERROR(FillRandomFp8(src_codes, D * std::max(MI, D) / 2, o.seed + 84, 200.0f));
  FERRY_RETURN_IF_ERROR(FillRandomFp8(src_scales, D * std::max(MI, D) / 16, o.seed + 85, 100.0f));
  FERRY_ASSIGN_OR_RETURN(uint8_t * q_up, b.Take<uint8_t>(n * up_bytes));
  FERRY_ASSIGN_OR_RETURN(uint8_t * q_down, b.Take<uint8_t>(n * down_bytes));
  std::vector<const uint8_t*> up4, down4;
  for (int64_t e = 0; e < n; ++e) {
    uint8_t* u = q_up + e * up_bytes;
    FERRY_RETURN_IF_ERROR(cu::PackNvfp4(src_codes, src_scales, 1e-3f, MI, D, u, 2 * MI, 0));
    FERRY_RETURN_IF_ERROR(cu::PackNvfp4(src_codes, src_scales, 2e-3f, MI, D, u, 2 * MI, MI));
    FERRY_RETURN_IF_ERROR(cu::PackNvfp4(src_codes, src_scales, 1e-3f, D, MI, q_down + e * down_bytes, D, 0));
    up4.push_back(u);
    down4.push_back(q_down + e * down_bytes);
  }
  FERRY_ASSIGN_OR_RETURN(const uint8_t** t_up4, b.Upload(up4));
  FERRY_ASSIGN_OR_RETURN(const uint8_t** t_down4, b.Upload(down4));
  auto nvfp4 = [&]() -> absl::Status {
    FERRY_RETURN_IF_ERROR(cu::MoeGemvNvfp4(t_up4, p, groups, rows, x, true, D, 2 * MI, gu, false, nullptr));
    return cu::MoeGemvNvfp4(t_down4, p, groups, rows, h, false, MI, D, slots, true, y_shared);
  };

  // FP8 W8A8 (sm_90a only): gate, up and down packed with their block scales; the quantized
  // activations filled at random (as QuantizeActFp8 would leave them).
  const bool fp8_runs = cu::GroupedLinearFp8Available();
  const int64_t g_bytes = cu::Fp8W8A8PackedBytes(MI, D), d_bytes = cu::Fp8W8A8PackedBytes(D, MI);
  const int64_t g_scales = ((MI + 127) / 128) * ((D + 127) / 128), d_scales = ((D + 127) / 128) * ((MI + 127) / 128);
  std::function<absl::Status()> fp8;
  if (fp8_runs) {
    FERRY_ASSIGN_OR_RETURN(uint8_t * w8, b.Take<uint8_t>(n * (2 * g_bytes + d_bytes)));
    FERRY_ASSIGN_OR_RETURN(float* s8, b.Take<float>(n * (2 * g_scales + d_scales)));
    FERRY_RETURN_IF_ERROR(FillRandomFp8(w8, n * (2 * g_bytes + d_bytes), o.seed + 86, 100.0f));
    FERRY_RETURN_IF_ERROR(FillRandomF32(s8, n * (2 * g_scales + d_scales), o.seed + 87, 1e-4f, 2e-4f));
    std::vector<const uint8_t*> pk[3];
    std::vector<const float*> sc[3];
    for (int64_t e = 0; e < n; ++e) {
      uint8_t* base = w8 + e * (2 * g_bytes + d_bytes);
      float* sbase = s8 + e * (2 * g_scales + d_scales);
      pk[0].push_back(base), pk[1].push_back(base + g_bytes), pk[2].push_back(base + 2 * g_bytes);
      sc[0].push_back(sbase), sc[1].push_back(sbase + g_scales), sc[2].push_back(sbase + 2 * g_scales);
    }
    cu::W8A8ExpertTable parts[3];
    for (int k = 0; k < 3; ++k) {
      FERRY_ASSIGN_OR_RETURN(parts[k].packed, b.Upload(pk[k]));
      FERRY_ASSIGN_OR_RETURN(parts[k].scales, b.Upload(sc[k]));
    }
    FERRY_ASSIGN_OR_RETURN(uint8_t * qx, b.Take<uint8_t>(rows * D));
    FERRY_ASSIGN_OR_RETURN(float* sx, b.Take<float>(rows * ((D + 127) / 128)));
    FERRY_ASSIGN_OR_RETURN(uint8_t * qh, b.Take<uint8_t>(pairs * MI));
    FERRY_ASSIGN_OR_RETURN(float* sh, b.Take<float>(pairs * ((MI + 127) / 128)));
    FERRY_ASSIGN_OR_RETURN(uint8_t * scratch, b.Take<uint8_t>(cu::kGroupedW8A8MoeScratchBytes));
    FERRY_RETURN_IF_ERROR(FillRandomFp8(qx, rows * D, o.seed + 88, 100.0f));
    FERRY_RETURN_IF_ERROR(FillRandomFp8(qh, pairs * MI, o.seed + 89, 100.0f));
    FERRY_RETURN_IF_ERROR(FillRandomF32(sx, rows * ((D + 127) / 128), o.seed + 90, 1e-3f, 2e-3f));
    FERRY_RETURN_IF_ERROR(FillRandomF32(sh, pairs * ((MI + 127) / 128), o.seed + 91, 1e-3f, 2e-3f));
    int32_t* error = words + 3 * groups + 1;
    fp8 = [=]() -> absl::Status {
      FERRY_RETURN_IF_ERROR(cu::GroupedLinearW8A8Moe(parts, 2, p, rows, U, qx, sx, rows, true, D, MI, gu, 2 * MI,
                                                     false, nullptr, scratch, error));
      return cu::GroupedLinearW8A8Moe(parts + 2, 1, p, rows, U, qh, sh, pairs, false, MI, D, slots, D, true,
                                      y_shared, scratch, error);
    };
  }

  const std::string base = absl::StrCat(m.name, " batch ", rows, ", ", U, " experts + shared");
  struct Way {
    std::string label;
    std::function<absl::Status()> fn;
    double bytes;
    bool target;
  };
  const double nvfp4_bytes = static_cast<double>(n) * (up_bytes + down_bytes) + activations;
  std::vector<Way> ways = {
      {"bf16, MoeGemvBf16", bf16, 2.0 * weights + activations, false},
      {"fp8 W8A8, GroupedLinearW8A8Moe", fp8,
       static_cast<double>(n) * (2 * g_bytes + d_bytes + 4.0 * (2 * g_scales + d_scales)) + activations, false},
      {"nvfp4, MoeGemvNvfp4", nvfp4, nvfp4_bytes, true},
  };
  for (const std::array<int64_t, 3>& s : o.nvfp4_shapes) {
    cu::Nvfp4GemvShape shape;
    shape.moe_warp_target = s[0];
    shape.depth = static_cast<int>(s[1]);
    shape.min_blocks = static_cast<int>(s[2]);
    auto shaped = [shape, nvfp4]() -> absl::Status {
      FERRY_RETURN_IF_ERROR(cu::SetNvfp4GemvShape(shape));
      const absl::Status st = nvfp4();
      FERRY_RETURN_IF_ERROR(cu::SetNvfp4GemvShape(cu::Nvfp4GemvShape{}));
      return st;
    };
    ways.push_back({absl::StrCat("nvfp4, MoeGemvNvfp4 shaped ", s[0], ":", s[1], ":", s[2]), shaped, nvfp4_bytes,
                    true});
  }
  for (const Way& w : ways) {
    Row r(absl::StrCat(base, ", ", w.label));
    if (!w.fn) {
      t->rows.push_back(Row::Failed(r.name, "the FP8 kernels need sm_90a code and a compute capability 9.0 device"));
      continue;
    }
    absl::StatusOr<std::vector<double>> ms = TimeEvents(w.fn, o.warmup, o.reps);
    if (!ms.ok()) {
      t->rows.push_back(Row::Failed(r.name, std::string(ms.status().message())));
      continue;
    }
    r.bytes = w.bytes;
    r.flops = 2.0 * pairs * 3 * MI * D;
    r.SetTimes(*ms);
    if (w.target) r.target = {TargetKind::kBandwidth, 0.85};
    r.note = absl::StrFormat("%.3f bytes a weight read", (w.bytes - activations) / weights);
    t->rows.push_back(r);
  }
  return absl::OkStatus();
}

}  // namespace

Table ExpertDecodeTable(const std::vector<NamedConfig>& models, const Options& o, const Ceilings& c) {
  Table t;
  t.title = "2g. The experts' decode products (gate_up then down of the chosen experts and the shared one): bf16, "
            "FP8 and NVFP4 weights";
  t.explanation =
      "Uniform random top-k routing of the batch's rows, grouped on the device once (not timed); each way runs the "
      "two projections of every chosen expert and the shared expert over the same pairs. bytes = the chosen "
      "experts' weights as each format stores them (bf16: 2 a weight; FP8: 1 + its 128 x 128 block scales; NVFP4: "
      "the packed tiles, 0.5625 a weight) + the bf16 activations in and out (FP8's quantized activations are filled "
      "beforehand: its quantization is not timed). FLOPs = 2 x pairs x 3 x hidden x moe_inter. Target (NVFP4): "
      ">= 85% of the read bandwidth.";
  std::mt19937_64 rng(o.seed + 79);
  const std::vector<int64_t> batches = o.smoke ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 8};
  for (const NamedConfig& m : models) {
    for (int64_t rows : batches) {
      absl::Status st = RunCase(m, rows, o, rng, &t);
      if (!st.ok()) t.rows.push_back(Row::Failed(absl::StrCat(m.name, " batch ", rows), std::string(st.message())));
    }
  }
  return t;
}

}  // namespace ferry::bench
