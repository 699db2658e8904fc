// Float32 weight matrices for the CPU backend and the loader that checks them against the config.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint/checkpoint.h"

namespace ferry::model {

// A row-major float32 matrix [rows, cols]; a vector [n] is stored as rows = n, cols = 1.
// For a PyTorch Linear weight, rows = out_features and cols = in_features.
struct Weight {
  std::vector<float> data;
  int64_t rows = 0;
  int64_t cols = 0;

  const float* ptr() const { return data.data(); }
  // The data as T (float: the CPU backend's activation type; the same accessor as the device's
  // weights, so a forward written over a backend reads both alike).
  template <typename T>
  const T* as() const {
    static_assert(sizeof(T) == sizeof(float), "host weights are float32");
    return data.data();
  }
  bool empty() const { return data.empty(); }
};

// Loads tensors by name under a prefix, checking each shape against what the config implies.
class WeightLoader {
 public:
  WeightLoader(const Checkpoint& ck, std::string prefix) : ck_(ck), prefix_(std::move(prefix)) {}

  // A [rows, cols] matrix `prefix + name` (or the window `slice` of it).
  absl::StatusOr<Weight> Matrix(const std::string& name, int64_t rows, int64_t cols,
                                const Slice& slice = {}) const;
  // A [n] vector (or elements [slice.row_begin, slice.row_end) of it).
  absl::StatusOr<Weight> Vector(const std::string& name, int64_t n, const Slice& slice = {}) const;
  // A tensor of any shape, flattened to [shape[0], rest], optionally a window of that view.
  absl::StatusOr<Weight> Tensor(const std::string& name, const std::vector<int64_t>& shape,
                                const Slice& slice = {}) const;
  // The stored bf16 bits of the [rows, cols] matrix `prefix + name` (Checkpoint::Bf16Data):
  // nullptr when it is stored in another dtype.
  absl::StatusOr<const void*> Bf16Matrix(const std::string& name, int64_t rows, int64_t cols) const {
    return ck_.Bf16Data(prefix_ + name, {rows, cols});
  }
  // The stored FP8 bytes and block scales of the [rows, cols] matrix `prefix + name`
  // (Checkpoint::Fp8Data): bytes == nullptr when it is stored in another dtype.
  absl::StatusOr<Checkpoint::Fp8Tensor> Fp8Matrix(const std::string& name, int64_t rows, int64_t cols) const {
    return ck_.Fp8Data(prefix_ + name, {rows, cols});
  }
  // The stored NVFP4 codes, group scales and global scale of the [rows, cols] matrix `prefix +
  // name` (Checkpoint::Nvfp4Data): packed == nullptr when it is stored in another form.
  absl::StatusOr<Checkpoint::Nvfp4Tensor> Nvfp4Matrix(const std::string& name, int64_t rows, int64_t cols) const {
    return ck_.Nvfp4Data(prefix_ + name, {rows, cols});
  }
  bool Has(const std::string& name) const { return ck_.Has(prefix_ + name); }
  // The stored shape of `prefix + name`, for widths the config does not name (NOT_FOUND if absent).
  absl::StatusOr<std::vector<int64_t>> Shape(const std::string& name) const;

  WeightLoader Sub(const std::string& more) const { return WeightLoader(ck_, prefix_ + more); }
  const std::string& prefix() const { return prefix_; }

 private:
  const Checkpoint& ck_;
  std::string prefix_;
};

}  // namespace ferry::model
