// `ferry quantize --format nvfp4|bf16|f32 IN OUT`: a checkpoint rewritten with its weights in
// another form.
//   nvfp4     every MLP and expert projection (`*.mlp.*_proj.weight`; the router stays) as NVIDIA's
//             ModelOpt writes NVFP4 (common/nvfp4.h: per-16 E4M3 scales chosen as ModelOpt
//             chooses them, a global scale a tensor), every other tensor as stored; config.json
//             gains quantization_config and hf_quant_config.json is written, both naming the
//             linear modules left unquantized. With calibration prompts (--calibration text,
//             --calibration_ids token ids; cli/calibrate.h) each projection also gets its
//             input_scale and the config says NVFP4 with static activation scales (what W4A4
//             kernels need: vLLM's and TensorRT-LLM's on Blackwell, Ferry's --nvfp4_numerics
//             w4a4); a projection calibration did not reach (an MTP layer's) stays bf16. Without
//             calibration the config says W4A16_NVFP4 (weights only, no input scales).
//   bf16, f32 every floating-point weight decoded (FP8 and NVFP4 included) into that dtype, e.g.
//             to hold a quantized model to a float32 run over its own dequantized weights.
// Every other file of IN (tokenizer, chat template, generation config) is copied. Shards of up to
// 5 GB, with model.safetensors.index.json when there are several.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/calibrate.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/dtype.h"
#include "common/nvfp4.h"
#include "common/status.h"
#include "common/version.h"
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/safetensors.h"
#include "model/families/calibration.h"

namespace ferry::cli {
namespace {

namespace fs = std::filesystem;

constexpr size_t kShardBytes = size_t{5} << 30;

// Whether tensor `name` is a projection of an MLP or an expert: what NVFP4 releases quantize.
bool MlpProjection(const std::string& name, const model::TensorInfo& t) {
  return absl::StrContains(name, ".mlp.") && absl::EndsWith(name, "_proj.weight") && t.shape.size() == 2 &&
         t.shape[1] % kNvfp4Group == 0;
}

// Tensors gathered into shards of up to kShardBytes, each written when full; then the index.
class ShardWriter {
 public:
  explicit ShardWriter(std::string dir) : dir_(std::move(dir)) {}

  absl::Status Add(model::TensorBytes t) {
    if (!pending_.empty() && bytes_ + t.bytes.size() > kShardBytes) {
      if (absl::Status st = Flush(); !st.ok()) return st;
    }
    bytes_ += t.bytes.size();
    pending_.push_back(std::move(t));
    return absl::OkStatus();
  }

  // Writes what is pending; one shard becomes model.safetensors, several get an index.
  absl::Status Finish() {
    if (absl::Status st = Flush(); !st.ok()) return st;
    if (files_.size() == 1) {
      std::error_code ec;
      fs::rename(dir_ + "/" + files_[0].first, dir_ + "/model.safetensors", ec);
      return ec ? absl::UnavailableError(absl::StrCat(dir_, ": cannot name its shard: ", ec.message()))
                : absl::OkStatus();
    }
    nlohmann::json map = nlohmann::json::object();
    for (const auto& [file, names] : files_) {
      for (const std::string& n : names) map[n] = file;
    }
    std::ofstream out(dir_ + "/model.safetensors.index.json");
    out << nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump(1) << "\n";
    return out ? absl::OkStatus() : absl::UnavailableError(absl::StrCat(dir_, ": cannot write the index"));
  }

 private:
  absl::Status Flush() {
    if (pending_.empty() && !files_.empty()) return absl::OkStatus();
    const std::string file = absl::StrCat("model-", files_.size() + 1, ".safetensors");
    std::vector<std::string> names;
    for (const auto& t : pending_) names.push_back(t.name);
    if (absl::Status st = model::WriteSafetensors(dir_ + "/" + file, pending_, {{"format", "pt"}}); !st.ok()) return st;
    files_.emplace_back(file, std::move(names));
    pending_.clear();
    bytes_ = 0;
    return absl::OkStatus();
  }

