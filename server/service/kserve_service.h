// The Open Inference Protocol (KServe v2) gRPC service,
// inference.GRPCInferenceService, beside the native API and sharing its
// model lookup (model_lookup.h) and metrics.
//
// ModelInfer accepts raw_input_contents (one entry per input) or typed
// `contents`, validates them against the model's signature with the same
// rules as the native Predict, and answers with raw_output_contents, every
// output in the model's order or only those the request names. The handler
// enqueues and returns; the executor thread finishes the RPC. Error codes are
// those of the native service (INVALID_ARGUMENT naming the field and value,
// NOT_FOUND for another model or version, UNAVAILABLE, DEADLINE_EXCEEDED,
// INTERNAL, RESOURCE_EXHAUSTED).
//
// ServerReady and ModelReady report the readiness flag set with SetReady(),
// which InferenceServer::SetServing drives together with grpc.health.v1.
// ModelStatistics reports counts and cumulative times kept per model version
// by its servable (requests of the native API are not counted there); an
// empty name reports every version served.
//
// Model repository extension (kserve_repository.cc): RepositoryIndex,
// RepositoryModelLoad and RepositoryModelUnload call the ModelRepository's
// Index, LoadModel and UnloadModel. Loads and unloads run on one worker
// thread (repository_worker.h), never on a gRPC thread; one at a time, a
// second meanwhile is refused UNAVAILABLE "another load or unload is
// running". Request `parameters` are refused with
// INVALID_ARGUMENT naming them. A server started with --model (no
// repository) lists its one model and refuses load and unload with
// FAILED_PRECONDITION.
//
// System shared-memory extension (kserve_shared_memory.cc, shared_memory.h):
// SystemSharedMemoryRegister, Status and Unregister manage the regions that
// ModelInfer inputs may name instead of carrying their bytes, for the peers
// set_shared_memory() admits; every other call of theirs is refused
// PERMISSION_DENIED. ServerMetadata lists "system_shared_memory" while
// shared memory is on.
//
// The tensor decoding and encoding live in kserve_codec.h, the statistics in
// kserve_statistics.h.
//
// Ownership: does not own the lookup, repository or metrics; they must
// outlive the gRPC server the service is registered with.
// Thread-safety: the handlers are called concurrently by gRPC; SetReady() may
// be called from any thread. Destruction: waits for a running load or unload
// (StopRepositoryControl); call that before the gRPC server shuts down, as
// the load finishes its call; the gRPC server must have been shut down
// before the destructor (its tasks point into the service).
#ifndef METALSERVE_SERVER_SERVICE_KSERVE_SERVICE_H_
#define METALSERVE_SERVER_SERVICE_KSERVE_SERVICE_H_

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "inference/grpc_service.grpc.pb.h"
#include "common/clock.h"
#include "common/tensor.h"
#include "server/metrics/metrics.h"
#include "server/repository/model_repository.h"
#include "server/service/access_log.h"
#include "server/service/async_unary.h"
#include "server/service/log_limiter.h"
#include "server/service/model_lookup.h"
#include "server/service/raw_unary_method.h"
#include "server/service/repository_worker.h"
#include "server/service/rpc_task.h"
#include "server/service/shared_memory.h"
#include "server/service/sliced_request.h"

