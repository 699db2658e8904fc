#include "model/checkpoint/checkpoint.h"

#include <cmath>

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/nvfp4.h"
#include "common/status.h"

namespace ferry::model {
namespace {

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Converts `count` elements of `src` (of type `dtype`) starting at element `offset` to float.
void ConvertRun(DType dtype, const uint8_t* src, int64_t offset, int64_t count, float* dst) {
  switch (dtype) {
    case DType::kF32: {
      std::memcpy(dst, src + offset * 4, static_cast<size_t>(count) * 4);
      return;
    }
    case DType::kBF16: {
      for (int64_t i = 0; i < count; ++i) {
        uint16_t b;
        std::memcpy(&b, src + (offset + i) * 2, 2);
        dst[i] = Bf16ToF32(b);
      }
      return;
    }
    case DType::kF16: {
      for (int64_t i = 0; i < count; ++i) {
        uint16_t b;
        std::memcpy(&b, src + (offset + i) * 2, 2);
        dst[i] = F16ToF32(b);
      }
      return;
    }
    case DType::kF8E4M3: {
      for (int64_t i = 0; i < count; ++i) dst[i] = F8E4M3ToF32(src[offset + i]);
      return;
    }
    default:
      return;  // unreachable: callers check IsFloatWeightType
  }
}

}  // namespace

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return FileExists(path) ? absl::FailedPreconditionError(absl::StrCat(path, ": cannot read"))
                            : absl::NotFoundError(absl::StrCat(path, ": file not found"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": malformed JSON at byte ", e.byte, ": ", e.what()));
  }
}

// quantization_config (or hf_quant_config.json's "quantization"): FP8 block sizes, and whether
// NVFP4 is declared (model/checkpoint/quantization.h reads both). Tensors are then told apart by
// their dtypes as they load.
absl::Status Checkpoint::ReadQuantization(const std::string& where, const nlohmann::json& hf_quant) {
  FERRY_ASSIGN_OR_RETURN(quant_, QuantizationScheme::Parse(QuantizationScheme::Block(config_, hf_quant), where));
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> Checkpoint::Open(const std::string& dir) {
  Checkpoint ck;
  ck.dir_ = dir;
  while (ck.dir_.size() > 1 && ck.dir_.back() == '/') ck.dir_.pop_back();
  FERRY_ASSIGN_OR_RETURN(ck.config_, ReadJsonFile(ck.config_path()));
  if (!ck.config_.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(ck.config_path(), ": not a JSON object"));
  }
  nlohmann::json hf_quant;
  if (const std::string hq = ck.dir_ + "/hf_quant_config.json"; FileExists(hq)) {
    FERRY_ASSIGN_OR_RETURN(hf_quant, ReadJsonFile(hq));
  }
  FERRY_RETURN_IF_ERROR(ck.ReadQuantization(ck.config_path(), hf_quant));

  const std::string index_path = ck.dir_ + "/model.safetensors.index.json";
  if (FileExists(index_path)) {
    FERRY_ASSIGN_OR_RETURN(nlohmann::json index, ReadJsonFile(index_path));
    auto wm = index.is_object() ? index.find("weight_map") : index.end();
    if (!index.is_object() || wm == index.end() || !wm->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": no 'weight_map' object"));
    }
    std::map<std::string, const SafetensorsFile*> opened;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path, ": weight_map entry '", it.key(), "' is not a file name"));
      }
      const std::string shard = it->get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
        return absl::InvalidArgumentError(absl::StrCat(
            index_path, ": weight_map entry '", it.key(), "' names '", shard,
            "', which is not a file in the checkpoint directory"));
      }
      auto found = opened.find(shard);
      if (found == opened.end()) {
        FERRY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(ck.dir_ + "/" + shard));
        ck.shards_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
        found = opened.emplace(shard, ck.shards_.back().get()).first;
      }
      const TensorInfo* info = found->second->Find(it.key());
      if (info == nullptr) {
        return absl::NotFoundError(absl::StrCat(index_path, ": tensor '", it.key(),
                                                "' is mapped to ", shard, ", which does not hold it"));
      }
      ck.tensors_.emplace(it.key(), Entry{&found->second->path(), info, found->second->Data(*info), found->second});
    }
  } else {
    const std::string single = ck.dir_ + "/model.safetensors";
    if (!FileExists(single)) {
      return absl::NotFoundError(absl::StrCat(dir, ": neither model.safetensors nor "
                                                   "model.safetensors.index.json is present"));
    }
    FERRY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(single));
    ck.shards_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
    const SafetensorsFile* shard = ck.shards_.back().get();
    for (const TensorInfo& t : shard->tensors()) {
      ck.tensors_.emplace(t.name, Entry{&shard->path(), &t, shard->Data(t), shard});
    }
  }
  return ck;
}