  std::string dir_;
  std::vector<model::TensorBytes> pending_;
  size_t bytes_ = 0;
  std::vector<std::pair<std::string, std::vector<std::string>>> files_;
};

std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

model::TensorBytes FloatTensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                               const std::vector<float>& v) {
  model::TensorBytes t{name, dtype, shape, {}};
  if (dtype == DType::kF32) {
    t.bytes = Bytes(v.data(), v.size() * sizeof(float));
  } else {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = F32ToBf16(v[i]);
    t.bytes = Bytes(b.data(), b.size() * 2);
  }
  return t;
}

// The largest magnitude the global scale of weight `name` (values `w`) is set from: for an MLP's
// gate_proj or up_proj the larger of the two tensors' (ModelOpt exports them with one global
// scale, which vLLM's fused gate_up decodes both with), else w's own. `cache` keeps a pair's.
absl::StatusOr<float> GateUpAmax(const model::Checkpoint& ck, const std::string& name, const std::vector<float>& w,
                                 std::map<std::string, float>* cache) {
  float own = 0.0f;
  for (float v : w) own = std::max(own, std::fabs(v));
  const bool gate = absl::EndsWith(name, ".gate_proj.weight"), up = absl::EndsWith(name, ".up_proj.weight");
  if (!gate && !up) return own;
  const std::string prefix = name.substr(0, name.size() - (gate ? 17 : 15));
  if (auto it = cache->find(prefix); it != cache->end()) return std::max(it->second, own);
  const std::string partner = prefix + (gate ? ".up_proj.weight" : ".gate_proj.weight");
  const model::TensorInfo* p = ck.Find(partner);
  if (p == nullptr) return own;
  std::vector<int64_t> shape = p->shape;
  if (p->dtype == DType::kU8 && shape.size() == 2) shape[1] *= 2;
  FERRY_ASSIGN_OR_RETURN(const std::vector<float> other, ck.LoadF32(partner, shape));
  float amax = own;
  for (float v : other) amax = std::max(amax, std::fabs(v));
  (*cache)[prefix] = amax;
  return amax;
}

int Fail(const std::string& why) {
  fprintf(stderr, "ferry quantize: %s\n", why.c_str());
  return 1;
}

}  // namespace

