#include "bench/random_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status.h"
#include "bench/roofline_cuda.h"
#include "kernels/cuda/ops.h"
#include "model/checkpoint/tensor_list.h"

namespace ferry::bench {
namespace {

namespace cu = ferry::kernels::cuda;

constexpr float kPoolStd = 0.02f;   // transformers' initializer_range
constexpr int64_t kAlign = 64;      // window offsets in elements (128 bytes)

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double Uniform01(uint64_t& s) { return static_cast<double>(SplitMix(s) >> 11) * (1.0 / 9007199254740992.0); }

// A Linear weight: 2-D (or more) and zero-mean; these come from the pool.
bool FromPool(const model::ModelTensor& t) {
  return t.kind == model::ModelTensor::kNormal && t.offset == 0.0f && t.shape.size() >= 2;
}
// The matrices stored in `f`, as the releases store them: routed experts; FP8 also the shared
// experts; NVFP4 also the dense layers' MLPs (ModelOpt leaves the shared experts bf16).
bool Quantized(const model::ModelTensor& t, ExpertFormat f) {
  if (f == ExpertFormat::kBf16 || !FromPool(t) || t.shape.size() != 2) return false;
  const bool routed = t.name.find(".mlp.experts.") != std::string::npos;
  const bool shared = t.name.find(".mlp.shared_experts.") != std::string::npos;
  const bool dense_mlp = !routed && !shared && t.name.find(".mlp.") != std::string::npos &&
                         t.name.find("_proj.weight") != std::string::npos;
  return routed || (f == ExpertFormat::kFp8 && shared) || (f == ExpertFormat::kNvfp4 && dense_mlp);
}
constexpr float kPool8Range = 100.0f;  // FillRandomFp8's scale: values uniform in +-173
// NVFP4: codes uniform over the 16 E2M1 values (mean square 68.5 / 8), group scales uniform over
// the E4M3 bytes 0x30..0x3c (0.5 to 1.5, mean square about 0.94): the global scale that gives the
// bf16 pool's standard deviation.
constexpr uint8_t kNvfp4ScaleLo = 0x30, kNvfp4ScaleHi = 0x3c;
const float kNvfp4Global = static_cast<float>(kPoolStd / std::sqrt(68.5 / 8 * 0.94));

}  // namespace

const char* ExpertFormatName(ExpertFormat f) {
  switch (f) {
    case ExpertFormat::kBf16: return "bf16";
    case ExpertFormat::kFp8: return "FP8";
    case ExpertFormat::kNvfp4: return "NVFP4";
  }
  return "?";
}

absl::StatusOr<nlohmann::json> KeepLayers(nlohmann::json config, const std::vector<int>& layers) {
  nlohmann::json& t = config.contains("text_config") ? config["text_config"] : config;
  const int64_t n = t.value("num_hidden_layers", int64_t{0});
  for (int l : layers) {
    if (l < 0 || l >= n) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", l, " is outside the config's ", n, " layers"));
    }
  }
  if (!t.contains("mlp_layer_types")) {
    const int64_t first_dense = t.value("first_k_dense_replace", int64_t{0});
    nlohmann::json kinds = nlohmann::json::array();
    for (int64_t i = 0; i < n; ++i) kinds.push_back(i < first_dense ? "dense" : "sparse");
    t["mlp_layer_types"] = kinds;
  }
  for (const char* key : {"layer_types", "indexer_types", "mlp_layer_types"}) {
    if (!t.contains(key) || !t[key].is_array()) continue;
    if (static_cast<int64_t>(t[key].size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat(key, " has ", t[key].size(), " entries for ", n, " layers"));
    }
    nlohmann::json picked = nlohmann::json::array();
    for (int l : layers) picked.push_back(t[key][static_cast<size_t>(l)]);
    t[key] = picked;
  }
  t["num_hidden_layers"] = static_cast<int64_t>(layers.size());
  return config;
}

