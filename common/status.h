// Status helpers used across module boundaries. Errors are absl::Status / absl::StatusOr<T>;
// these macros keep the early-return pattern short without hiding the status.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#define FERRY_CONCAT_INNER_(a, b) a##b
#define FERRY_CONCAT_(a, b) FERRY_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define FERRY_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    ::absl::Status ferry_status_ = (expr);           \
    if (!ferry_status_.ok()) return ferry_status_;   \
  } while (0)

// `lhs = value of expr` where expr is an absl::StatusOr<T>; returns its status when not OK.
#define FERRY_ASSIGN_OR_RETURN(lhs, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL_(FERRY_CONCAT_(ferry_statusor_, __LINE__), lhs, expr)
#define FERRY_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

namespace ferry {

// `st` with "context: " before its message, its code and payloads kept (a data-plane timeout's
// payload names the peer it waited for: dataplane.h). OK stays OK.
absl::Status WithContext(absl::string_view context, const absl::Status& st);

}  // namespace ferry
