#include "kvpool/bytes_per_token.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ferry::kvpool {

const char* CacheDtypeName(CacheDtype d) { return d == CacheDtype::kBf16 ? "bf16" : "fp8"; }

absl::StatusOr<CacheDtype> ParseCacheDtype(absl::string_view s) {
  if (s == "bf16") return CacheDtype::kBf16;
  if (s == "fp8") return CacheDtype::kFp8;
  return absl::InvalidArgumentError(
      absl::StrCat("--kv-cache is '", s, "'; use bf16 or fp8"));
}

}  // namespace ferry::kvpool
