#include "server/service/inference_service.h"

#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/service/infer_task.h"
#include "server/service/status_util.h"
#include "server/service/tensor_codec.h"

namespace metalserve {

using metalserve::v1::GetModelMetadataRequest;
using metalserve::v1::GetModelMetadataResponse;
using metalserve::v1::PredictRequest;
using metalserve::v1::PredictResponse;

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const auto d = context.deadline();
  if (d >= std::chrono::system_clock::time_point::max() -
               std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(d);
}

namespace {

constexpr absl::string_view kPredict = "Predict";

// A native Predict request in flight. Owned by the batcher, then the batch;
// finishes its RPC exactly once.
class PredictTask final : public InferTask {
 public:
  PredictTask(grpc::CallbackServerContext* context,
              grpc::ServerUnaryReactor* reactor, PredictResponse* response,
              std::vector<InputView> inputs, const Runner* runner,
              Metrics* metrics, Clock* clock, absl::Time start)
      : context_(context),
        reactor_(reactor),
        response_(response),
        inputs_(std::move(inputs)),
        key_(BatchKeyOf(inputs_)),
        deadline_(DeadlineOf(*context)),
        runner_(runner),
        metrics_(metrics),
        clock_(clock),
        start_(start) {}

  int64_t rows() const override { return inputs_.front().shape[0]; }
  absl::string_view batch_key() const override { return key_; }
  absl::Time deadline() const override { return deadline_; }
  bool IsCancelled() const override { return context_->IsCancelled(); }
  const std::vector<InputView>& inputs() const override { return inputs_; }

  void Abort(const absl::Status& status) override { Done(status); }

  void Finish(absl::StatusOr<std::vector<Tensor>> outputs,
              const RunStats& stats) override {
    response_->set_queue_time_us(absl::ToInt64Microseconds(stats.queue_time));
    response_->set_compute_time_us(absl::ToInt64Microseconds(stats.compute_time));
    response_->set_batch_rows(stats.batch_rows);
    if (!outputs.ok()) {
      Done(outputs.status());
      return;
    }
    const ModelInfo& info = runner_->info();
    response_->set_model_name(info.name);
    response_->set_model_version(info.version);
    response_->set_device(info.device);
    for (Tensor& o : *outputs) {
      auto* t = response_->add_outputs();
      t->set_name(o.name);
      t->set_dtype(ToProto(o.dtype));
      for (int64_t d : o.shape) t->add_shape(d);
      *t->mutable_data() = std::move(o.data);
    }
    Done(absl::OkStatus());
  }

 private:
  void Done(const absl::Status& status) {
    if (metrics_ != nullptr) {
      metrics_->RequestFinished(kPredict, status.code(),
                                clock_->TimeNow() - start_);
    }
    // Last touch of this task's RPC: the reactor may be freed after this.
    // (DefaultReactor() must not be called twice: it re-creates the reactor.)
    reactor_->Finish(ToGrpcStatus(status));
  }

  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  PredictResponse* const response_;
  const std::vector<InputView> inputs_;
  const std::string key_;
  const absl::Time deadline_;
  const Runner* const runner_;
  Metrics* const metrics_;
  Clock* const clock_;
  const absl::Time start_;
};

}  // namespace

InferenceService::InferenceService(Runner* runner, Batcher* batcher,
                                   Metrics* metrics, Clock* clock,
                                   std::string server_version)
    : runner_(runner),
      batcher_(batcher),
      metrics_(metrics),
      clock_(clock != nullptr ? clock : Clock::RealClock()),
      server_version_(std::move(server_version)) {}

grpc::ServerUnaryReactor* InferenceService::Predict(
    grpc::CallbackServerContext* context, const PredictRequest* request,
    PredictResponse* response) {
  const absl::Time start = clock_->TimeNow();
  if (metrics_ != nullptr) metrics_->RequestStarted(kPredict);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto fail = [&](const absl::Status& status) {
    if (metrics_ != nullptr) {
      metrics_->RequestFinished(kPredict, status.code(), clock_->TimeNow() - start);
    }
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  };

  const ModelInfo& info = runner_->info();
  if (!request->model_name().empty() && request->model_name() != info.name) {
    return fail(absl::NotFoundError(absl::StrCat(
        "model_name '", request->model_name(), "' is not served here; this server serves '",
        info.name, "'")));
  }
  absl::StatusOr<std::vector<InputView>> inputs =
      ValidateInputs(DecodeInputs(*request), info.inputs);
  if (!inputs.ok()) return fail(inputs.status());

  std::unique_ptr<BatchTask> task = std::make_unique<PredictTask>(
      context, reactor, response, *std::move(inputs), runner_, metrics_, clock_, start);
  absl::Status admitted = batcher_->Submit(&task);
  if (metrics_ != nullptr) metrics_->SetQueueDepth(batcher_->queued_rows());
  if (!admitted.ok()) return fail(admitted);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::GetModelMetadata(
    grpc::CallbackServerContext* context, const GetModelMetadataRequest* request,
    GetModelMetadataResponse* response) {
  constexpr absl::string_view kMethod = "GetModelMetadata";
  const absl::Time start = clock_->TimeNow();
  if (metrics_ != nullptr) metrics_->RequestStarted(kMethod);
  const ModelInfo& info = runner_->info();
  absl::Status status;
  if (!request->model_name().empty() && request->model_name() != info.name) {
    status = absl::NotFoundError(absl::StrCat(
        "model_name '", request->model_name(), "' is not served here; this server serves '",
        info.name, "'"));
  } else {
    response->set_model_name(info.name);
    response->set_model_version(info.version);
    response->set_device(info.device);
    auto add = [](const TensorSpec& s, metalserve::v1::TensorSpec* out) {
      out->set_name(s.name);
      out->set_dtype(ToProto(s.dtype));
      for (int64_t d : s.shape) out->add_shape(d);
    };
    for (const auto& s : info.inputs) add(s, response->add_inputs());
    for (const auto& s : info.outputs) add(s, response->add_outputs());
    const BatcherOptions& b = batcher_->options();
    response->set_max_batch_size(b.max_batch_size);
    for (int64_t s : b.allowed_batch_sizes) response->add_allowed_batch_sizes(s);
    response->set_max_queue_delay_us(absl::ToInt64Microseconds(b.max_queue_delay));
    response->set_max_queue_size(b.max_queue_size);
    response->set_precision(info.precision);
    response->set_optimization(info.optimization);
    response->set_optimization_reason(info.optimization_reason);
    response->set_torch_version(info.torch_version);
    response->set_server_version(server_version_);
  }
  if (metrics_ != nullptr) {
    metrics_->RequestFinished(kMethod, status.code(), clock_->TimeNow() - start);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace metalserve
