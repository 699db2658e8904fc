#include "model/tensor_parallel.h"

#include "absl/strings/str_cat.h"

namespace ferry::model {

absl::Status Collective::Exchange(const std::vector<std::span<const float>>&, const std::vector<std::span<float>>&) {
  return absl::UnimplementedError("this collective cannot exchange buffers between ranks");
}

absl::Status CheckDivisible(const std::string& what, int64_t n, int world) {
  if (world < 1) return absl::InvalidArgumentError(absl::StrCat("tensor-parallel width ", world, " is not >= 1"));
  if (n % world != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " (", n, ") does not split over ", world,
                                                   " tensor-parallel ranks"));
  }
  return absl::OkStatus();
}

}  // namespace ferry::model
