#include "model/checkpoint/weights.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ferry::model {

absl::StatusOr<Weight> WeightLoader::Tensor(const std::string& name, const std::vector<int64_t>& shape,
                                            const Slice& slice) const {
  Weight w;
  FERRY_ASSIGN_OR_RETURN(w.data, ck_.LoadF32(prefix_ + name, shape, slice));
  int64_t rows = shape.empty() ? 1 : shape[0];
  int64_t cols = 1;
  for (size_t i = 1; i < shape.size(); ++i) cols *= shape[i];
  w.rows = (slice.row_end < 0 ? rows : slice.row_end) - slice.row_begin;
  w.cols = (slice.col_end < 0 ? cols : slice.col_end) - slice.col_begin;
  return w;
}

absl::StatusOr<std::vector<int64_t>> WeightLoader::Shape(const std::string& name) const {
  const TensorInfo* t = ck_.Find(prefix_ + name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat(ck_.dir(), ": tensor '", prefix_, name, "' is missing"));
  }
  return t->shape;
}

absl::StatusOr<Weight> WeightLoader::Matrix(const std::string& name, int64_t rows, int64_t cols,
                                            const Slice& slice) const {
  return Tensor(name, {rows, cols}, slice);
}

absl::StatusOr<Weight> WeightLoader::Vector(const std::string& name, int64_t n, const Slice& slice) const {
  return Tensor(name, {n}, slice);
}

}  // namespace ferry::model
