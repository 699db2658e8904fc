// A HuggingFace checkpoint directory: config.json, and either model.safetensors or the shards
// named by model.safetensors.index.json. Shards stay memory-mapped; tensors are upcast to
// float32 only when a backend asks for them.
//
// FP8 weights follow the official FP8 releases: a tensor `X.weight` stored as F8_E4M3 comes with
// `X.weight_scale_inv` (F32 or BF16) of shape [ceil(rows/Br), ceil(cols/Bc)], where [Br, Bc] is
// config.json's quantization_config.weight_block_size (default [128, 128]); the real value of
// element (r, c) is fp8(r, c) * scale_inv[r / Br][c / Bc]. ModelOpt's per-tensor FP8 (its
// releases' FP8 layers) is read too: `X.weight_scale`, one F32 value, multiplies every element.
//
// NVFP4 weights follow NVIDIA's ModelOpt releases (common/nvfp4.h: the layout and the numbers):
// config.json's quantization_config (or hf_quant_config.json's "quantization") names quant_algo
// NVFP4 with group_size 16, and a quantized `X.weight` is stored U8 [rows, cols / 2] with
// `X.weight_scale` (F8_E4M3 [rows, cols / 16]), `X.weight_scale_2` (F32, one value) and
// optionally `X.input_scale` (F32, one value); every other tensor stays as it is (bf16).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "model/checkpoint/quantization.h"
#include "model/checkpoint/safetensors.h"

namespace ferry::model {

// A 2-D window of a tensor viewed as [dim0, product of the other dims]; end -1 means "to the end".
// Used to load a tensor-parallel shard without upcasting the whole tensor.
struct Slice {
  int64_t row_begin = 0, row_end = -1;
  int64_t col_begin = 0, col_end = -1;
};

class Checkpoint {
 public:
  // Opens `dir`: parses config.json, maps every shard and checks that every tensor the index
  // names is present in its shard. Errors name the file and the problem.
  static absl::StatusOr<Checkpoint> Open(const std::string& dir);

  // A tensor held in host memory for FromHost: `data` holds numel * DTypeSize(dtype) bytes.
  struct HostTensor {
    std::string name;
    DType dtype = DType::kBF16;
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;
  };
  // A checkpoint whose tensors live in host memory the caller owns and keeps alive (and
  // unchanged) while this Checkpoint is used; `config` is config.json's contents and `label`
  // stands for the directory in messages. Tensors may share bytes (bench/roofline builds real
  // widths from one random pool this way). INVALID_ARGUMENT for a non-object config, a duplicate
  // name, a null data pointer or a dtype that is not a float weight type.
  static absl::StatusOr<Checkpoint> FromHost(nlohmann::json config, std::vector<HostTensor> tensors,
                                             const std::string& label = "<host memory>");

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config_json() const { return config_; }
  // The path of config.json, for error messages about its contents.
  std::string config_path() const { return dir_ + "/config.json"; }

  bool Has(absl::string_view name) const { return Find(name) != nullptr; }
  // Gives the cached file pages of every tensor whose name starts with `prefix` back
  // (MappedFile::DropPages): for a loader that has copied them elsewhere, on a host whose page
  // cache shares memory with the GPU. The tensors stay readable (from the files again).
  void DropPages(absl::string_view prefix) const;
  // nullptr when absent.
  const TensorInfo* Find(absl::string_view name) const;
  // The shard that holds `name`, for messages. REQUIRES: Has(name).
  const std::string& FileOf(absl::string_view name) const;
  // Every tensor name, sorted.
  std::vector<std::string> TensorNames() const;
  // Float32 bytes LoadF32 has produced so far (the CPU backend's weights).
  int64_t loaded_bytes() const { return loaded_bytes_; }

  // Upcasts tensor `name` (BF16, F16, F32, F8_E4M3 with its block scales, or NVFP4) to float32,
  // row-major, after checking its shape equals `expected_shape` and `slice` lies inside it.
  // Errors: NOT_FOUND naming the tensor when it is absent (or its FP8 scale is);
  // INVALID_ARGUMENT naming the file when the dtype or shape disagrees.
  absl::StatusOr<std::vector<float>> LoadF32(absl::string_view name,
                                             const std::vector<int64_t>& expected_shape,
                                             const Slice& slice = {}) const;