absl::StatusOr<Checkpoint> Checkpoint::FromHost(nlohmann::json config, std::vector<HostTensor> tensors,
                                                const std::string& label) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": the config is not a JSON object"));
  }
  Checkpoint ck;
  ck.dir_ = label;
  ck.config_ = std::move(config);
  FERRY_RETURN_IF_ERROR(ck.ReadQuantization(label));
  for (HostTensor& h : tensors) {
    // U8: an NVFP4 weight's packed codes, where the config declares NVFP4 (as in a file).
    const bool nvfp4_codes = h.dtype == DType::kU8 && ck.quant_.nvfp4();
    if (h.data == nullptr || !(IsFloatWeightType(h.dtype) || nvfp4_codes)) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": tensor '", h.name, "' has ",
                                                     h.data == nullptr ? "no data" : "a dtype that is no weight type"));
    }
    auto info = std::make_unique<TensorInfo>();
    info->name = h.name;
    info->dtype = h.dtype;
    info->shape = std::move(h.shape);
    info->begin = 0;
    info->end = static_cast<uint64_t>(info->numel()) * DTypeSize(h.dtype);
    if (!ck.tensors_.emplace(h.name, Entry{nullptr, info.get(), h.data}).second) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": tensor '", h.name, "' given twice"));
    }
    ck.host_infos_.push_back(std::move(info));
  }
  return ck;
}

absl::StatusOr<const Checkpoint::Entry*> Checkpoint::Shaped(absl::string_view name,
                                                            const std::vector<int64_t>& expected_shape) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": tensor '", name, "' is missing"));
  }
  const TensorInfo& t = *it->second.info;
  if (t.shape != expected_shape) {
    return absl::InvalidArgumentError(absl::StrCat(PathOf(it->second), ": tensor '", name, "' has shape ",
                                                   t.ShapeString(), " but the config implies [",
                                                   absl::StrJoin(expected_shape, ", "), "]"));
  }
  return &it->second;
}

namespace {

// INVALID_ARGUMENT naming the tensor and the first element that is NaN or infinite (a poisoned
// weight is refused at load instead of served as garbage tokens).
absl::Status NonFinite(const std::string& path, absl::string_view name, int64_t at, const std::string& value) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' holds ", value, " at element ", at,
                                                 "; a checkpoint's weights must be finite"));
}

}  // namespace

absl::StatusOr<const void*> Checkpoint::Bf16Data(absl::string_view name,
                                                 const std::vector<int64_t>& expected_shape) const {
  FERRY_ASSIGN_OR_RETURN(const Nvfp4Tensor nv, Nvfp4Data(name, expected_shape));
  if (nv.packed != nullptr) return nullptr;
  FERRY_ASSIGN_OR_RETURN(const Entry* e, Shaped(name, expected_shape));
  if (e->info->dtype != DType::kBF16) return nullptr;
  // bf16 with every exponent bit set is an infinity or a NaN.
  const auto* bits = reinterpret_cast<const uint16_t*>(e->data);
  for (int64_t i = 0, n = e->info->numel(); i < n; ++i) {
    if ((bits[i] & 0x7f80u) == 0x7f80u) return NonFinite(PathOf(*e), name, i, (bits[i] & 0x7fu) ? "NaN" : "inf");
  }
  return static_cast<const void*>(e->data);
}

