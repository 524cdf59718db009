#include "server/service/rpc_task.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/service/access_log.h"

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

void LogAccess(AccessLog& log, const grpc::CallbackServerContext& context,
               absl::string_view method, const ModelInfo& model, int64_t rows,
               absl::StatusCode code, const RunStats& run, absl::Time now,
               absl::Duration total) {
  log.Log({.time = now,
           .peer = context.peer(),
           .method = method,
           .model = model.name,
           .version = model.version,
           .rows = rows,
           .code = code,
           .queue = run.queue_time,
           .compute = run.compute_time,
           .total = total});
}

absl::Status CheckModelName(absl::string_view field, absl::string_view name,
                            const ModelInfo& served) {
  if (name.empty() || name == served.name) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(field, " '", name,
                                          "' is not served here; this server serves '",
                                          served.name, "'"));
}

}  // namespace metalserve
