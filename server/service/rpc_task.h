// RpcInferTask: an InferTask that arrived as a unary gRPC call (native
// Predict or KServe ModelInfer). It finishes its call exactly once, through
// the reactor the handler returned, after recording the outcome in the
// metrics; subclasses fill the response and may record more (OnComplete).
// The call is served by the callback API (a reactor) or the asynchronous
// one (an AsyncUnaryCall, async_unary.h); nothing here depends on which.
//
// Ownership: the call's context, reactor, request and response belong to
// gRPC (an async call's to its AsyncUnaryServer) and stay valid until the
// call is finished; `inputs` are views into
// the request. Thread-safety: owned by one thread at a time (handler, then
// batcher, then executor).
#ifndef METALSERVE_SERVER_SERVICE_RPC_TASK_H_
#define METALSERVE_SERVER_SERVICE_RPC_TASK_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "common/clock.h"
#include "server/metrics/metrics.h"
#include "server/runtime/runner.h"
#include "server/service/async_unary.h"
#include "server/service/infer_task.h"
#include "server/service/status_util.h"

namespace metalserve {

class AccessLog;

// Hands one finished call to `log` (formatting only; never waits on I/O).
// `rows` 0 when the call was refused before its inputs were read.
void LogAccess(AccessLog& log, const grpc::ServerContextBase& context,
               absl::string_view method, const ModelInfo& model, int64_t rows,
               absl::StatusCode code, const RunStats& run, absl::Time now,
               absl::Duration total);

// Deadline of a server call as absl::Time (InfiniteFuture when none).
absl::Time DeadlineOf(const grpc::ServerContextBase& context);

// The code the client of a call saw, given the status the server is about to
// send: the server's own when the call is still open; DEADLINE_EXCEEDED when
// its deadline has passed (or it was cancelled within
// BatchQueue::kDeadlineSkew of it: the client gives up at its own deadline,
// just before the server's); UNAVAILABLE when the server's own shutdown has
// cut open calls off (`cut_off`: gRPC ends every call still open with
// UNAVAILABLE "Cancelling all calls", whether or not `cancelled` shows it
// yet); CANCELLED when the client cancelled it. Metrics record this code,
// so that requests_total{code="OK"} counts only answers a client could
// receive.
absl::StatusCode CodeSeenByClient(absl::StatusCode sent, bool cancelled,
                                  bool cut_off, absl::Time deadline,
                                  absl::Time now);

// OK when `name` is empty or the served model's; otherwise NOT_FOUND naming
// `field` and both names.
absl::Status CheckModelName(absl::string_view field, absl::string_view name,
                            const ModelInfo& served);

// What the handler of one unary call knows of it: enough to record its end
// and finish it, through `reactor` (callback API) or `async` (asynchronous
// API; then `reactor` is null). Pointers and views must outlive the call; `metrics`,
// `model_metrics` and `access_log` may be null; `model` is needed only with
// an access log.
struct UnaryCall {
  grpc::ServerContextBase* context = nullptr;
  grpc::ServerUnaryReactor* reactor = nullptr;
  AsyncUnaryCall* async = nullptr;
  absl::string_view method;  // a literal
  Metrics* metrics = nullptr;
  // The series of the version the call found (ModelServable::metrics()),
  // once it found one: its end is recorded there, with model and version,
  // instead of in `metrics`' unlabelled series. The caller holds that
  // version's handle until the call is finished.
  ModelMetrics* model_metrics = nullptr;
  AccessLog* access_log = nullptr;
  const ModelInfo* model = nullptr;
  absl::Time start;
};

// The one end of every unary call: records it in the metrics and the access
// log under `seen` (the code its client saw; see CodeSeenByClient), `rows`
// and `run`, then finishes it with `status`. The last touch of the call: its
// reactor (or async call) may be freed after it.
void FinishCall(const UnaryCall& call, const absl::Status& status,
                absl::StatusCode seen, int64_t rows, const RunStats& run,
                absl::Time now);

// Finishes a call answered in its handler, never handed to the batcher: a
// refusal (bad request, full queue) or a metadata answer. Recorded with
// status's own code, 0 rows and no run figures. Returns the call's reactor
// (null for an async call), for a callback handler to return.
grpc::ServerUnaryReactor* FinishInHandler(const UnaryCall& call,
                                          const absl::Status& status, absl::Time now);

class RpcInferTask : public InferTask {
 public:
  // `call` gives the context, reactor or async call, method, metrics (may
  // be null) and start; its model metrics and access log are set below.
  // `cut_off` (may be null; must outlive the task) turns true when the
  // server's shutdown cuts open calls off.
  RpcInferTask(const UnaryCall& call, std::vector<InputView> inputs, Clock* clock,
               const std::atomic<bool>* cut_off)
      : call_{.context = call.context,
              .reactor = call.reactor,
              .async = call.async,
              .method = call.method,
              .metrics = call.metrics,
              .start = call.start},
        inputs_(std::move(inputs)),
        key_(BatchKeyOf(inputs_)),
        deadline_(DeadlineOf(*call.context)),
        clock_(clock),
        cut_off_(cut_off) {}

  int64_t rows() const override { return inputs_.front().shape[0]; }
  absl::string_view batch_key() const override { return key_; }
  absl::Time deadline() const override { return deadline_; }
  bool IsCancelled() const override { return call_.context->IsCancelled(); }
  const std::vector<InputView>& inputs() const override { return inputs_; }
  void Abort(const absl::Status& status) override { Complete(status, RunStats{}); }
  int priority() const override { return priority_; }
  // The gRPC handlers touch nothing of the task after Submit, and a call
  // finished inside its handler is answered as one refused there is.
  bool may_run_on_submitter() const override { return true; }
  // The priority the request asked for (0: none); the batcher checks it.
  void set_priority(int priority) { priority_ = priority; }

  // Logs the call to `log` (null: none) under `model`'s name and version
  // when it completes; both must outlive the task.
  void set_access_log(AccessLog* log, const ModelInfo* model) {
    call_.access_log = log;
    call_.model = model;
  }
  // Records the call's end in its version's series (UnaryCall's
  // model_metrics; may be null). The subclass holds the version's handle.
  void set_model_metrics(ModelMetrics* metrics) { call_.model_metrics = metrics; }

 protected:
  // Records the outcome as the client saw it (see CodeSeenByClient), lets
  // the subclass add to it, and finishes the call. The last touch of this
  // task's call: the reactor may be freed after it.
  void Complete(const absl::Status& status, const RunStats& run);
  // `status` is the outcome as the client saw it.
  virtual void OnComplete(const absl::Status& /*status*/, const RunStats& /*run*/,
                          absl::Time /*now*/, absl::Duration /*latency*/) {}

 private:
  UnaryCall call_;  // the access log is set after construction
  const std::vector<InputView> inputs_;
  const std::string key_;
  const absl::Time deadline_;
  Clock* const clock_;
  const std::atomic<bool>* const cut_off_;
  int priority_ = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_RPC_TASK_H_
