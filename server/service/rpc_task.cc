#include "server/service/rpc_task.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/batcher/batch_queue.h"
#include "server/service/access_log.h"

namespace metalserve {

absl::Time DeadlineOf(const grpc::ServerContextBase& context) {
  const auto d = context.deadline();
  // gRPC reports "no deadline" as the far future.
  if (d >= std::chrono::system_clock::time_point::max() -
               std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(d);
}

void LogAccess(AccessLog& log, const grpc::ServerContextBase& context,
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

absl::StatusCode CodeSeenByClient(absl::StatusCode sent, bool cancelled,
                                  bool cut_off, absl::Time deadline,
                                  absl::Time now) {
  if (deadline <= now ||
      (cancelled && deadline - now <= BatchQueue::kDeadlineSkew)) {
    return absl::StatusCode::kDeadlineExceeded;
  }
  // After the cut-off every call still open is being cancelled by gRPC, but
  // its server context may not show it yet: the client can already hold
  // UNAVAILABLE while IsCancelled() still reads false (the cancellation
  // reaches the server context through a callback on another thread).
  if (cut_off) return absl::StatusCode::kUnavailable;
  if (!cancelled) return sent;
  return absl::StatusCode::kCancelled;
}

void RpcInferTask::Complete(const absl::Status& status, const RunStats& run) {
  const absl::Time now = clock_->TimeNow();
  const bool cut_off = cut_off_ != nullptr && cut_off_->load();
  const absl::StatusCode seen = CodeSeenByClient(
      status.code(), call_.context->IsCancelled(), cut_off, deadline_, now);
  const absl::Status outcome =
      seen == status.code()
          ? status
          : absl::Status(seen, "the client gave up on the call before its answer");
  OnComplete(outcome, run, now, now - call_.start);
  if (call_.metrics != nullptr) {
    call_.metrics->PriorityRequestFinished(priority_level, seen, now - call_.start);
  }
  FinishCall(call_, status, seen, rows(), run, now);
}

void FinishCall(const UnaryCall& call, const absl::Status& status,
                absl::StatusCode seen, int64_t rows, const RunStats& run,
                absl::Time now) {
  const absl::Duration total = now - call.start;
  if (call.model_metrics != nullptr) {
    call.model_metrics->RequestFinished(call.method, seen, total);
  } else if (call.metrics != nullptr) {
    call.metrics->RequestFinished(call.method, seen, total);
  }
  if (call.access_log != nullptr) {
    LogAccess(*call.access_log, *call.context, call.method, *call.model, rows, seen,
              run, now, total);
  }
  if (call.async != nullptr) {
    call.async->Finish(ToGrpcStatus(status));
    return;
  }
  // DefaultReactor() must not be called twice: it re-creates the reactor.
  call.reactor->Finish(ToGrpcStatus(status));
}

grpc::ServerUnaryReactor* FinishInHandler(const UnaryCall& call,
                                          const absl::Status& status, absl::Time now) {
  FinishCall(call, status, status.code(), 0, RunStats{}, now);
  return call.reactor;
}

absl::Status CheckModelName(absl::string_view field, absl::string_view name,
                            const ModelInfo& served) {
  if (name.empty() || name == served.name) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(field, " '", ClientText(name),
                                          "' is not served here; this server serves '",
                                          served.name, "'"));
}

}  // namespace metalserve
