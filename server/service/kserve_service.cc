#include "server/service/kserve_service.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "common/status_macros.h"
#include "proto/dtype/dtype_map.h"
#include "server/service/infer_task.h"
#include "server/service/kserve_codec.h"
#include "server/service/inflate_body.h"
#include "server/service/raw_call.h"
#include "server/service/response_writer.h"
#include "server/service/rpc_task.h"
#include "server/service/status_util.h"
#include "server/service/tensor_codec.h"

namespace metalserve {

using inference::ModelInferRequest;

namespace {

constexpr absl::string_view kModelInfer = "ModelInfer";
constexpr absl::string_view kPlatform = kKServePlatform;

// A ModelInfer request in flight. Owned by the batcher, then the batch;
// finishes its RPC exactly once.
class KServeTask final : public RpcInferTask {
 public:
  // `storage` holds bytes converted from typed contents that `inputs` may
  // point into; moving the vector keeps its elements where they are.
  KServeTask(const UnaryCall& call, std::unique_ptr<SlicedModelInferRequest> request,
             grpc::ByteBuffer* response, std::vector<std::string> storage,
             std::vector<SharedMemoryRegions::Bytes> shared,
             std::vector<InputView> inputs, std::vector<size_t> outputs,
             ServableHandle model, Clock* clock, const std::atomic<bool>* cut_off)
      : RpcInferTask(call, std::move(inputs), clock, cut_off),
        metrics_(call.metrics),
        request_(std::move(request)),
        response_bytes_(response),
        storage_(std::move(storage)),
        shared_(std::move(shared)),
        outputs_(std::move(outputs)),
        model_(std::move(model)),
        stats_(&ServableOf(model_).kserve_statistics()) {
    set_model_metrics(ServableOf(model_).metrics());
  }

  void Finish(absl::StatusOr<std::vector<Tensor>> outputs,
              const RunStats& stats) override {
    if (!outputs.ok()) {
      Complete(outputs.status(), stats);
      return;
    }
    // A region whose object shrank while the batch read it gave zeros
    // (shared_memory.h): the outputs are not this request's.
    for (const SharedMemoryRegions::Bytes& bytes : shared_) {
      if (bytes.Truncated()) {
        LOG_EVERY_T(WARNING, 1) << "shared memory: region '"
                                << absl::CHexEscape(ClientText(bytes.region()))
                                << "' was truncated by its owner while a request read it; "
                                   "zeros read, the request refused, the region refuses "
                                   "further requests until registered again";
        if (metrics_ != nullptr) metrics_->SharedMemoryTruncated();
        Complete(absl::InvalidArgumentError(absl::StrCat(
                     "shared-memory region '", ClientText(bytes.region()),
                     "' was truncated by its owner while this request was read")),
                 stats);
        return;
      }
    }
    // Written straight into the response's slice (response_writer.h).
    ResponseFields fields = ServedResponseFields(ServableOf(model_).info(), stats);
    fields.id = request_->skeleton.id();
    Complete(WriteModelInferResponse(fields, *outputs, outputs_, response_bytes_), stats);
  }

 private:
  void OnComplete(const absl::Status& status, const RunStats& run, absl::Time now,
                  absl::Duration latency) override {
    if (status.ok()) {
      stats_->RecordSuccess(rows(), latency, run.queue_time, run.compute_time, now);
    } else {
      stats_->RecordFailure(latency);
    }
  }

