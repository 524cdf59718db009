// RETURN_IF_ERROR / ASSIGN_OR_RETURN, named as in later Abseil releases.
#ifndef METALSERVE_SERVER_COMMON_STATUS_MACROS_H_
#define METALSERVE_SERVER_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define METALSERVE_CONCAT_INNER_(a, b) a##b
#define METALSERVE_CONCAT_(a, b) METALSERVE_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                                \
  do {                                                       \
    ::absl::Status metalserve_status_ = (expr);              \
    if (!metalserve_status_.ok()) return metalserve_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  METALSERVE_ASSIGN_OR_RETURN_IMPL_( \
      METALSERVE_CONCAT_(metalserve_statusor_, __LINE__), lhs, expr)

#define METALSERVE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                      \
  if (!statusor.ok()) return std::move(statusor).status();     \
  lhs = std::move(statusor).value()

#endif  // METALSERVE_SERVER_COMMON_STATUS_MACROS_H_
