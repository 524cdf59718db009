// The Open Inference Protocol (KServe v2) gRPC service,
// inference.GRPCInferenceService, beside the native API and sharing its
// batcher, runner and metrics.
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
// ModelStatistics reports counts and cumulative times kept by this service
// (requests of the native API are not counted there).
//
// The tensor decoding and encoding live in kserve_codec.h, the statistics in
// kserve_statistics.h.
//
// Ownership: does not own the runner, batcher or metrics; they must outlive
// the gRPC server the service is registered with. Owns its statistics.
// Thread-safety: the handlers are called concurrently by gRPC; SetReady() may
// be called from any thread. Destruction: nothing to stop; the gRPC server
// must have been shut down first (its tasks point into the service).
#ifndef METALSERVE_SERVER_SERVICE_KSERVE_SERVICE_H_
#define METALSERVE_SERVER_SERVICE_KSERVE_SERVICE_H_

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/batcher/batcher.h"
#include "common/clock.h"
#include "common/tensor.h"
#include "server/metrics/metrics.h"
#include "server/runtime/runner.h"
#include "server/service/access_log.h"
#include "server/service/kserve_statistics.h"

namespace metalserve {

// ModelInfer takes its body as raw bytes (see raw_call.h): a full queue is
// refused before the body is parsed, a body that does not parse is answered
// INVALID_ARGUMENT and counted.
class KServeService final
    : public inference::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
          inference::GRPCInferenceService::CallbackService> {
 public:
  // `metrics` and `access_log` may be null; `clock` null means the real
  // clock. Starts not ready.
  KServeService(Runner* runner, Batcher* batcher, Metrics* metrics,
                Clock* clock, std::string server_version,
                AccessLog* access_log = nullptr);

  void SetReady(bool ready) { ready_.store(ready); }
  bool ready() const { return ready_.load(); }
  // See InferenceService::MarkCutOff.
  void MarkCutOff() { cut_off_.store(true); }
  // A compressed body (--accept_compression) is inflated up to this many
  // bytes (inflate_body.h). Set before the server starts. Default 64 MiB.
  void set_max_request_bytes(int64_t bytes) { max_request_bytes_ = bytes; }

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
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ModelConfig(
      grpc::CallbackServerContext* context,
      const inference::ModelConfigRequest* request,
      inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(
      grpc::CallbackServerContext* context,
      const inference::ModelStatisticsRequest* request,
      inference::ModelStatisticsResponse* response) override;

 private:
  // OK, or NOT_FOUND naming `field` when `name`/`version` are not this
  // server's model (empty matches).
  absl::Status CheckModel(absl::string_view name_field, absl::string_view name,
                          absl::string_view version) const;
  // Runs `fill` and finishes the call, with metrics for `method`.
  template <typename Fill>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                   absl::string_view method, Fill fill);

  Runner* const runner_;
  Batcher* const batcher_;
  Metrics* const metrics_;
  Clock* const clock_;
  const std::string server_version_;
  AccessLog* const access_log_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> cut_off_{false};
  int64_t max_request_bytes_ = int64_t{64} << 20;
  KServeStatistics stats_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_KSERVE_SERVICE_H_
