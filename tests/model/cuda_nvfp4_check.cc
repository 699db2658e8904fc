#include "tests/model/cuda_nvfp4_check.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "common/nvfp4.h"
#include "common/status.h"
#include "kernels/cuda/options.h"
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/safetensors.h"
#include "model/cuda/glm5_next_cuda.h"
#include "model/cuda/glm_moe_dsa_cuda.h"
#include "model/golden/decision_log.h"
#include "model/families/calibration.h"
#include "model/families/causal_lm.h"
#include "model/golden/golden.h"

namespace ferry::model {
namespace {

std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

// Writes `ck` to `out` with every MLP projection (routed and shared experts, dense layers' MLPs, as
// ModelOpt's releases quantize them) whose name does not contain `leave` (when not empty) in NVFP4
// (common/nvfp4's quantization) and every other tensor as float32.
// With `amax` (calibration's largest |x| a projection input), each quantized projection also gets
// its input_scale, and the config says static activation scales; a projection calibration did not
// reach (a vision tower's MLP) stays float32, as ferry quantize leaves it.
absl::Status WriteNvfp4Experts(const Checkpoint& ck, const std::string& out, const std::string& leave = "",
                               const std::map<MlpSite, float>* amax = nullptr) {
  std::vector<TensorBytes> tensors;
  for (const std::string& name : ck.TensorNames()) {
    const std::vector<int64_t> shape = ck.Find(name)->shape;
    FERRY_ASSIGN_OR_RETURN(std::vector<float> v, ck.LoadF32(name, shape));
    const std::optional<MlpSite> site = ParseMlpProjection(name);
    const bool expert = absl::StrContains(name, ".mlp.") && absl::EndsWith(name, "_proj.weight") &&
                        shape.size() == 2 && shape[1] % kNvfp4Group == 0 &&
                        (leave.empty() || !absl::StrContains(name, leave)) &&
                        (amax == nullptr || (site && amax->count(*site) > 0));
    if (!expert) {
      tensors.push_back({name, DType::kF32, shape, Bytes(v.data(), v.size() * sizeof(float))});
      continue;
    }
    const Nvfp4Weight q = QuantizeNvfp4(v, shape[0], shape[1]);
    tensors.push_back({name, DType::kU8, {shape[0], shape[1] / 2}, Bytes(q.packed.data(), q.packed.size())});
    tensors.push_back({name + "_scale", DType::kF8E4M3, {shape[0], shape[1] / kNvfp4Group},
                       Bytes(q.scales.data(), q.scales.size())});
    tensors.push_back({name + "_scale_2", DType::kF32, {}, Bytes(&q.global_scale, sizeof(float))});
    if (amax != nullptr) {
      const float s = Nvfp4GlobalScale(amax->at(*site));
      tensors.push_back({name.substr(0, name.size() - 7) + ".input_scale", DType::kF32, {}, Bytes(&s, sizeof(float))});
    }
  }
  std::filesystem::create_directories(out);
  FERRY_RETURN_IF_ERROR(WriteSafetensors(out + "/model.safetensors", tensors, {{"format", "pt"}}));
  nlohmann::json config = ck.config_json();
  config["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16}};
  if (amax != nullptr) {
    const nlohmann::json fp4 = {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}, {"dynamic", false}};
    config["quantization_config"]["config_groups"] = {
        {"group_0", {{"targets", {"Linear"}}, {"weights", fp4}, {"input_activations", fp4}}}};
  }
  std::ofstream(out + "/config.json") << config.dump(1) << "\n";
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CausalLM>> Load(const Checkpoint& ck, const ModelConfig& c, cuda::Precision p,
                                               bool nvfp4_experts,
                                               Nvfp4Numerics numerics = Nvfp4Numerics::kW4A16) {
  cuda::CudaLoadOptions opts(p);
  opts.nvfp4_experts = nvfp4_experts;
  opts.nvfp4_numerics = numerics;
  if (c.family == Family::kGlmMoeDsa) {
    FERRY_ASSIGN_OR_RETURN(auto m, cuda::GlmMoeDsaCuda::Load(ck, c, CacheOptions{16, -1}, opts));
    return std::unique_ptr<CausalLM>(std::move(m));
  }
  FERRY_ASSIGN_OR_RETURN(auto m, cuda::Glm5NextCuda::Load(ck, c, CacheOptions{16, -1}, opts));
  return std::unique_ptr<CausalLM>(std::move(m));
}

absl::StatusOr<ForwardOutput> Prefill(CausalLM& m, const std::vector<int32_t>& ids, DecisionLog* tape,
                                      DecisionLog::Mode mode) {
  tape->Start(mode);
  m.set_decision_log(tape);
  auto seq = m.NewSequence();
  ForwardSegment seg{seq.get(), ids, true};
  absl::StatusOr<ForwardOutput> o = m.Forward(std::span<const ForwardSegment>(&seg, 1));
  m.set_decision_log(nullptr);
  FERRY_RETURN_IF_ERROR(tape->Finish());
  return o;
}

float MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float d = std::fabs(a[i] - b[i]);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

absl::Status Check(const std::string& dir, int* bad) {
  const int bad_before = *bad;  // this section's verdict is its own
  FERRY_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(dir));
  FERRY_ASSIGN_OR_RETURN(ModelConfig cfg, ParseModelConfig(ck.config_json(), ck.config_path()));
  char tmpl[] = "/tmp/ferry-nvfp4-check-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::UnavailableError("mkdtemp failed");
  const std::string tmp = tmpl;
  FERRY_RETURN_IF_ERROR(WriteNvfp4Experts(ck, tmp + "/all"));
  FERRY_ASSIGN_OR_RETURN(Checkpoint nck, Checkpoint::Open(tmp + "/all"));
  FERRY_ASSIGN_OR_RETURN(auto ref, Load(nck, cfg, cuda::Precision::kF32, true));
  FERRY_ASSIGN_OR_RETURN(auto kept, Load(nck, cfg, cuda::Precision::kBf16, true));
  FERRY_ASSIGN_OR_RETURN(auto upcast, Load(nck, cfg, cuda::Precision::kBf16, false));
  printf("== %s, MLPs and experts in NVFP4: weights on the device %.2f MB kept packed, %.2f MB upcast\n", dir.c_str(),
         kept->weight_bytes() / 1e6, upcast->weight_bytes() / 1e6);
  *bad += kept->weight_bytes() == upcast->weight_bytes();  // equal: nothing was kept
  // The dense layers' MLPs kept packed too: leaving their gate_proj in float32 makes the model
  // (those MLPs then upcast) larger.
  bool dense = false;
  for (int64_t i = 0; i < cfg.num_layers; ++i) dense = dense || cfg.mlp_types[static_cast<size_t>(i)] == MlpType::kDense;
  if (dense && cfg.intermediate_size % 16 == 0) {
    FERRY_RETURN_IF_ERROR(WriteNvfp4Experts(ck, tmp + "/experts", ".mlp.gate_proj."));
    FERRY_ASSIGN_OR_RETURN(Checkpoint eck, Checkpoint::Open(tmp + "/experts"));
    FERRY_ASSIGN_OR_RETURN(auto experts_only, Load(eck, cfg, cuda::Precision::kBf16, true));
    printf("  dense MLPs left in float32: %.2f MB on the device\n", experts_only->weight_bytes() / 1e6);
    *bad += !(kept->weight_bytes() < experts_only->weight_bytes());
  }
  // A layer whose experts do not share one format: refused by name at load.
  FERRY_RETURN_IF_ERROR(WriteNvfp4Experts(ck, tmp + "/mixed", ".mlp.experts.1."));
  FERRY_ASSIGN_OR_RETURN(Checkpoint mck, Checkpoint::Open(tmp + "/mixed"));
  auto refused = Load(mck, cfg, cuda::Precision::kBf16, true);
  const std::string msg = refused.ok() ? "loaded" : std::string(refused.status().message());
  printf("  expert 1 left in float32: %s\n", msg.c_str());
  *bad += refused.ok() || !absl::StrContains(msg, "expert 1 is not stored in NVFP4 but expert 0 is");
  FERRY_ASSIGN_OR_RETURN(std::vector<GoldenPrompt> goldens, ReadGolden(dir + "/golden.safetensors"));
  DecisionLog tape;
  const double tol = PinnedBf16Tolerance(cfg.family);
  float worst_kept = 0, worst_tiles = 0, worst_upcast = 0;
  const kernels::cuda::KernelOptions options = kernels::cuda::GetKernelOptions();
  for (const GoldenPrompt& g : goldens) {
    FERRY_ASSIGN_OR_RETURN(ForwardOutput want, Prefill(*ref, g.ids, &tape, DecisionLog::Mode::kRecord));
    FERRY_ASSIGN_OR_RETURN(ForwardOutput got, Prefill(*kept, g.ids, &tape, DecisionLog::Mode::kReplay));
    FERRY_ASSIGN_OR_RETURN(ForwardOutput up, Prefill(*upcast, g.ids, &tape, DecisionLog::Mode::kReplay));
    // The dense and shared MLPs' many-row form (dequantized tiles and cuBLAS) at every row count.
    kernels::cuda::KernelOptions every_row = options;
    every_row.nvfp4_gemm_min_rows = 1;
    kernels::cuda::SetKernelOptions(every_row);
    absl::StatusOr<ForwardOutput> tiles = Prefill(*kept, g.ids, &tape, DecisionLog::Mode::kReplay);
    kernels::cuda::SetKernelOptions(options);
    if (!tiles.ok()) return tiles.status();
    const float mk = MaxAbs(got.logits, want.logits), mt = MaxAbs(tiles->logits, want.logits),
                mu = MaxAbs(up.logits, want.logits);
    printf("  %s (%zu tokens): max |logit error| kept NVFP4 %.3f (through dequantized tiles %.3f, %.3g from the "
           "GEMV's), upcast bf16 %.3f\n", g.name.c_str(), g.ids.size(), mk, mt, MaxAbs(tiles->logits, got.logits), mu);
    worst_kept = std::max(worst_kept, mk);
    worst_tiles = std::max(worst_tiles, mt);
    worst_upcast = std::max(worst_upcast, mu);
  }
  *bad += !(worst_kept <= tol) || !(worst_tiles <= tol) || !(worst_upcast <= tol);
  printf("nvfp4 experts: worst max |logit error| kept %.3f, through dequantized tiles %.3f, upcast %.3f (bound "
         "%.2f): %s\n", worst_kept, worst_tiles, worst_upcast, tol, *bad == bad_before ? "ok" : "FAILED");
  std::filesystem::remove_all(tmp);
  return absl::OkStatus();
}

// W4A4 numerics: the checkpoint calibrated on its golden prompts (CPU reference), quantized with
// input scales, run on the device in bf16 with --nvfp4-numerics w4a4 (RoundActivationsW4A4
// before the NVFP4 products) against the CPU reference's W4A4 run (the FP4 tensor cores' twin)
// with its decisions replayed: routing, indexer and the FP4 codes of every MLP input (an FP4 code
// flips at a rounding tie as a routing choice does: rounding the twin's own MLP inputs to bf16
// moved its logits by 2-7 on these checkpoints). The bound is the pinned bf16 one doubled.
// Projections whose name contains `leave` (when not empty) stay bf16: ".mlp.experts." keeps the
// routed experts bf16 beside NVFP4 shared experts (which then run apart from the routed ones).
absl::Status CheckW4a4(const std::string& dir, const std::string& leave, int* bad) {
  const int bad_before = *bad;
  FERRY_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(dir));
  FERRY_ASSIGN_OR_RETURN(ModelConfig cfg, ParseModelConfig(ck.config_json(), ck.config_path()));
  FERRY_ASSIGN_OR_RETURN(std::vector<GoldenPrompt> goldens, ReadGolden(dir + "/golden.safetensors"));
  std::vector<std::vector<int32_t>> prompts;
  for (const GoldenPrompt& g : goldens) prompts.push_back(g.ids);
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CausalLM> source, LoadCausalLM(dir));
  FERRY_ASSIGN_OR_RETURN(const auto amax, CalibrateMlpInputs(*source, prompts));
  char tmpl[] = "/tmp/ferry-w4a4-check-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::UnavailableError("mkdtemp failed");
  const std::string tmp = tmpl;
  struct Remove {
    std::string dir;
    ~Remove() { std::filesystem::remove_all(dir); }
  } remove{tmp};
  FERRY_RETURN_IF_ERROR(WriteNvfp4Experts(ck, tmp, leave, &amax));
  FERRY_ASSIGN_OR_RETURN(Checkpoint qck, Checkpoint::Open(tmp));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CausalLM> twin, LoadCausalLM(tmp, {}, {}, Nvfp4Numerics::kW4A4));
  FERRY_ASSIGN_OR_RETURN(auto device, Load(qck, cfg, cuda::Precision::kBf16, true, Nvfp4Numerics::kW4A4));
  const bool refused = !Load(qck, cfg, cuda::Precision::kF32, true, Nvfp4Numerics::kW4A4).ok();
  *bad += !refused;
  const double tol = 2 * PinnedBf16Tolerance(cfg.family);
  float worst = 0;
  DecisionLog tape;
  for (const GoldenPrompt& g : goldens) {
    FERRY_ASSIGN_OR_RETURN(ForwardOutput want, Prefill(*twin, g.ids, &tape, DecisionLog::Mode::kRecord));
    FERRY_ASSIGN_OR_RETURN(ForwardOutput got, Prefill(*device, g.ids, &tape, DecisionLog::Mode::kReplay));
    const float m = MaxAbs(got.logits, want.logits);
    printf("  %s (%zu tokens): W4A4 device bf16 against the CPU twin, max |logit error| %.3f; its FP4 activations "
           "pinned to the twin's: %lld rows, %lld groups of 16 differed\n", g.name.c_str(), g.ids.size(), m,
           static_cast<long long>(tape.stats().fp4_rows), static_cast<long long>(tape.stats().fp4_groups_differing));
    *bad += tape.stats().fp4_rows == 0;  // nothing pinned: the comparison would not be immune to FP4 ties
    worst = std::max(worst, m);
  }
  *bad += !(worst <= tol);
  printf("nvfp4 w4a4%s: worst max |logit error| %.3f (bound %.2f), float32 refused: %s: %s\n",
         leave.empty() ? "" : (" leaving " + leave + " bf16").c_str(), worst, tol, refused ? "yes" : "no",
         *bad == bad_before ? "ok" : "FAILED");
  return absl::OkStatus();
}

}  // namespace

int Nvfp4Main(const std::string& dir) {
  int bad = 0;
  for (const std::string leave : {"", ".mlp.experts."}) {  // reported; the NVFP4 checks still run
    if (absl::Status st = CheckW4a4(dir, leave, &bad); !st.ok()) {
      printf("nvfp4 w4a4%s: %s\n", leave.empty() ? "" : (" leaving " + leave + " bf16").c_str(),
             std::string(st.message()).c_str());
      ++bad;
    }
  }
  if (absl::Status st = Check(dir, &bad); !st.ok()) {
    printf("nvfp4 experts: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return bad == 0 ? 0 : 1;
}

}  // namespace ferry::model
