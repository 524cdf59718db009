// The native metalserve.v1.Inference gRPC service: Predict through the
// callback API or completion queues (GrpcApi, async_unary.h),
// GetModelMetadata through the callback API.
//
// Predict looks the model version up (model_name, model_version; a
// ModelLookup, model_lookup.h) and takes a handle to it, validates the
// request against that version's signature, wraps both in a task and submits
// it to that version's batcher; the handler returns at once and the executor
// thread finishes the RPC (the task releases the handle when it is
// destroyed). Errors: INVALID_ARGUMENT for bad input (naming the field and
// value), NOT_FOUND for a model or version not served (listing what is),
// UNAVAILABLE when the queue is full or the server drains, DEADLINE_EXCEEDED
// when the deadline passes in the queue, INTERNAL when the model throws,
// RESOURCE_EXHAUSTED when a request alone does not fit on the device.
//
// Ownership: does not own the lookup or metrics; they must outlive the gRPC
// server the service is registered with. Thread-safety: the
// handlers are called concurrently by gRPC.
#ifndef METALSERVE_SERVER_SERVICE_INFERENCE_SERVICE_H_
#define METALSERVE_SERVER_SERVICE_INFERENCE_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "metalserve/v1/inference.grpc.pb.h"
#include "common/clock.h"
#include "server/metrics/metrics.h"
#include "server/service/access_log.h"
#include "server/service/async_unary.h"
#include "server/service/model_lookup.h"
#include "server/service/raw_unary_method.h"
#include "server/service/rpc_task.h"
#include "server/service/sliced_request.h"

namespace metalserve {

// Predict takes its body as raw bytes (see raw_call.h): a full queue is
// refused before the body is parsed when the server has one model
// (--model), otherwise before the tensors are decoded (the model name is
// read first, to know whose queue); a body that does not parse is answered
// INVALID_ARGUMENT and counted like any other bad request.
class InferenceService final
    : public WithRawUnaryMethod<metalserve::v1::Inference::WithCallbackMethod_GetModelMetadata<
          metalserve::v1::Inference::Service>> {
 public:
  // `metrics` and `access_log` may be null. Requests' tensor bytes are read
  // in place from gRPC's slices while `held_bytes` (not owned, shared with
  // KServe's ModelInfer; null: never) has room for them (sliced_request.h).
  // With `api` kAsync, Predict is registered as an asynchronous raw method:
  // AsyncMethod() is what an AsyncUnaryServer serves it with.
  InferenceService(const ModelLookup* models, Metrics* metrics,
                   Clock* clock, std::string server_version,
                   AccessLog* access_log = nullptr,
                   HeldBytesBudget* held_bytes = nullptr,
                   GrpcApi api = GrpcApi::kCallback);


  // Called by the server's shutdown just before gRPC cancels the calls
  // still open: they are counted as their clients see them (UNAVAILABLE).
  void MarkCutOff() { cut_off_.store(true); }
  // A compressed body (--accept_compression) is inflated up to this many
  // bytes (inflate_body.h). Set before the server starts. Default 64 MiB.
  void set_max_request_bytes(int64_t bytes) { max_request_bytes_ = bytes; }

  grpc::ServerUnaryReactor* GetModelMetadata(
      grpc::CallbackServerContext* context,
      const metalserve::v1::GetModelMetadataRequest* request,
      metalserve::v1::GetModelMetadataResponse* response) override;

 private:
  // Predict's handler for both APIs: `call` has its context and its reactor
  // or async call; the rest is filled here. Returns the reactor.
  grpc::ServerUnaryReactor* ServePredict(UnaryCall call, const grpc::ByteBuffer* body,
                                         grpc::ByteBuffer* response);

  const ModelLookup* const models_;
  Metrics* const metrics_;
  Clock* const clock_;
  const std::string server_version_;
  AccessLog* const access_log_;
  std::atomic<bool> cut_off_{false};
  int64_t max_request_bytes_ = int64_t{64} << 20;
  // Bytes of queued requests held as gRPC's slices (sliced_request.h).
  HeldBytesBudget* const held_bytes_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_INFERENCE_SERVICE_H_
