#include "server/service/inference_service.h"

#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/dtype/dtype_map.h"
#include "server/service/infer_task.h"
#include "server/service/inflate_body.h"
#include "server/service/raw_call.h"
#include "server/service/response_writer.h"
#include "server/service/rpc_task.h"
#include "server/service/status_util.h"
#include "server/service/tensor_codec.h"

namespace metalserve {

using metalserve::v1::GetModelMetadataRequest;
using metalserve::v1::GetModelMetadataResponse;
using metalserve::v1::PredictRequest;

namespace {

constexpr absl::string_view kPredict = "Predict";

// A native Predict request in flight. Owns the parsed request (its inputs
// are views into it); writes the response into gRPC's response buffer
// before finishing the call.
class PredictTask final : public RpcInferTask {
 public:
  PredictTask(const UnaryCall& call, std::unique_ptr<SlicedPredictRequest> request,
              grpc::ByteBuffer* response, std::vector<InputView> inputs,
              ServableHandle model, Clock* clock, const std::atomic<bool>* cut_off)
      : RpcInferTask(call, std::move(inputs), clock, cut_off),
        request_(std::move(request)),
        response_bytes_(response),
        model_(std::move(model)) {
    set_model_metrics(ServableOf(model_).metrics());
  }

  void Finish(absl::StatusOr<std::vector<Tensor>> outputs,
              const RunStats& stats) override {
    if (!outputs.ok()) {
      Complete(outputs.status(), stats);
      return;
    }
    // Written straight into the response's slice (response_writer.h).
    Complete(WritePredictResponse(ServedResponseFields(ServableOf(model_).info(), stats),
                                  *outputs, response_bytes_),
             stats);
  }

