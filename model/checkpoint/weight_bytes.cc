#include "model/checkpoint/weight_bytes.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/nvfp4.h"
#include "common/status.h"

namespace ferry::model {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

WeightFormat TensorFormat(const ModelTensor& t, const QuantizationScheme& q) {
  constexpr absl::string_view kWeight = ".weight";
  if (!t.linear || t.shape.size() != 2 || !absl::EndsWith(t.name, kWeight)) return WeightFormat::kBf16;
  return q.FormatOf(absl::string_view(t.name).substr(0, t.name.size() - kWeight.size()), t.shape[1]);
}

absl::StatusOr<int64_t> RankBytes(const ModelTensor& t, WeightFormat format, const QuantizationScheme& q,
                                  int64_t ranks) {
  if (ranks < 1) return absl::InvalidArgumentError(absl::StrCat("ranks is ", ranks, "; use 1 or more"));
  // The rank's share as a matrix [rows, cols] (cols: the product of the other dimensions).
  std::vector<int64_t> shape = t.shape;
  if (t.split_dim >= 0 && ranks > 1) {
    if (t.split_units <= 0 || t.split_units % ranks != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is split over the ranks by its ",
                                                     t.split_units, " heads or intermediate rows, which ", ranks,
                                                     " ranks do not divide"));
    }
    shape[static_cast<size_t>(t.split_dim)] /= ranks;
  }
  const int64_t rows = shape.empty() ? 1 : shape[0];
  int64_t cols = 1;
  for (size_t i = 1; i < shape.size(); ++i) cols *= shape[i];
  const int64_t values = rows * cols;
  const int64_t input_scale = q.input_scales() ? 4 : 0;
  switch (format) {
    case WeightFormat::kBf16:
      return 2 * values;
    case WeightFormat::kFp8Block:
      return values + 4 * CeilDiv(rows, q.fp8_block_rows()) * CeilDiv(cols, q.fp8_block_cols());
    case WeightFormat::kFp8Tensor:
      return values + 4 + input_scale;
    case WeightFormat::kNvfp4:
      if (cols % kNvfp4Group != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "NVFP4 tensor '", t.name, "' split over ", ranks, " ranks leaves ", cols, " of its ", t.shape[1],
            " columns a rank, not whole groups of ", kNvfp4Group));
      }
      return values / 2 + values / kNvfp4Group + 4 + input_scale;
  }
  return absl::InternalError("unknown weight format");
}

absl::StatusOr<WeightBytes> WeightBytesPerRank(const ModelConfig& c, const QuantizationScheme& q, int64_t ranks) {
  if (!q.known()) {
    return absl::UnimplementedError(absl::StrCat("the weights' formats do not follow from the config (", q.Describe(),
                                                 "); known: bf16, FP8 (quant_method fp8) and ModelOpt's NVFP4, FP8 "
                                                 "and MIXED_PRECISION"));
  }
  if (ranks < 1) return absl::InvalidArgumentError(absl::StrCat("ranks is ", ranks, "; use 1 or more"));
  WeightBytes out;
  for (const ModelTensor& t : ModelTensors(c)) {
    const WeightFormat f = TensorFormat(t, q);
    FERRY_ASSIGN_OR_RETURN(const int64_t bytes, RankBytes(t, f, q, ranks));
    const bool split = t.split_dim >= 0 && ranks > 1;
    out.bytes += bytes;
    out.values += split ? t.numel() / ranks : t.numel();
    if (!split) out.replicated_bytes += bytes;
    out.tensors[static_cast<int>(f)] += 1;
    out.format_bytes[static_cast<int>(f)] += bytes;
  }
  return out;
}

}  // namespace ferry::model