absl::StatusOr<std::vector<float>> Checkpoint::Fp8Scales(absl::string_view name, const std::string& path,
                                                         int64_t rows, int64_t cols) const {
  std::string scale_name(name);
  scale_name += "_scale_inv";
  const int64_t srows = (rows + quant_.fp8_block_rows() - 1) / quant_.fp8_block_rows();
  const int64_t scols = (cols + quant_.fp8_block_cols() - 1) / quant_.fp8_block_cols();
  auto sit = tensors_.find(scale_name);
  if (sit == tensors_.end()) {
    // ModelOpt's per-tensor FP8 (the FP8 layers of its releases): X.weight_scale, one F32 value,
    // which every block then shares.
    const std::string tensor_scale = absl::StrCat(name, "_scale");
    if (auto pt = tensors_.find(tensor_scale);
        pt != tensors_.end() && pt->second.info->dtype == DType::kF32 && pt->second.info->numel() == 1) {
      float value;
      std::memcpy(&value, pt->second.data, sizeof(value));
      if (!(value > 0) || !std::isfinite(value)) {
        return absl::InvalidArgumentError(absl::StrCat(PathOf(pt->second), ": '", tensor_scale, "' is ", value,
                                                       "; an FP8 weight's scale must be finite and > 0"));
      }
      return std::vector<float>(static_cast<size_t>(srows * scols), value);
    }
    return absl::NotFoundError(absl::StrCat(path, ": FP8 tensor '", name, "' has no '", scale_name,
                                            "' block scales (nor a per-tensor '", tensor_scale, "')"));
  }
  const TensorInfo& s = *sit->second.info;
  if (s.shape != std::vector<int64_t>{srows, scols} ||
      (s.dtype != DType::kF32 && s.dtype != DType::kBF16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        PathOf(sit->second), ": '", scale_name, "' is ", DTypeName(s.dtype), " ",
        s.ShapeString(), "; expected F32 or BF16 [", srows, ", ", scols, "] for ", quant_.fp8_block_rows(),
        "x", quant_.fp8_block_cols(), " blocks of ", rows, " x ", cols));
  }
  std::vector<float> scales(static_cast<size_t>(srows * scols));
  ConvertRun(s.dtype, sit->second.data, 0, srows * scols, scales.data());
  for (size_t i = 0; i < scales.size(); ++i) {
    if (!(scales[i] > 0) || !std::isfinite(scales[i])) {
      return absl::InvalidArgumentError(absl::StrCat(PathOf(sit->second), ": block scale ", i, " of '", scale_name,
                                                     "' is ", scales[i], "; FP8 block scales must be finite and > 0"));
    }
  }
  return scales;
}

absl::StatusOr<Checkpoint::Fp8Tensor> Checkpoint::Fp8Data(absl::string_view name,
                                                          const std::vector<int64_t>& expected_shape) const {
  Fp8Tensor out;
  FERRY_ASSIGN_OR_RETURN(const Nvfp4Tensor nv, Nvfp4Data(name, expected_shape));
  if (nv.packed != nullptr) return out;
  FERRY_ASSIGN_OR_RETURN(const Entry* e, Shaped(name, expected_shape));
  out.block_rows = quant_.fp8_block_rows();
  out.block_cols = quant_.fp8_block_cols();
  const TensorInfo& t = *e->info;
  if (t.dtype != DType::kF8E4M3) return out;
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  const int64_t cols = rows == 0 ? 0 : t.numel() / rows;
  FERRY_ASSIGN_OR_RETURN(out.scales, Fp8Scales(name, PathOf(*e), rows, cols));
  // E4M3 has no infinity; S.1111.111 is its NaN.
  for (int64_t i = 0, n = t.numel(); i < n; ++i) {
    if ((e->data[i] & 0x7f) == 0x7f) return NonFinite(PathOf(*e), name, i, "NaN");
  }
  out.bytes = e->data;
  return out;
}