namespace metalserve {

// ModelInfer takes its body as raw bytes (see raw_call.h): a full queue is
// refused before the body is parsed, a body that does not parse is answered
// INVALID_ARGUMENT and counted.
//
// Every method but ModelInfer through the callback API; ModelInfer through
// it or through completion queues (GrpcApi, async_unary.h), chosen when the
// service is made.
namespace kserve_internal {
using Grpc = inference::GRPCInferenceService;
// GRPCInferenceService::CallbackService without ModelInfer, which the
// constructor registers itself.
using CallbackServiceButModelInfer = Grpc::WithCallbackMethod_ServerLive<
    Grpc::WithCallbackMethod_ServerReady<Grpc::WithCallbackMethod_ModelReady<
        Grpc::WithCallbackMethod_ServerMetadata<Grpc::WithCallbackMethod_ModelMetadata<
            Grpc::WithCallbackMethod_ModelConfig<Grpc::WithCallbackMethod_ModelStatistics<
                Grpc::WithCallbackMethod_RepositoryIndex<
                    Grpc::WithCallbackMethod_RepositoryModelLoad<
                        Grpc::WithCallbackMethod_RepositoryModelUnload<
                            Grpc::WithCallbackMethod_SystemSharedMemoryStatus<
                                Grpc::WithCallbackMethod_SystemSharedMemoryRegister<
                                    Grpc::WithCallbackMethod_SystemSharedMemoryUnregister<
                                        Grpc::Service>>>>>>>>>>>>>;
}  // namespace kserve_internal

class KServeService final
    : public WithRawUnaryMethod<kserve_internal::CallbackServiceButModelInfer> {
 public:
  // `repository`, `metrics` and `access_log` may be null; `clock` null means
  // the real clock. ModelInfer's raw_input_contents are read in place from
  // gRPC's slices while `held_bytes` (not owned; null: never) has room for
  // them (sliced_request.h). Starts not ready. With `api` kAsync,
  // ModelInfer is registered as an asynchronous raw method: AsyncMethod()
  // is what an AsyncUnaryServer serves it with.
  KServeService(const ModelLookup* models, ModelRepository* repository, Metrics* metrics,
                Clock* clock, std::string server_version,
                AccessLog* access_log = nullptr, HeldBytesBudget* held_bytes = nullptr,
                GrpcApi api = GrpcApi::kCallback);

  void SetReady(bool ready) { ready_.store(ready); }
  bool ready() const { return ready_.load(); }
  // See InferenceService::MarkCutOff.
  void MarkCutOff() { cut_off_.store(true); }
  // A compressed body (--accept_compression) is inflated up to this many
  // bytes (inflate_body.h). Set before the server starts. Default 64 MiB.
  void set_max_request_bytes(int64_t bytes) { max_request_bytes_ = bytes; }
  // Shared-memory inputs for the peers `access` admits, from `regions` (not
  // owned; outlives the service; null only with kOff). Set before the
  // server starts. Default off.
  void set_shared_memory(SharedMemoryAccess access, SharedMemoryRegions* regions) {
    shared_memory_access_ = access;
    shared_memory_ = regions;
  }
  // Refuses further loads and unloads (UNAVAILABLE) and waits for the
  // running one, which answers its call. For the server's shutdown.
  void StopRepositoryControl() { control_worker_.Stop(); }

  grpc::ServerUnaryReactor* ServerLive(
      grpc::CallbackServerContext* context,
      const inference::ServerLiveRequest* request,
      inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(
      grpc::CallbackServerContext* context,
      const inference::ServerReadyRequest* request,
      inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(
      grpc::CallbackServerContext* context,
      const inference::ModelReadyRequest* request,
      inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(
      grpc::CallbackServerContext* context,
      const inference::ServerMetadataRequest* request,
      inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(
      grpc::CallbackServerContext* context,
      const inference::ModelMetadataRequest* request,
      inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelConfig(
      grpc::CallbackServerContext* context,
      const inference::ModelConfigRequest* request,
      inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(
      grpc::CallbackServerContext* context,
      const inference::ModelStatisticsRequest* request,
      inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(
      grpc::CallbackServerContext* context,
      const inference::RepositoryIndexRequest* request,
      inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelLoad(
      grpc::CallbackServerContext* context,
      const inference::RepositoryModelLoadRequest* request,
      inference::RepositoryModelLoadResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* context,
      const inference::RepositoryModelUnloadRequest* request,
      inference::RepositoryModelUnloadResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;

 private:
  // The regions a call from `context`'s peer may use, or why it may not
  // (PERMISSION_DENIED naming the flag and the peer).
  absl::StatusOr<SharedMemoryRegions*> SharedMemoryFor(
      const grpc::ServerContextBase& context) const;
  // Sets the shared-memory gauges from `regions` now.
  void RecordSharedMemory(const SharedMemoryRegions& regions);

  // ModelInfer's handler for both APIs: `call` has its context and its
  // reactor or async call; the rest is filled here. Returns the reactor.
  grpc::ServerUnaryReactor* ServeModelInfer(UnaryCall call, const grpc::ByteBuffer* body,
                                            grpc::ByteBuffer* response);
  // Runs `fill` and finishes the call, with metrics for `method`.
  template <typename Fill>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                   absl::string_view method, Fill fill);

  // RepositoryModelLoad / Unload: `parameters` is the check of the
  // request's parameters; the work goes to control_worker_.
  grpc::ServerUnaryReactor* RepositoryControl(grpc::CallbackServerContext* context,
                                              absl::string_view rpc, const std::string& model,
                                              const absl::Status& parameters, bool load);

  const ModelLookup* const models_;
  ModelRepository* const repository_;
  Metrics* const metrics_;
  Clock* const clock_;
  const std::string server_version_;
  AccessLog* const access_log_;
  HeldBytesBudget* const held_bytes_;  // shared with Predict's
  std::atomic<bool> ready_{false};
  std::atomic<bool> cut_off_{false};
  int64_t max_request_bytes_ = int64_t{64} << 20;
  SharedMemoryAccess shared_memory_access_ = SharedMemoryAccess::kOff;
  SharedMemoryRegions* shared_memory_ = nullptr;
  LogLimiter shared_memory_log_{clock_, absl::Seconds(1)};  // registrations' lines
  absl::Mutex shared_memory_metrics_mu_;  // orders RecordSharedMemory's calls
  RepositoryWorker control_worker_;  // last: stopped before the rest goes
};

template <typename Fill>
grpc::ServerUnaryReactor* KServeService::Answer(grpc::CallbackServerContext* context,
                                                absl::string_view method, Fill fill) {
  const absl::Time start = clock_->TimeNow();
  if (metrics_ != nullptr) metrics_->RequestStarted(method);
  const absl::Status status = fill();
  const UnaryCall call{.context = context, .reactor = context->DefaultReactor(),
                       .method = method, .metrics = metrics_, .start = start};
  return FinishInHandler(call, status, clock_->TimeNow());
}

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_KSERVE_SERVICE_H_
