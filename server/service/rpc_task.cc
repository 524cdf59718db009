#include "server/service/rpc_task.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/batcher/batch_queue.h"

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

absl::StatusCode CodeSeenByClient(absl::StatusCode sent, bool cancelled,
                                  absl::Time deadline, absl::Time now) {
  if (deadline <= now ||
      (cancelled && deadline - now <= BatchQueue::kDeadlineSkew)) {
    return absl::StatusCode::kDeadlineExceeded;
  }
  return cancelled ? absl::StatusCode::kCancelled : sent;
}

void RpcInferTask::Complete(const absl::Status& status, const RunStats& run) {
  const absl::Time now = clock_->TimeNow();
  const absl::StatusCode seen =
      CodeSeenByClient(status.code(), context_->IsCancelled(), deadline_, now);
  const absl::Status outcome =
      seen == status.code()
          ? status
          : absl::Status(seen, "the client gave up on the call before its answer");
  OnComplete(outcome, run, now, now - start_);
  if (metrics_ != nullptr) metrics_->RequestFinished(method_, seen, now - start_);
  // DefaultReactor() must not be called twice: it re-creates the reactor.
  reactor_->Finish(ToGrpcStatus(status));
}

absl::Status CheckModelName(absl::string_view field, absl::string_view name,
                            const ModelInfo& served) {
  if (name.empty() || name == served.name) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(field, " '", ClientText(name),
                                          "' is not served here; this server serves '",
                                          served.name, "'"));
}

}  // namespace metalserve
