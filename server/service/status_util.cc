#include "server/service/status_util.h"

#include <string>

namespace metalserve {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::StatusCode FromGrpcCode(grpc::StatusCode code) {
  return static_cast<absl::StatusCode>(code);
}

}  // namespace metalserve
