#include "common/dtype.h"

namespace ferry {
namespace {

struct DTypeEntry {
  DType type;
  absl::string_view name;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kF32, "F32"},  {DType::kF16, "F16"}, {DType::kBF16, "BF16"},
    {DType::kF8E4M3, "F8_E4M3"}, {DType::kF64, "F64"}, {DType::kI64, "I64"},
    {DType::kI32, "I32"},  {DType::kI16, "I16"}, {DType::kI8, "I8"},
    {DType::kU8, "U8"},    {DType::kBool, "BOOL"},
};

}  // namespace

absl::string_view DTypeName(DType t) {
  for (const auto& e : kDTypes) {
    if (e.type == t) return e.name;
  }
  return "?";
}

std::optional<DType> ParseDType(absl::string_view name) {
  for (const auto& e : kDTypes) {
    if (e.name == name) return e.type;
  }
  return std::nullopt;
}

}  // namespace ferry
