// WithRawUnaryMethod<Base>: a generated gRPC service class (Base) with one
// raw unary method (request and response as grpc::ByteBuffer) registered
// when the service is made, for gRPC's callback API or for completion
// queues (GrpcApi, async_unary.h): what the generated
// WithRawCallbackMethod_X and WithRawMethod_X do, chosen at run time. The
// same `serve` function answers the method on either API; it gets a
// UnaryCall with the context and the reactor or the async call set.
// InferenceService (Predict) and KServeService (ModelInfer) derive from it.
//
// Thread-safety: register in the service's constructor; serve is called
// concurrently by gRPC or the pollers.
#ifndef METALSERVE_SERVER_SERVICE_RAW_UNARY_METHOD_H_
#define METALSERVE_SERVER_SERVICE_RAW_UNARY_METHOD_H_

#include <functional>
#include <utility>

#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "server/service/async_unary.h"
#include "server/service/raw_call.h"
#include "server/service/rpc_task.h"

namespace metalserve {

template <typename Base>
class WithRawUnaryMethod : public Base {
 public:
  // The method on completion queues, for an AsyncUnaryServer; only for a
  // service registered with GrpcApi::kAsync.
  AsyncUnaryMethod AsyncMethod() {
    return {.request =
                [this](grpc::ServerContext* context, grpc::ByteBuffer* body,
                       grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>* writer,
                       grpc::ServerCompletionQueue* queue, void* tag) {
                  this->RequestAsyncUnary(index_, context, body, writer, queue, queue, tag);
                },
            .handle =
                [this](AsyncUnaryCall* call) {
                  serve_({.context = call->context(), .async = call}, call->request(),
                         call->response());
                }};
  }

 protected:
  // Answers one call; returns the call's reactor (null for an async call).
  using Serve = std::function<grpc::ServerUnaryReactor*(
      UnaryCall call, const grpc::ByteBuffer* body, grpc::ByteBuffer* response)>;

  // Registers `method` of `service` (full names, as MethodIndex takes them)
  // for `api`, answered by `serve`. Once, in the derived constructor.
  void RegisterRawUnary(absl::string_view service, absl::string_view method, GrpcApi api,
                        Serve serve) {
    index_ = MethodIndex(service, method);
    serve_ = std::move(serve);
    if (api == GrpcApi::kAsync) {
      this->MarkMethodRaw(index_);
      return;
    }
    this->MarkMethodRawCallback(
        index_, new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                    [this](grpc::CallbackServerContext* context, const grpc::ByteBuffer* body,
                           grpc::ByteBuffer* response) {
                      return serve_({.context = context, .reactor = context->DefaultReactor()},
                                    body, response);
                    }));
  }

 private:
  int index_ = -1;
  Serve serve_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_RAW_UNARY_METHOD_H_