absl::StatusOr<std::unique_ptr<RandomCheckpoint>> RandomCheckpoint::Create(const nlohmann::json& config_in,
                                                                           uint64_t seed, const std::string& label,
                                                                           ExpertFormat experts) {
  std::unique_ptr<RandomCheckpoint> rc(new RandomCheckpoint());
  rc->experts_ = experts;
  nlohmann::json config = config_in;
  if (experts == ExpertFormat::kFp8) {
    config["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  }
  FERRY_ASSIGN_OR_RETURN(rc->config_, model::ParseModelConfig(config, label));
  const model::ModelConfig& c = rc->config_;
  const std::vector<model::ModelTensor> specs = model::ModelTensors(c);
  if (experts == ExpertFormat::kNvfp4) {
    nlohmann::json layers = nlohmann::json::object();
    for (const model::ModelTensor& t : specs) {
      if (Quantized(t, experts)) {
        layers[t.name.substr(0, t.name.size() - 7)] = {{"quant_algo", "NVFP4"}, {"group_size", 16}};
      }
    }
    config["quantization_config"] = {
        {"quant_method", "modelopt"}, {"quant_algo", "MIXED_PRECISION"}, {"quantized_layers", layers}};
  }

  // The pool: as large as the largest Linear weight plus room to shift windows.
  int64_t largest = 0, largest8 = 0, scales = 0;
  for (const model::ModelTensor& t : specs) {
    if (Quantized(t, experts)) {
      const bool fp8 = experts == ExpertFormat::kFp8;
      largest8 = std::max(largest8, fp8 ? t.numel() : t.numel() / 2);
      scales = std::max(scales, fp8 ? (t.shape[0] + 127) / 128 * ((t.shape[1] + 127) / 128) : t.numel() / 16);
    } else if (FromPool(t)) {
      largest = std::max(largest, t.numel());
    }
  }
  rc->pool_elems_ = (largest + 64 * kAlign + kAlign - 1) / kAlign * kAlign;
  const size_t pool_bytes = static_cast<size_t>(rc->pool_elems_) * sizeof(uint16_t);
  FERRY_ASSIGN_OR_RETURN(void* pinned, HostAllocPinned(pool_bytes));
  rc->pool_ = static_cast<uint16_t*>(pinned);
  {
    FERRY_ASSIGN_OR_RETURN(void* dev, cu::DeviceAlloc(pool_bytes));
    absl::Status st = FillRandomBf16(static_cast<uint16_t*>(dev), rc->pool_elems_, seed, kPoolStd);
    if (st.ok()) st = cu::CopyToHost(rc->pool_, dev, pool_bytes);
    (void)cu::DeviceFree(dev);
    FERRY_RETURN_IF_ERROR(st);
  }

  if (largest8 > 0) {
    // The quantized pool: E4M3 values, or E2M1 code pairs, windows of which are the matrices.
    rc->pool8_bytes_ = (largest8 + 64 * 128 + 127) / 128 * 128;
    FERRY_ASSIGN_OR_RETURN(void* pinned8, HostAllocPinned(static_cast<size_t>(rc->pool8_bytes_)));
    rc->pool8_ = static_cast<uint8_t*>(pinned8);
    if (experts == ExpertFormat::kFp8) {
      FERRY_ASSIGN_OR_RETURN(void* dev, cu::DeviceAlloc(static_cast<size_t>(rc->pool8_bytes_)));
      absl::Status st = FillRandomFp8(static_cast<uint8_t*>(dev), rc->pool8_bytes_, seed + 1, kPool8Range);
      if (st.ok()) st = cu::CopyToHost(rc->pool8_, dev, static_cast<size_t>(rc->pool8_bytes_));
      (void)cu::DeviceFree(dev);
      FERRY_RETURN_IF_ERROR(st);
      rc->scales_.assign(static_cast<size_t>(scales), kPoolStd / kPool8Range);  // the pool's deviation is kPool8Range
    } else {
      uint64_t s8 = seed + 1;
      for (int64_t i = 0; i < rc->pool8_bytes_; ++i) rc->pool8_[i] = static_cast<uint8_t>(SplitMix(s8) >> 56);
      rc->nvfp4_scales_.resize(static_cast<size_t>(scales + 64 * 128));
      for (uint8_t& b : rc->nvfp4_scales_) {
        b = static_cast<uint8_t>(kNvfp4ScaleLo + SplitMix(s8) % (kNvfp4ScaleHi - kNvfp4ScaleLo + 1));
      }
      rc->nvfp4_global_ = kNvfp4Global;
    }
  }
  std::vector<model::Checkpoint::HostTensor> tensors;
  tensors.reserve(specs.size());
  uint64_t rng = seed ^ 0x5bd1e995ull;
  for (const model::ModelTensor& t : specs) {
    model::Checkpoint::HostTensor h{t.name, DType::kBF16, t.shape, nullptr};
    if (experts == ExpertFormat::kFp8 && Quantized(t, experts)) {
      const int64_t room = (rc->pool8_bytes_ - t.numel()) / 128;
      const int64_t at = static_cast<int64_t>(SplitMix(rng) % static_cast<uint64_t>(room + 1)) * 128;
      h.dtype = DType::kF8E4M3;
      h.data = rc->pool8_ + at;
      tensors.push_back(std::move(h));
      tensors.push_back({t.name + "_scale_inv", DType::kF32, {(t.shape[0] + 127) / 128, (t.shape[1] + 127) / 128},
                         reinterpret_cast<const uint8_t*>(rc->scales_.data())});
      continue;
    }
    if (experts == ExpertFormat::kNvfp4 && Quantized(t, experts)) {
      const int64_t bytes = t.numel() / 2, groups = t.numel() / 16;
      const int64_t at = static_cast<int64_t>(SplitMix(rng) % static_cast<uint64_t>((rc->pool8_bytes_ - bytes) / 16 + 1));
      const int64_t at_s = static_cast<int64_t>(
          SplitMix(rng) % static_cast<uint64_t>(static_cast<int64_t>(rc->nvfp4_scales_.size()) - groups + 1));
      h.dtype = DType::kU8;
      h.shape = {t.shape[0], t.shape[1] / 2};
      h.data = rc->pool8_ + 16 * at;
      tensors.push_back(std::move(h));
      tensors.push_back({t.name + "_scale", DType::kF8E4M3, {t.shape[0], t.shape[1] / 16}, rc->nvfp4_scales_.data() + at_s});
      tensors.push_back({t.name + "_scale_2", DType::kF32, {}, reinterpret_cast<const uint8_t*>(&rc->nvfp4_global_)});
      continue;
    }
    if (FromPool(t)) {
      const int64_t room = (rc->pool_elems_ - t.numel()) / kAlign;  // >= 64 by the pool's size
      const int64_t at = static_cast<int64_t>(SplitMix(rng) % static_cast<uint64_t>(room + 1)) * kAlign;
      h.data = reinterpret_cast<const uint8_t*>(rc->pool_ + at);
    } else {
      std::vector<uint16_t> v(static_cast<size_t>(t.numel()));
      for (uint16_t& x : v) {
        const double u = Uniform01(rng);
        const double val = t.kind == model::ModelTensor::kLogUniform
                               ? std::log(t.offset + (t.scale - t.offset) * u)
                               : t.offset + t.scale * (2.0 * u - 1.0) * 1.7320508075688772;
        x = F32ToBf16(static_cast<float>(val));
      }
      rc->small_.push_back(std::move(v));
      h.data = reinterpret_cast<const uint8_t*>(rc->small_.back().data());
    }
    tensors.push_back(std::move(h));
  }
  FERRY_ASSIGN_OR_RETURN(rc->ck_, model::Checkpoint::FromHost(config, std::move(tensors), label));
  return rc;
}

RandomCheckpoint::~RandomCheckpoint() {
  HostFreePinned(pool_);
  if (pool8_ != nullptr) HostFreePinned(pool8_);
}

}  // namespace ferry::bench
