// RpcInferTask: an InferTask that arrived as a unary gRPC call (native
// Predict or KServe ModelInfer). It finishes its call exactly once, through
// the reactor the handler returned, after recording the outcome in the
// metrics; subclasses fill the response and may record more (OnComplete).
//
// Ownership: the call's context, reactor, request and response belong to
// gRPC and stay valid until the reactor is finished; `inputs` are views into
// the request. Thread-safety: owned by one thread at a time (handler, then
// batcher, then executor).
#ifndef METALSERVE_SERVER_SERVICE_RPC_TASK_H_
#define METALSERVE_SERVER_SERVICE_RPC_TASK_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/common/clock.h"
#include "server/metrics/metrics.h"
#include "server/runtime/runner.h"
#include "server/service/infer_task.h"
#include "server/service/status_util.h"

namespace metalserve {

class AccessLog;

// Hands one finished call to `log` (formatting only; never waits on I/O).
// `rows` 0 when the call was refused before its inputs were read.
void LogAccess(AccessLog& log, const grpc::CallbackServerContext& context,
               absl::string_view method, const ModelInfo& model, int64_t rows,
               absl::StatusCode code, const RunStats& run, absl::Time now,
               absl::Duration total);

// Deadline of a server call as absl::Time (InfiniteFuture when none).
absl::Time DeadlineOf(const grpc::CallbackServerContext& context);

// OK when `name` is empty or the served model's; otherwise NOT_FOUND naming
// `field` and both names.
absl::Status CheckModelName(absl::string_view field, absl::string_view name,
                            const ModelInfo& served);

class RpcInferTask : public InferTask {
 public:
  // `method` must outlive the task (a literal); `metrics` may be null.
  RpcInferTask(grpc::CallbackServerContext* context,
               grpc::ServerUnaryReactor* reactor, std::vector<InputView> inputs,
               absl::string_view method, Metrics* metrics, Clock* clock,
               absl::Time start)
      : context_(context),
        reactor_(reactor),
        inputs_(std::move(inputs)),
        key_(BatchKeyOf(inputs_)),
        deadline_(DeadlineOf(*context)),
        method_(method),
        metrics_(metrics),
        clock_(clock),
        start_(start) {}

  int64_t rows() const override { return inputs_.front().shape[0]; }
  absl::string_view batch_key() const override { return key_; }
  absl::Time deadline() const override { return deadline_; }
  bool IsCancelled() const override { return context_->IsCancelled(); }
  const std::vector<InputView>& inputs() const override { return inputs_; }
  void Abort(const absl::Status& status) override { Complete(status, RunStats{}); }

  // Logs the call to `log` (null: none) under `model`'s name and version
  // when it completes; both must outlive the task.
  void set_access_log(AccessLog* log, const ModelInfo* model) {
    access_log_ = log;
    model_ = model;
  }

 protected:
  // Records the outcome, lets the subclass add to it, and finishes the call.
  // The last touch of this task's call: the reactor may be freed after it.
  void Complete(const absl::Status& status, const RunStats& run) {
    const absl::Time now = clock_->TimeNow();
    OnComplete(status, run, now, now - start_);
    if (metrics_ != nullptr) metrics_->RequestFinished(method_, status.code(), now - start_);
    if (access_log_ != nullptr) {
      LogAccess(*access_log_, *context_, method_, *model_, rows(), status.code(), run,
                now, now - start_);
    }
    // DefaultReactor() must not be called twice: it re-creates the reactor.
    reactor_->Finish(ToGrpcStatus(status));
  }
  virtual void OnComplete(const absl::Status& /*status*/, const RunStats& /*run*/,
                          absl::Time /*now*/, absl::Duration /*latency*/) {}

 private:
  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  const std::vector<InputView> inputs_;
  const std::string key_;
  const absl::Time deadline_;
  const absl::string_view method_;
  Metrics* const metrics_;
  Clock* const clock_;
  const absl::Time start_;
  AccessLog* access_log_ = nullptr;
  const ModelInfo* model_ = nullptr;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_RPC_TASK_H_
