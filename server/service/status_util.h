// The one place where absl::Status becomes grpc::Status.
#ifndef METALSERVE_SERVER_SERVICE_STATUS_UTIL_H_
#define METALSERVE_SERVER_SERVICE_STATUS_UTIL_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace metalserve {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::StatusCode FromGrpcCode(grpc::StatusCode code);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_STATUS_UTIL_H_
