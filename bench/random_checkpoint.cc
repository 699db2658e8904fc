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
// A routed or shared expert's matrix (FP8 with fp8_experts).
bool Expert(const model::ModelTensor& t) {
  return FromPool(t) && t.shape.size() == 2 &&
         (t.name.find(".mlp.experts.") != std::string::npos || t.name.find(".mlp.shared_experts.") != std::string::npos);
}
constexpr float kPool8Range = 100.0f;  // FillRandomFp8's scale: values uniform in +-173

}  // namespace

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
                                                                           bool fp8_experts) {
  std::unique_ptr<RandomCheckpoint> rc(new RandomCheckpoint());
  nlohmann::json config = config_in;
  if (fp8_experts) config["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  FERRY_ASSIGN_OR_RETURN(rc->config_, model::ParseModelConfig(config, label));
  const model::ModelConfig& c = rc->config_;
  const std::vector<model::ModelTensor> specs = model::ModelTensors(c);

  // The pool: as large as the largest Linear weight plus room to shift windows.
  int64_t largest = 0, largest8 = 0, scales = 0;
  for (const model::ModelTensor& t : specs) {
    if (fp8_experts && Expert(t)) {
      largest8 = std::max(largest8, t.numel());
      scales = std::max(scales, (t.shape[0] + 127) / 128 * ((t.shape[1] + 127) / 128));
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
    // The FP8 pool, and scales that make the weights' standard deviation the bf16 pool's.
    rc->pool8_bytes_ = (largest8 + 64 * 128 + 127) / 128 * 128;
    FERRY_ASSIGN_OR_RETURN(void* pinned8, HostAllocPinned(static_cast<size_t>(rc->pool8_bytes_)));
    rc->pool8_ = static_cast<uint8_t*>(pinned8);
    FERRY_ASSIGN_OR_RETURN(void* dev, cu::DeviceAlloc(static_cast<size_t>(rc->pool8_bytes_)));
    absl::Status st = FillRandomFp8(static_cast<uint8_t*>(dev), rc->pool8_bytes_, seed + 1, kPool8Range);
    if (st.ok()) st = cu::CopyToHost(rc->pool8_, dev, static_cast<size_t>(rc->pool8_bytes_));
    (void)cu::DeviceFree(dev);
    FERRY_RETURN_IF_ERROR(st);
    rc->scales_.assign(static_cast<size_t>(scales), kPoolStd / kPool8Range);  // the pool has standard deviation kPool8Range
  }
  std::vector<model::Checkpoint::HostTensor> tensors;
  tensors.reserve(specs.size());
  uint64_t rng = seed ^ 0x5bd1e995ull;
  for (const model::ModelTensor& t : specs) {
    model::Checkpoint::HostTensor h{t.name, DType::kBF16, t.shape, nullptr};
    if (fp8_experts && Expert(t)) {
      const int64_t room = (rc->pool8_bytes_ - t.numel()) / 128;
      const int64_t at = static_cast<int64_t>(SplitMix(rng) % static_cast<uint64_t>(room + 1)) * 128;
      h.dtype = DType::kF8E4M3;
      h.data = rc->pool8_ + at;
      tensors.push_back(std::move(h));
      tensors.push_back({t.name + "_scale_inv", DType::kF32, {(t.shape[0] + 127) / 128, (t.shape[1] + 127) / 128},
                         reinterpret_cast<const uint8_t*>(rc->scales_.data())});
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
