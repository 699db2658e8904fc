#include "model/weights.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ferry::model {

absl::StatusOr<Weight> WeightLoader::Tensor(const std::string& name,
                                            const std::vector<int64_t>& shape) const {
  Weight w;
  FERRY_ASSIGN_OR_RETURN(w.data, ck_.LoadF32(prefix_ + name, shape));
  w.rows = shape.empty() ? 1 : shape[0];
  w.cols = w.rows == 0 ? 0 : static_cast<int64_t>(w.data.size()) / w.rows;
  return w;
}

absl::StatusOr<std::vector<int64_t>> WeightLoader::Shape(const std::string& name) const {
  const TensorInfo* t = ck_.Find(prefix_ + name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat(ck_.dir(), ": tensor '", prefix_, name, "' is missing"));
  }
  return t->shape;
}

absl::StatusOr<Weight> WeightLoader::Matrix(const std::string& name, int64_t rows, int64_t cols) const {
  return Tensor(name, {rows, cols});
}

absl::StatusOr<Weight> WeightLoader::Vector(const std::string& name, int64_t n) const {
  return Tensor(name, {n});
}

}  // namespace ferry::model