absl::StatusOr<Checkpoint::Nvfp4Tensor> Checkpoint::Nvfp4Data(absl::string_view name,
                                                              const std::vector<int64_t>& expected_shape) const {
  Nvfp4Tensor out;
  auto it = tensors_.find(name);
  if (it == tensors_.end() || it->second.info->dtype != DType::kU8) return out;  // not NVFP4 (or absent)
  const std::string& path = PathOf(it->second);
  const TensorInfo& t = *it->second.info;
  if (!quant_.nvfp4()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' is U8 ", t.ShapeString(),
                                                   " but the checkpoint's quantization_config does not say NVFP4"));
  }
  if (expected_shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' is stored NVFP4 but the config implies [",
                                                   absl::StrJoin(expected_shape, ", "), "], not a matrix"));
  }
  out.rows = expected_shape[0];
  out.cols = expected_shape[1];
  if (out.cols % kNvfp4Group != 0 || t.shape != std::vector<int64_t>{out.rows, out.cols / 2}) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": NVFP4 tensor '", name, "' is packed as ", t.ShapeString(), "; a ", out.rows, " x ", out.cols,
        " weight packs two values a byte into [", out.rows, ", ", out.cols / 2, "]",
        out.cols % kNvfp4Group != 0 ? absl::StrCat(" with ", out.cols, " a multiple of ", kNvfp4Group) : ""));
  }
  const std::string scale_name = absl::StrCat(name, "_scale");
  auto sit = tensors_.find(scale_name);
  if (sit == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(path, ": NVFP4 tensor '", name, "' has no '", scale_name, "'"));
  }
  const TensorInfo& s = *sit->second.info;
  if (s.dtype != DType::kF8E4M3 || s.shape != std::vector<int64_t>{out.rows, out.cols / kNvfp4Group}) {
    return absl::InvalidArgumentError(absl::StrCat(PathOf(sit->second), ": '", scale_name, "' is ", DTypeName(s.dtype),
                                                   " ", s.ShapeString(), "; expected F8_E4M3 [", out.rows, ", ",
                                                   out.cols / kNvfp4Group, "] (a scale for each 16 of ", out.cols,
                                                   " columns)"));
  }
  for (int64_t i = 0, n = s.numel(); i < n; ++i) {
    if ((sit->second.data[i] & 0x7f) == 0x7f) return NonFinite(PathOf(sit->second), scale_name, i, "NaN");
  }
  // One float32 value, finite (> 0 for the weight's global scale).
  auto scalar = [&](const std::string& scalar_name, bool required, float* value) -> absl::Status {
    auto g = tensors_.find(scalar_name);
    if (g == tensors_.end()) {
      return required ? absl::NotFoundError(absl::StrCat(path, ": NVFP4 tensor '", name, "' has no '", scalar_name, "'"))
                      : absl::OkStatus();
    }
    const TensorInfo& gi = *g->second.info;
    if (gi.dtype != DType::kF32 || gi.numel() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(PathOf(g->second), ": '", scalar_name, "' is ", DTypeName(gi.dtype),
                                                     " ", gi.ShapeString(), "; expected one F32 value"));
    }
    std::memcpy(value, g->second.data, sizeof(float));
    if (!std::isfinite(*value) || !(*value > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(PathOf(g->second), ": '", scalar_name, "' is ", *value,
                                                     "; an NVFP4 global scale must be finite and > 0"));
    }
    return absl::OkStatus();
  };
  FERRY_RETURN_IF_ERROR(scalar(absl::StrCat(name, "_scale_2"), /*required=*/true, &out.global_scale));
  std::string input_name(name);
  if (input_name.size() > 7 && input_name.compare(input_name.size() - 7, 7, ".weight") == 0) {
    input_name.resize(input_name.size() - 7);
    FERRY_RETURN_IF_ERROR(scalar(input_name + ".input_scale", /*required=*/false, &out.input_scale));
  }
  out.packed = it->second.data;
  out.scales = sit->second.data;
  return out;
}

const TensorInfo* Checkpoint::Find(absl::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second.info;
}

void Checkpoint::DropPages(absl::string_view prefix) const {
  for (auto it = tensors_.lower_bound(prefix); it != tensors_.end() && absl::StartsWith(it->first, prefix); ++it) {
    if (it->second.shard != nullptr) it->second.shard->DropPages(*it->second.info);
  }
}

const std::string& Checkpoint::FileOf(absl::string_view name) const {
  return PathOf(tensors_.find(name)->second);
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, entry] : tensors_) names.push_back(name);
  return names;
}

