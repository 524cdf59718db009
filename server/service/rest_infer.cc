// POST /v2/models/{name}[/versions/{v}]/infer: decode, validate with the
// gRPC path's rules, hand to the batcher, suspend the connection; the
// executor's Finish encodes the answer and resumes it.
#include <microhttpd.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/service/access_log.h"
#include "server/service/infer_task.h"
#include "server/service/kserve_codec.h"
#include "server/service/raw_call.h"
#include "server/service/response_writer.h"
#include "server/service/rest_call.h"
#include "server/service/rest_codec.h"
#include "server/service/rest_server.h"
#include "server/service/rpc_task.h"
#include "server/service/tensor_codec.h"

namespace metalserve {
namespace {

constexpr absl::string_view kModelInfer = "http_ModelInfer";

// Where an infer's outcome is recorded: the metrics and the access log
// (either may be null). `model_metrics`: the series of the version the
// request found (null when it found none), recorded in instead of `metrics`.
struct InferRecord {
  Metrics* metrics;
  AccessLog* access_log;
  const ModelInfo* model;
  Clock* clock;
  ModelMetrics* model_metrics;
};

// Records one finished infer; `rows` 0 when refused before its inputs were read.
void Record(const InferRecord& r, const RestServer::Call& call, int64_t rows,
            absl::StatusCode code, const RunStats& run) {
  const absl::Time now = r.clock->TimeNow();
  if (r.model_metrics != nullptr) {
    r.model_metrics->RequestFinished(kModelInfer, code, now - call.start);
  } else if (r.metrics != nullptr) {
    r.metrics->RequestFinished(kModelInfer, code, now - call.start);
  }
  if (r.access_log != nullptr) {
    r.access_log->Log({.time = now, .peer = call.peer, .method = kModelInfer,
                       .model = r.model->name, .version = r.model->version, .rows = rows,
                       .code = code, .queue = run.queue_time, .compute = run.compute_time,
                       .total = now - call.start});
  }
}

// An infer request in the batcher. Owns the decoded request (its inputs
// point into it); answers its HTTP request exactly once by writing the
// Call's answer and resuming the connection.
class RestInferTask final : public InferTask {
 public:
  RestInferTask(RestServer* server, MHD_Connection* connection, RestServer::Call* call,
                std::unique_ptr<RestInferRequest> request, std::vector<InputView> inputs,
                std::vector<size_t> outputs, std::vector<bool> binary, ServableHandle model,
                InferRecord record, int priority, absl::Time deadline)
      : server_(server),
        connection_(connection),
        call_(call),
        request_(std::move(request)),
        inputs_(std::move(inputs)),
        key_(BatchKeyOf(inputs_)),
        outputs_(std::move(outputs)),
        binary_(std::move(binary)),
        model_(std::move(model)),
        record_(record),
        priority_(priority),
        deadline_(deadline) {}

  int64_t rows() const override { return inputs_.front().shape[0]; }
  absl::string_view batch_key() const override { return key_; }
  const std::vector<InputView>& inputs() const override { return inputs_; }
  int priority() const override { return priority_; }
  absl::Time deadline() const override { return deadline_; }
  void Abort(const absl::Status& status) override {
    Complete(ErrorAnswer(status), status, RunStats{});
  }

  void Finish(absl::StatusOr<std::vector<Tensor>> outputs, const RunStats& stats) override {
    if (!outputs.ok()) {
      Complete(ErrorAnswer(outputs.status()), outputs.status(), stats);
      return;
    }
    ResponseFields fields = ServedResponseFields(ServableOf(model_).info(), stats);
    fields.id = request_->request.id();
    RestBody body = EncodeRestInferResponse(fields, *outputs, outputs_, binary_);
    RestAnswer a;
    a.body = std::move(body.body);
    a.json_length = body.json_length;
    a.binary = body.has_binary;
    Complete(std::move(a), absl::OkStatus(), stats);
  }

 private:
  // The last touch of the Call: after the resume the polling thread may
  // send the answer and free it.
  void Complete(RestAnswer answer, const absl::Status& status, const RunStats& run) {
    Record(record_, *call_, rows(), status.code(), run);
    call_->answer = std::move(answer);
    MHD_resume_connection(connection_);
    server_->Resumed();
  }

  RestServer* const server_;
  MHD_Connection* const connection_;
  RestServer::Call* const call_;
  const std::unique_ptr<RestInferRequest> request_;
  const std::vector<InputView> inputs_;
  const std::string key_;
  const std::vector<size_t> outputs_;
  const std::vector<bool> binary_;
  const ServableHandle model_;  // released when the task is destroyed
  const InferRecord record_;
  const int priority_;
  const absl::Time deadline_;
};

// Triton's request timeout: parameters["timeout"] in microseconds (int64 or
// uint64; 0 or absent: none) counted from the request's arrival, enforced as
// gRPC's deadline is (a request still queued at it is answered 504 and never
// run). INVALID_ARGUMENT naming the value for a negative or non-integer one.
absl::StatusOr<absl::Time> RestDeadline(const inference::ModelInferRequest& request,
                                        absl::Time arrival) {
  const auto it = request.parameters().find("timeout");
  if (it == request.parameters().end()) return absl::InfiniteFuture();
  const inference::InferParameter& p = it->second;
  if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
    return absl::InfiniteFuture();  // beyond int64 microseconds: never
  }
  if (p.parameter_choice_case() != inference::InferParameter::kInt64Param ||
      p.int64_param() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameters.timeout must be a non-negative integer of microseconds (0: none), got ",
        p.ShortDebugString()));
  }
  if (p.int64_param() == 0) return absl::InfiniteFuture();
  return arrival + absl::Microseconds(p.int64_param());
}