int RunQuantize(const std::vector<std::string>& args) {
  const std::string format = absl::GetFlag(FLAGS_format);
  const std::string calib_text = absl::GetFlag(FLAGS_calibration), calib_ids = absl::GetFlag(FLAGS_calibration_ids);
  if (args.size() != 2 || (format != "nvfp4" && format != "bf16" && format != "f32")) {
    fprintf(stderr,
            "usage: ferry quantize --format nvfp4|bf16|f32 [--calibration FILE | --calibration_ids FILE] IN_DIR OUT_DIR "
            "(got --format '%s' and %zu paths)\n",
            format.c_str(), args.size());
    return 2;
  }
  if (!calib_text.empty() && !calib_ids.empty()) return Fail("give --calibration or --calibration_ids, not both");
  const bool calibrate = !calib_text.empty() || !calib_ids.empty();
  if (calibrate && format != "nvfp4") return Fail(absl::StrCat("calibration sets NVFP4 input scales; --format is ", format));
  const std::string in = args[0], out = args[1];
  auto ck = model::Checkpoint::Open(in);
  if (!ck.ok()) return Fail(std::string(ck.status().message()));
  std::error_code ec;
  if (fs::exists(out) && !fs::is_empty(out, ec)) return Fail(absl::StrCat(out, " exists and is not empty"));
  // The largest |x| at each MLP projection's input over the prompts (before OUT is created).
  std::map<model::MlpSite, float> amax;
  if (calibrate) {
    auto prompts = ReadCalibrationPrompts(calib_ids.empty() ? calib_text : calib_ids, !calib_ids.empty(), in);
    if (!prompts.ok()) return Fail(std::string(prompts.status().message()));
    int64_t tokens = 0;
    for (const auto& p : *prompts) tokens += static_cast<int64_t>(p.size());
    fprintf(stderr, "ferry quantize: calibration: %zu prompts, %lld tokens (CPU reference, float32)\n",
            prompts->size(), static_cast<long long>(tokens));
    auto reference = model::LoadCausalLM(in);
    if (!reference.ok()) return Fail(std::string(reference.status().message()));
    auto measured = model::CalibrateMlpInputs(**reference, *prompts);
    if (!measured.ok()) return Fail(std::string(measured.status().message()));
    amax = std::move(*measured);
  }
  // The activation scale of projection `name`, 0 when calibration did not reach it.
  auto input_scale = [&](const std::string& name) {
    const std::optional<model::MlpSite> site = model::ParseMlpProjection(name);
    auto it = site ? amax.find(*site) : amax.end();
    return it == amax.end() || !std::isfinite(it->second) ? 0.0f : Nvfp4GlobalScale(it->second);
  };
  fs::create_directories(out, ec);
  if (ec) return Fail(absl::StrCat("cannot create ", out, ": ", ec.message()));

  const bool nvfp4 = format == "nvfp4";
  const DType dense = format == "f32" ? DType::kF32 : DType::kBF16;
  ShardWriter shards(out);
  nlohmann::json excluded = nlohmann::json::array();
  int64_t quantized = 0, decoded = 0, copied = 0, uncalibrated = 0;
  std::map<std::string, float> gate_up_amax;  // an MLP's prefix -> the larger of gate's and up's
  for (const std::string& name : ck->TensorNames()) {
    const model::TensorInfo& t = *ck->Find(name);
    // The source's scales (FP8 blocks, ModelOpt FP8 or NVFP4) go with their weights, which every
    // format here quantizes anew or decodes.
    if (absl::EndsWith(name, "_scale_inv") || absl::EndsWith(name, ".weight_scale") ||
        absl::EndsWith(name, ".weight_scale_2") || absl::EndsWith(name, ".input_scale")) {
      continue;
    }
    // The weight's real shape: an NVFP4 weight is stored packed.
    std::vector<int64_t> shape = t.shape;
    if (t.dtype == DType::kU8 && shape.size() == 2) shape[1] *= 2;
    const bool is_float = IsFloatWeightType(t.dtype) || t.dtype == DType::kU8;
    const bool projection = nvfp4 && is_float && MlpProjection(name, model::TensorInfo{name, t.dtype, shape, 0, 0});
    const float act_scale = projection && calibrate ? input_scale(name) : 0.0f;
    if (projection && calibrate && !(act_scale > 0.0f)) ++uncalibrated;  // stays bf16, excluded below
    absl::Status st;
    if (projection && (!calibrate || act_scale > 0.0f)) {
      auto w = ck->LoadF32(name, shape);
      if (!w.ok()) return Fail(std::string(w.status().message()));
      auto amax = GateUpAmax(*ck, name, *w, &gate_up_amax);
      if (!amax.ok()) return Fail(std::string(amax.status().message()));
      const Nvfp4Weight q = QuantizeNvfp4(*w, shape[0], shape[1], *amax);
      st = shards.Add({name, DType::kU8, {shape[0], shape[1] / 2}, Bytes(q.packed.data(), q.packed.size())});
      if (st.ok()) {
        st = shards.Add({name + "_scale", DType::kF8E4M3, {shape[0], shape[1] / kNvfp4Group},
                         Bytes(q.scales.data(), q.scales.size())});
      }
      if (st.ok()) st = shards.Add({name + "_scale_2", DType::kF32, {}, Bytes(&q.global_scale, sizeof(float))});
      if (st.ok() && calibrate) {
        st = shards.Add({name.substr(0, name.size() - 7) + ".input_scale", DType::kF32, {},
                         Bytes(&act_scale, sizeof(float))});
      }
      ++quantized;
    } else if (is_float && (!nvfp4 || t.dtype == DType::kF8E4M3 || t.dtype == DType::kU8)) {
      // Decoded: every weight for bf16/f32; for nvfp4 only what is quantized in another way.
      auto w = ck->LoadF32(name, shape);
      if (!w.ok()) return Fail(std::string(w.status().message()));
      st = shards.Add(FloatTensor(name, nvfp4 ? DType::kBF16 : dense, shape, *w));
      ++decoded;
    } else {
      const auto* data = static_cast<const uint8_t*>(nullptr);
      auto raw = ck->Bf16Data(name, t.shape);  // bf16 bytes as stored, or null for another dtype
      if (raw.ok() && *raw != nullptr) data = static_cast<const uint8_t*>(*raw);
      if (data == nullptr) {
        auto w = ck->LoadF32(name, t.shape);
        if (!w.ok()) return Fail(std::string(w.status().message()));
        st = shards.Add(FloatTensor(name, t.dtype == DType::kF32 ? DType::kF32 : DType::kBF16, t.shape, *w));
      } else {
        st = shards.Add({name, DType::kBF16, t.shape, Bytes(data, static_cast<size_t>(t.numel() * 2))});
      }
      ++copied;
    }
    const bool left_bf16 = !MlpProjection(name, t) || (projection && calibrate && !(act_scale > 0.0f));
    if (nvfp4 && t.shape.size() == 2 && absl::EndsWith(name, ".weight") && left_bf16) {
      excluded.push_back(name.substr(0, name.size() - 7));
    }
    if (!st.ok()) return Fail(std::string(st.message()));
  }
  if (absl::Status st = shards.Finish(); !st.ok()) return Fail(std::string(st.message()));

  // The other files, and the config saying what the weights now are.
  for (const auto& e : fs::directory_iterator(in)) {
    const std::string file = e.path().filename().string();
    if (!e.is_regular_file() || absl::EndsWith(file, ".safetensors") || file == "model.safetensors.index.json" ||
        file == "config.json" || file == "hf_quant_config.json") {
      continue;
    }
    fs::copy_file(e.path(), fs::path(out) / file, fs::copy_options::overwrite_existing, ec);
    if (ec) return Fail(absl::StrCat("cannot copy ", file, ": ", ec.message()));
  }
  nlohmann::json config = ck->config_json();
  config.erase("quantization_config");
  if (nvfp4) {
    // Calibrated: ModelOpt's NVFP4 (static activation scales, as its config_groups state);
    // otherwise the weight-only form vLLM reads as W4A16_NVFP4.
    nlohmann::json q = {{"quant_method", "modelopt"},
                        {"quant_algo", calibrate ? "NVFP4" : "W4A16_NVFP4"},
                        {"group_size", kNvfp4Group},
                        {"kv_cache_quant_algo", nullptr},
                        {"exclude_modules", excluded}};
    const nlohmann::json fp4 = {{"num_bits", 4}, {"type", "float"}, {"group_size", kNvfp4Group}, {"dynamic", false}};
    nlohmann::json group = {{"targets", {"Linear"}}, {"weights", fp4}};
    if (calibrate) group["input_activations"] = fp4;
    nlohmann::json config_q = q;
    config_q["config_groups"] = {{"group_0", group}};
    config_q["ignore"] = excluded;  // the key config.json readers (vLLM's among them) take
    config["quantization_config"] = config_q;
    std::ofstream hq(out + "/hf_quant_config.json");
    hq << nlohmann::json{{"producer", {{"name", "ferry"}, {"version", VersionString()}}}, {"quantization", q}}.dump(2)
       << "\n";
  } else {
    config["torch_dtype"] = format == "f32" ? "float32" : "bfloat16";
  }
  std::ofstream(out + "/config.json") << config.dump(2) << "\n";
  printf("ferry quantize: %s -> %s (%s%s): %lld weights quantized, %lld decoded, %lld copied", in.c_str(), out.c_str(),
         format.c_str(), calibrate ? ", input scales calibrated" : "", static_cast<long long>(quantized),
         static_cast<long long>(decoded), static_cast<long long>(copied));
  if (uncalibrated > 0) printf(", %lld projections calibration did not reach left bf16", static_cast<long long>(uncalibrated));
  printf("\n");
  return 0;
}

}  // namespace ferry::cli