absl::StatusOr<std::vector<float>> Checkpoint::LoadF32(absl::string_view name,
                                                       const std::vector<int64_t>& expected_shape,
                                                       const Slice& slice) const {
  FERRY_ASSIGN_OR_RETURN(const Nvfp4Tensor nv, Nvfp4Data(name, expected_shape));
  if (nv.packed != nullptr) {
    const int64_t r0 = slice.row_begin, r1 = slice.row_end < 0 ? nv.rows : slice.row_end;
    const int64_t c0 = slice.col_begin, c1 = slice.col_end < 0 ? nv.cols : slice.col_end;
    if (r0 < 0 || r0 > r1 || r1 > nv.rows || c0 < 0 || c0 > c1 || c1 > nv.cols) {
      return absl::InvalidArgumentError(absl::StrCat(FileOf(name), ": slice rows [", r0, ", ", r1, ") cols [", c0, ", ",
                                                     c1, ") of tensor '", name, "' lies outside its ", nv.rows,
                                                     " x ", nv.cols, " elements"));
    }
    std::vector<float> out(static_cast<size_t>((r1 - r0) * (c1 - c0)));
    loaded_bytes_ += static_cast<int64_t>(out.size() * sizeof(float));
    for (int64_t r = r0; r < r1; ++r) {
      DequantNvfp4Row(nv.packed, nv.scales, nv.global_scale, nv.cols, r, c0, c1, out.data() + (r - r0) * (c1 - c0));
    }
    return out;
  }
  FERRY_ASSIGN_OR_RETURN(const Entry* e, Shaped(name, expected_shape));
  const std::string& path = PathOf(*e);
  const TensorInfo& t = *e->info;
  if (!IsFloatWeightType(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' has dtype ",
                                                   DTypeName(t.dtype),
                                                   "; weights must be BF16, F16, F32 or F8_E4M3"));
  }
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  const int64_t cols = rows == 0 ? 0 : t.numel() / rows;
  const int64_t r0 = slice.row_begin, r1 = slice.row_end < 0 ? rows : slice.row_end;
  const int64_t c0 = slice.col_begin, c1 = slice.col_end < 0 ? cols : slice.col_end;
  if (r0 < 0 || r0 > r1 || r1 > rows || c0 < 0 || c0 > c1 || c1 > cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": slice rows [", r0, ", ", r1, ") cols [", c0, ", ", c1, ") of tensor '", name,
        "' lies outside its ", rows, " x ", cols, " elements"));
  }
  std::vector<float> out(static_cast<size_t>((r1 - r0) * (c1 - c0)));
  loaded_bytes_ += static_cast<int64_t>(out.size() * sizeof(float));
  const uint8_t* src = e->data;
  for (int64_t r = r0; r < r1; ++r) {
    ConvertRun(t.dtype, src, r * cols + c0, c1 - c0, out.data() + (r - r0) * (c1 - c0));
  }
  auto check_finite = [&]() -> absl::Status {
    for (size_t i = 0; i < out.size(); ++i) {
      if (!std::isfinite(out[i])) {
        const int64_t r = r0 + static_cast<int64_t>(i) / (c1 - c0), c = c0 + static_cast<int64_t>(i) % (c1 - c0);
        return NonFinite(path, name, r * cols + c, absl::StrCat(out[i]));
      }
    }
    return absl::OkStatus();
  };
  if (t.dtype != DType::kF8E4M3) {
    FERRY_RETURN_IF_ERROR(check_finite());
    return out;
  }

  // FP8: multiply each element by its block's scale.
  FERRY_ASSIGN_OR_RETURN(const std::vector<float> scales, Fp8Scales(name, path, rows, cols));
  const int64_t scols = (cols + quant_.fp8_block_cols() - 1) / quant_.fp8_block_cols();
  for (int64_t r = r0; r < r1; ++r) {
    float* row = out.data() + (r - r0) * (c1 - c0);
    const float* srow = scales.data() + (r / quant_.fp8_block_rows()) * scols;
    for (int64_t c = c0; c < c1; ++c) row[c - c0] *= srow[c / quant_.fp8_block_cols()];
  }
  FERRY_RETURN_IF_ERROR(check_finite());
  return out;
}

}  // namespace ferry::model