  Metrics* const metrics_;  // may be null
  const std::unique_ptr<SlicedModelInferRequest> request_;  // the inputs' bytes
  grpc::ByteBuffer* const response_bytes_;
  const std::vector<std::string> storage_;
  const std::vector<SharedMemoryRegions::Bytes> shared_;  // inputs' regions, held mapped
  const std::vector<size_t> outputs_;
  const ServableHandle model_;  // released when the task is destroyed
  KServeStatistics* const stats_;  // model_'s
};

}  // namespace

KServeService::KServeService(const ModelLookup* models, ModelRepository* repository,
                             Metrics* metrics, Clock* clock, std::string server_version,
                             AccessLog* access_log, HeldBytesBudget* held_bytes,
                             GrpcApi api)
    : models_(models),
      repository_(repository),
      metrics_(metrics),
      clock_(clock != nullptr ? clock : Clock::RealClock()),
      server_version_(std::move(server_version)),
      access_log_(access_log),
      held_bytes_(held_bytes) {
  RegisterRawUnary(inference::GRPCInferenceService::service_full_name(), "ModelInfer", api,
                   [this](UnaryCall call, const grpc::ByteBuffer* body,
                          grpc::ByteBuffer* response) {
                     return ServeModelInfer(call, body, response);
                   });
}

grpc::ServerUnaryReactor* KServeService::ServerLive(
    grpc::CallbackServerContext* context, const inference::ServerLiveRequest*,
    inference::ServerLiveResponse* response) {
  return Answer(context, "ServerLive", [&] {
    response->set_live(true);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::ServerReady(
    grpc::CallbackServerContext* context, const inference::ServerReadyRequest*,
    inference::ServerReadyResponse* response) {
  return Answer(context, "ServerReady", [&] {
    response->set_ready(ready());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::ModelReady(
    grpc::CallbackServerContext* context, const inference::ModelReadyRequest* request,
    inference::ModelReadyResponse* response) {
  return Answer(context, "ModelReady", [&] {
    absl::StatusOr<ServableHandle> model =
        LookUpModel(*models_, "name", request->name(), request->version());
    if (model.ok()) response->set_ready(ready());
    return model.status();
  });
}

grpc::ServerUnaryReactor* KServeService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  return Answer(context, "ServerMetadata", [&] {
    response->set_name("metalserve");
    response->set_version(server_version_);
    response->add_extensions("model_configuration");
    response->add_extensions("statistics");
    response->add_extensions("model_repository");
    if (shared_memory_access_ != SharedMemoryAccess::kOff) {
      response->add_extensions("system_shared_memory");
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  return Answer(context, "ModelMetadata", [&] {
    absl::StatusOr<ServableHandle> model =
        LookUpModel(*models_, "name", request->name(), request->version());
    if (!model.ok()) return model.status();
    const ModelInfo& info = ServableOf(*model).info();
    response->set_name(info.name);
    response->add_versions(info.version);
    response->set_platform(std::string(kPlatform));
    auto add = [](const TensorSpec& spec,
                  inference::ModelMetadataResponse::TensorMetadata* t) {
      t->set_name(spec.name);
      t->set_datatype(std::string(KServeDatatype(spec.dtype)));
      for (int64_t d : spec.shape) t->add_shape(d);
    };
    for (const auto& spec : info.inputs) add(spec, response->add_inputs());
    for (const auto& spec : info.outputs) add(spec, response->add_outputs());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  return Answer(context, "ModelConfig", [&] {
    absl::StatusOr<ServableHandle> model =
        LookUpModel(*models_, "name", request->name(), request->version());
    if (!model.ok()) return model.status();
    ModelServable& servable = ServableOf(*model);
    *response->mutable_config() =
        KServeModelConfig(servable.info(), servable.batcher().options().max_batch_size);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::ModelStatistics(
    grpc::CallbackServerContext* context,
    const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  return Answer(context, "ModelStatistics", [&] {
    if (request->name().empty() && request->version().empty()) {
      for (const ServableHandle& h : models_->Served()) {
        ServableOf(h).kserve_statistics().AddTo(ServableOf(h).info(), response);
      }
      return absl::OkStatus();
    }
    absl::StatusOr<ServableHandle> model =
        LookUpModel(*models_, "name", request->name(), request->version());
    if (!model.ok()) return model.status();
    ServableOf(*model).kserve_statistics().AddTo(ServableOf(*model).info(), response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::ServeModelInfer(UnaryCall call,
                                                         const grpc::ByteBuffer* body,
                                                         grpc::ByteBuffer* response) {
  const absl::Time start = clock_->TimeNow();
  if (metrics_ != nullptr) metrics_->RequestStarted(kModelInfer);
  call.method = kModelInfer;
  call.metrics = metrics_;
  call.start = start;
  grpc::ServerUnaryReactor* const reactor = call.reactor;
  ServableHandle model;  // once looked up; refusals are counted in its statistics
  auto fail = [&](const absl::Status& status) {
    const absl::Time now = clock_->TimeNow();
    if (!model) model = OnlyModel(*models_);
    if (model) ServableOf(model).kserve_statistics().RecordFailure(now - start);
    if (access_log_ != nullptr) {
      call.access_log = access_log_;
      call.model = model ? &ServableOf(model).info() : &NoModelInfo();
    }
    return FinishInHandler(call, status, now);
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
  // raw_input_contents stay in gRPC's slices (sliced_request.h); a body the
  // walk does not take, or one over the held-bytes budget, is parsed (copied)
  // the ordinary way, which also answers a malformed one.
  auto request = std::make_unique<SlicedModelInferRequest>();
  const std::vector<std::vector<absl::string_view>>* raw_pieces = nullptr;
  if (ParseSlicedModelInferRequest(*bytes, held_bytes_, request.get())) {
    bytes->Clear();
    raw_pieces = &request->raw_input_contents;
  } else {
    request = std::make_unique<SlicedModelInferRequest>();
    if (absl::Status s = ParseRequestBody(bytes, &request->skeleton); !s.ok()) return fail(s);
  }
  const ModelInferRequest& message = request->skeleton;
  absl::StatusOr<ServableHandle> found =
      LookUpModel(*models_, "model_name", message.model_name(), message.model_version());
  if (!found.ok()) return fail(found.status());
  model = *std::move(found);
  ModelServable& servable = ServableOf(model);
  const ModelInfo& info = servable.info();
  call.model_metrics = servable.metrics();  // refusals from here on count for it
  // A full queue refuses before the contents are converted.
  if (absl::Status s = CheckQueueRoom(servable.batcher()); !s.ok()) return fail(s);
  std::vector<std::string> storage;
  SharedMemoryInputs shared;
  if (NamesSharedMemory(message)) {
    absl::StatusOr<SharedMemoryRegions*> regions = SharedMemoryFor(*call.context);
    if (regions.ok()) {
      shared.regions = *regions;
    } else {
      shared.refusal = regions.status();
    }
  }
  absl::StatusOr<std::vector<RawInput>> raw =
      DecodeKServeInputs(message, &storage, raw_pieces, &shared);
  if (!raw.ok()) return fail(raw.status());
  absl::StatusOr<std::vector<InputView>> inputs = ValidateInputs(*std::move(raw), info.inputs);
  if (!inputs.ok()) return fail(inputs.status());
  absl::StatusOr<std::vector<size_t>> outputs = SelectKServeOutputs(message, info.outputs);
  if (!outputs.ok()) return fail(outputs.status());

  absl::StatusOr<int> priority = KServePriority(message);
  if (!priority.ok()) return fail(priority.status());
  auto infer = std::make_unique<KServeTask>(
      call, std::move(request), response, std::move(storage), std::move(shared.views),
      *std::move(inputs),
      *std::move(outputs), model, clock_, &cut_off_);
  infer->set_access_log(access_log_, &info);
  infer->set_priority(*priority);
  std::unique_ptr<BatchTask> task = std::move(infer);
  absl::Status admitted = servable.batcher().Submit(&task);
  if (!admitted.ok()) return fail(admitted);
  return reactor;
}

}  // namespace metalserve