  // The stored bytes of tensor `name` when it is BF16 of exactly `expected_shape` (row-major
  // bf16 bits, valid while this Checkpoint lives, not necessarily 2-byte aligned: copy them),
  // for a backend that keeps bf16 weights as they are: no float32 round trip, which for a bf16
  // tensor gives the same bits (a NaN keeps its payload). nullptr when it is stored in another
  // dtype (use LoadF32). NOT_FOUND / INVALID_ARGUMENT as LoadF32 for a missing tensor or another
  // shape.
  absl::StatusOr<const void*> Bf16Data(absl::string_view name, const std::vector<int64_t>& expected_shape) const;

  // An FP8 tensor as stored, for a backend that keeps FP8 weights (kernels/cuda/linear_fp8.h packs
  // them): its E4M3 bytes, row-major [rows, cols] (cols = the product of the other dims; valid
  // while this Checkpoint lives, no alignment promised: copy them) and its block scales upcast to
  // float32, [ceil(rows / block_rows), ceil(cols / block_cols)].
  struct Fp8Tensor {
    const uint8_t* bytes = nullptr;
    std::vector<float> scales;
    int64_t block_rows = 128, block_cols = 128;
  };
  // Tensor `name` of exactly `expected_shape` as an Fp8Tensor when it is stored F8_E4M3; bytes ==
  // nullptr when it is stored in another dtype (use LoadF32 or Bf16Data). Errors as LoadF32's,
  // the scale tensor included.
  absl::StatusOr<Fp8Tensor> Fp8Data(absl::string_view name, const std::vector<int64_t>& expected_shape) const;

  // An NVFP4 weight as stored (common/nvfp4.h): packed codes [rows, cols / 2], E4M3 group scales
  // [rows, cols / 16] (both valid while this Checkpoint lives), the global scales.
  struct Nvfp4Tensor {
    const uint8_t* packed = nullptr;
    const uint8_t* scales = nullptr;
    float global_scale = 1.0f;
    float input_scale = 0.0f;  // 0: none stored
    int64_t rows = 0, cols = 0;
  };
  // Tensor `name` as an Nvfp4Tensor when it is stored NVFP4 for `expected_shape` (the weight's
  // real shape, [rows, cols]); packed == nullptr when it is stored in another form. Errors
  // (INVALID_ARGUMENT naming the file and the numbers): a packed size that is not cols / 2, a
  // scale tensor of another dtype or shape, a global scale that is not one finite value > 0, a
  // NaN group scale, a U8 weight in a checkpoint whose config does not say NVFP4; NOT_FOUND for a
  // missing scale tensor.
  absl::StatusOr<Nvfp4Tensor> Nvfp4Data(absl::string_view name, const std::vector<int64_t>& expected_shape) const;
  bool nvfp4() const { return quant_.nvfp4(); }
  // How the config says the weights are stored (model/checkpoint/quantization.h).
  const QuantizationScheme& quantization() const { return quant_; }

 private:
  // Sets quant_ from config_'s quantization_config (or `hf_quant` when config_ has none:
  // hf_quant_config.json's contents); `where` names the config in messages.
  absl::Status ReadQuantization(const std::string& where, const nlohmann::json& hf_quant = nullptr);
  // A tensor's description and bytes; `path` names the file holding it (null for a FromHost
  // tensor: PathOf gives the checkpoint's label).
  struct Entry {
    const std::string* path;
    const TensorInfo* info;
    const uint8_t* data;
    const SafetensorsFile* shard = nullptr;  // null for a FromHost tensor
  };
  const std::string& PathOf(const Entry& e) const { return e.path != nullptr ? *e.path : dir_; }
  // Tensor `name`'s entry when its shape is `expected_shape`: NOT_FOUND naming the tensor when it
  // is absent, INVALID_ARGUMENT naming the file and both shapes otherwise.
  absl::StatusOr<const Entry*> Shaped(absl::string_view name, const std::vector<int64_t>& expected_shape) const;
  // The float32 block scales `name`_scale_inv of an FP8 tensor of rows x cols stored in `path`:
  // NOT_FOUND when absent, INVALID_ARGUMENT naming the file for another dtype or shape.
  absl::StatusOr<std::vector<float>> Fp8Scales(absl::string_view name, const std::string& path, int64_t rows,
                                               int64_t cols) const;

  std::string dir_;
  nlohmann::json config_;
  QuantizationScheme quant_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<std::unique_ptr<TensorInfo>> host_infos_;  // FromHost's tensor descriptions
  std::map<std::string, Entry, std::less<>> tensors_;
  mutable int64_t loaded_bytes_ = 0;
};

// Reads and parses a JSON file; errors name the file (and the byte of a parse error).
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

}  // namespace ferry::model