// The Inference-Header-Content-Length header: nullopt when absent.
absl::StatusOr<std::optional<size_t>> HeaderLength(MHD_Connection* connection) {
  const char* v =
      MHD_lookup_connection_value(connection, MHD_HEADER_KIND, kInferenceHeaderContentLength);
  if (v == nullptr) return std::nullopt;
  uint64_t n = 0;
  if (!absl::SimpleAtoi(v, &n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kInferenceHeaderContentLength, " '", ClientText(v), "' is not a byte count"));
  }
  return static_cast<size_t>(n);
}

// The request decoded and validated against `info`: the task's parts.
struct Admitted {
  std::unique_ptr<RestInferRequest> request;
  std::vector<InputView> inputs;
  std::vector<size_t> outputs;
  std::vector<bool> binary;  // parallel to outputs
  int priority = 0;
  absl::Time deadline = absl::InfiniteFuture();
};

absl::StatusOr<Admitted> Admit(MHD_Connection* connection, absl::string_view body,
                               absl::string_view name, absl::string_view version,
                               const ModelInfo& info, const absl::Status& model,
                               absl::Time arrival) {
  absl::StatusOr<std::optional<size_t>> header_length = HeaderLength(connection);
  if (!header_length.ok()) return header_length.status();
  absl::StatusOr<RestInferRequest> decoded =
      DecodeRestInferRequest(body, *header_length, name, version);
  if (!decoded.ok()) return decoded.status();
  Admitted a;
  a.request = std::make_unique<RestInferRequest>(*std::move(decoded));
  const inference::ModelInferRequest& r = a.request->request;
  if (!model.ok()) return model;
  absl::StatusOr<int> priority = KServePriority(r);
  if (!priority.ok()) return priority.status();
  absl::StatusOr<absl::Time> deadline = RestDeadline(r, arrival);
  if (!deadline.ok()) return deadline.status();
  a.priority = *priority;
  a.deadline = *deadline;
  std::vector<std::string> storage;  // stays empty: the inputs are raw
  absl::StatusOr<std::vector<RawInput>> raw = DecodeKServeInputs(r, &storage);
  if (!raw.ok()) return raw.status();
  absl::StatusOr<std::vector<InputView>> inputs = ValidateInputs(*std::move(raw), info.inputs);
  if (!inputs.ok()) return inputs.status();
  absl::StatusOr<std::vector<size_t>> outputs = SelectKServeOutputs(r, info.outputs);
  if (!outputs.ok()) return outputs.status();
  a.inputs = *std::move(inputs);
  a.outputs = *std::move(outputs);
  a.binary = a.request->output_binary;
  if (a.binary.empty()) a.binary.assign(a.outputs.size(), a.request->default_binary);
  return a;
}

}  // namespace

int RestServer::Infer(MHD_Connection* connection, Call* call, absl::string_view name,
                      absl::string_view version) {
  call->method = kModelInfer;
  if (metrics_ != nullptr) metrics_->RequestStarted(kModelInfer);
  // The version's handle, taken here and kept by the task until it is
  // answered; a refusal is logged under it, or under the only model served.
  absl::StatusOr<ServableHandle> found = LookUpModel(*models_, "model name", name, version);
  const ServableHandle model = found.ok() ? *found : OnlyModel(*models_);
  const InferRecord record{metrics_, options_.access_log,
                           model ? &ServableOf(model).info() : &NoModelInfo(), clock_,
                           found.ok() ? ServableOf(model).metrics() : nullptr};
  auto fail = [&](const absl::Status& s) {
    call->answered = true;
    Record(record, *call, 0, s.code(), RunStats{});
    return QueueAnswer(connection, ErrorAnswer(s));
  };
  if (stopping_.load()) {
    return fail(absl::UnavailableError("the server is shutting down; retry elsewhere"));
  }
  if (!found.ok()) {
    // The body is still decoded first: a malformed one is INVALID_ARGUMENT
    // whatever model it names, as before the lookup existed.
    return fail(Admit(connection, call->body, name, version, NoModelInfo(), found.status(),
                      call->start)
                    .status());
  }
  ModelServable& servable = ServableOf(model);
  if (absl::Status s = CheckQueueRoom(servable.batcher()); !s.ok()) return fail(s);
  absl::StatusOr<Admitted> admitted = Admit(connection, call->body, name, version,
                                            servable.info(), absl::OkStatus(), call->start);
  std::string().swap(call->body);  // the request holds its own copy now
  if (!admitted.ok()) return fail(admitted.status());
  auto task = std::make_unique<RestInferTask>(
      this, connection, call, std::move(admitted->request), std::move(admitted->inputs),
      std::move(admitted->outputs), std::move(admitted->binary), model, record,
      admitted->priority, admitted->deadline);
  // Suspended before the batcher can answer it, so that the resume follows.
  call->submitted = true;
  Suspended();
  MHD_suspend_connection(connection);
  std::unique_ptr<BatchTask> owned = std::move(task);
  if (absl::Status s = servable.batcher().Submit(&owned); !s.ok()) {
    static_cast<RestInferTask*>(owned.get())->Abort(s);
  }
  return MHD_YES;
}

}  // namespace metalserve
