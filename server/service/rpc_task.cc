#include "server/service/rpc_task.h"

#include <chrono>

namespace metalserve {

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const auto d = context.deadline();
  // gRPC reports "no deadline" as the far future.
  if (d >= std::chrono::system_clock::time_point::max() -
               std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(d);
}

}  // namespace metalserve
