#include "server/service/rpc_task.h"

#include <chrono>

#include "absl/strings/str_cat.h"

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

absl::Status CheckModelName(absl::string_view field, absl::string_view name,
                            const ModelInfo& served) {
  if (name.empty() || name == served.name) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(field, " '", ClientText(name),
                                          "' is not served here; this server serves '",
                                          served.name, "'"));
}

}  // namespace metalserve