 private:
  const std::unique_ptr<SlicedPredictRequest> request_;  // the inputs' bytes
  grpc::ByteBuffer* const response_bytes_;
  const ServableHandle model_;  // released when the task is destroyed
};

}  // namespace

InferenceService::InferenceService(const ModelLookup* models,
                                   Metrics* metrics, Clock* clock,
                                   std::string server_version,
                                   AccessLog* access_log,
                                   HeldBytesBudget* held_bytes, GrpcApi api)
    : models_(models),
      metrics_(metrics),
      clock_(clock != nullptr ? clock : Clock::RealClock()),
      server_version_(std::move(server_version)),
      access_log_(access_log),
      held_bytes_(held_bytes) {
  RegisterRawUnary(metalserve::v1::Inference::service_full_name(), "Predict", api,
                   [this](UnaryCall call, const grpc::ByteBuffer* body,
                          grpc::ByteBuffer* response) {
                     return ServePredict(call, body, response);
                   });
}

grpc::ServerUnaryReactor* InferenceService::ServePredict(UnaryCall call,
                                                         const grpc::ByteBuffer* body,
                                                         grpc::ByteBuffer* response) {
  const absl::Time start = clock_->TimeNow();
  if (metrics_ != nullptr) metrics_->RequestStarted(kPredict);
  call.method = kPredict;
  call.metrics = metrics_;
  call.start = start;
  grpc::ServerUnaryReactor* const reactor = call.reactor;
  ServableHandle logged;  // the model a refusal is logged under
  auto fail = [&](const absl::Status& status) {
    if (access_log_ != nullptr && call.model == nullptr) {
      logged = OnlyModel(*models_);
      call.access_log = access_log_;
      call.model = logged ? &ServableOf(logged).info() : &NoModelInfo();
    }
    return FinishInHandler(call, status, clock_->TimeNow());
  };

  // With one model only (--model), a full queue refuses before the body is
  // parsed; otherwise after the model name is read (below).
  if (const ServableHandle sole = models_->SoleModel()) {
    if (absl::Status s = CheckQueueRoom(ServableOf(sole).batcher()); !s.ok()) {
      call.model_metrics = ServableOf(sole).metrics();  // its own queue refused it
      return fail(s);
    }
  }
  // gRPC never reads the body again; parsing empties it (see raw_call.h).
  grpc::ByteBuffer* bytes = const_cast<grpc::ByteBuffer*>(body);
  if (absl::Status s = InflateRequestBody(bytes, max_request_bytes_); !s.ok()) return fail(s);
  // The tensor bytes stay in gRPC's slices (sliced_request.h); a body the
  // walk does not take, or one over the held-bytes budget, is parsed (copied)
  // the ordinary way, which also answers a malformed one.
  auto request = std::make_unique<SlicedPredictRequest>();
  if (ParseSlicedPredictRequest(*bytes, held_bytes_, request.get())) {
    bytes->Clear();
  } else {
    request = std::make_unique<SlicedPredictRequest>();
    if (absl::Status s = ParseRequestBody(bytes, &request->skeleton); !s.ok()) return fail(s);
  }
  // The handle is taken here and kept by the task until it is answered.
  absl::StatusOr<ServableHandle> model =
      LookUpModel(*models_, "model_name", request->skeleton.model_name(),
                  request->skeleton.model_version());
  if (!model.ok()) return fail(model.status());
  ModelServable& servable = ServableOf(*model);
  const ModelInfo& info = servable.info();
  call.access_log = access_log_;
  call.model = &info;
  call.model_metrics = servable.metrics();  // refusals from here on count for it
  // A full queue refuses before the tensors are decoded.
  if (absl::Status s = CheckQueueRoom(servable.batcher()); !s.ok()) return fail(s);
  absl::StatusOr<std::vector<InputView>> inputs =
      ValidateInputs(DecodeInputs(*request), info.inputs);
  if (!inputs.ok()) return fail(inputs.status());

  const int predict_priority = request->skeleton.priority();
  auto predict = std::make_unique<PredictTask>(call, std::move(request), response,
                                              *std::move(inputs), *model, clock_, &cut_off_);
  predict->set_access_log(access_log_, &info);
  predict->set_priority(predict_priority);
  std::unique_ptr<BatchTask> task = std::move(predict);
  absl::Status admitted = servable.batcher().Submit(&task);
  if (!admitted.ok()) return fail(admitted);
  return reactor;
}

namespace {

// How the device was chosen, with --device=auto's measurement table.
void FillDeviceChoice(const DeviceChoiceInfo& choice, metalserve::v1::DeviceChoice* out) {
  out->set_requested(choice.requested);
  out->set_reason(choice.reason);
  for (const DeviceChoiceInfo::Timing& t : choice.timings) {
    metalserve::v1::DeviceTiming* row = out->add_timings();
    row->set_device(t.device);
    row->set_batch_size(t.batch_size);
    row->set_seconds(absl::ToDoubleSeconds(t.forward));
  }
  for (const std::string& s : choice.skipped) out->add_skipped(s);
}

}  // namespace

grpc::ServerUnaryReactor* InferenceService::GetModelMetadata(
    grpc::CallbackServerContext* context, const GetModelMetadataRequest* request,
    GetModelMetadataResponse* response) {
  constexpr absl::string_view kMethod = "GetModelMetadata";
  const absl::Time start = clock_->TimeNow();
  if (metrics_ != nullptr) metrics_->RequestStarted(kMethod);
  absl::StatusOr<ServableHandle> model =
      LookUpModel(*models_, "model_name", request->model_name(), request->model_version());
  const absl::Status status = model.status();
  if (status.ok()) {
    ModelServable& servable = ServableOf(*model);
    const ModelInfo& info = servable.info();
    response->set_model_name(info.name);
    response->set_model_version(info.version);
    response->set_device(info.device);
    auto add = [](const TensorSpec& s, metalserve::v1::TensorSpec* out) {
      out->set_name(s.name);
      out->set_dtype(ProtoDataType(s.dtype));
      for (int64_t d : s.shape) out->add_shape(d);
    };
    for (const auto& s : info.inputs) add(s, response->add_inputs());
    for (const auto& s : info.outputs) add(s, response->add_outputs());
    const BatcherOptions& b = servable.batcher().options();
    response->set_max_batch_size(b.max_batch_size);
    for (int64_t s : b.allowed_batch_sizes) response->add_allowed_batch_sizes(s);
    response->set_max_queue_delay_us(absl::ToInt64Microseconds(b.max_queue_delay));
    response->set_max_queue_size(b.max_queue_size);
    response->set_precision(info.precision);
    response->set_optimization(info.optimization);
    response->set_optimization_reason(info.optimization_reason);
    response->set_torch_version(info.torch_version);
    response->set_server_version(server_version_);
    FillDeviceChoice(info.device_choice, response->mutable_device_choice());
  }
  const UnaryCall call{.context = context, .reactor = context->DefaultReactor(),
                       .method = kMethod, .metrics = metrics_, .start = start};
  return FinishInHandler(call, status, clock_->TimeNow());
}

}  // namespace metalserve
