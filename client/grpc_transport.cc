#include "client/grpc_transport.h"

#include <chrono>
#include <utility>

#include "grpcpp/client_context.h"
#include "inference/grpc_service.grpc.pb.h"
#include "metalserve/v1/inference.grpc.pb.h"

namespace metalserve::client {
namespace {

int64_t RowsOf(const google::protobuf::RepeatedField<int64_t>& shape) {
  return shape.empty() ? 1 : shape[0];
}

void SetDeadline(grpc::ClientContext& ctx, absl::Duration deadline) {
  if (deadline == absl::InfiniteDuration()) return;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   absl::ToChronoNanoseconds(deadline));
}

CallResult ErrorOrOk(const grpc::Status& s) {
  CallResult r;
  r.code = s.error_code();
  if (!s.ok()) r.message = s.error_message();
  return r;
}

// Stub type S, request Req, response Resp; `call` starts the async RPC and
// `figures` reads the server-side figures of a successful response.
template <typename Stub, typename Req, typename Resp>
class GrpcTransport : public CallTransport {
 public:
  using AsyncCall = void (*)(Stub&, grpc::ClientContext*, const Req*, Resp*,
                             std::function<void(grpc::Status)>);
  using Figures = void (*)(const Resp&, CallResult&);

  GrpcTransport(std::vector<std::unique_ptr<Stub>> stubs, Req request, int64_t rows,
                AsyncCall call, Figures figures)
      : stubs_(std::move(stubs)), request_(std::move(request)), rows_(rows),
        call_(call), figures_(figures) {}

  size_t lanes() const override { return stubs_.size(); }
  int64_t rows_per_request() const override { return rows_; }

  void Start(size_t lane, absl::Duration deadline, CallDone done) override {
    struct Pending {
      grpc::ClientContext ctx;
      Resp response;
      CallDone done;
    };
    auto* p = new Pending;
    p->done = std::move(done);
    SetDeadline(p->ctx, deadline);
    call_(*stubs_[lane % stubs_.size()], &p->ctx, &request_, &p->response,
          [this, p](grpc::Status s) {
            CallResult r = ErrorOrOk(s);
            if (s.ok()) figures_(p->response, r);
            CallDone done = std::move(p->done);
            delete p;
            done(std::move(r));
          });
  }

 private:
  const std::vector<std::unique_ptr<Stub>> stubs_;
  const Req request_;
  const int64_t rows_;
  const AsyncCall call_;
  const Figures figures_;
};

}  // namespace

std::unique_ptr<CallTransport> NewPredictTransport(
    std::vector<std::shared_ptr<grpc::Channel>> channels, v1::PredictRequest request) {
  std::vector<std::unique_ptr<v1::Inference::Stub>> stubs;
  for (auto& ch : channels) stubs.push_back(v1::Inference::NewStub(ch));
  const int64_t rows =
      request.inputs_size() > 0 ? RowsOf(request.inputs(0).shape()) : 1;
  using T = GrpcTransport<v1::Inference::Stub, v1::PredictRequest, v1::PredictResponse>;
  return std::make_unique<T>(
      std::move(stubs), std::move(request), rows,
      [](v1::Inference::Stub& stub, grpc::ClientContext* ctx,
         const v1::PredictRequest* req, v1::PredictResponse* resp,
         std::function<void(grpc::Status)> done) {
        stub.async()->Predict(ctx, req, resp, std::move(done));
      },
      [](const v1::PredictResponse& resp, CallResult& r) {
        r.queue_us = resp.queue_time_us();
        r.compute_us = resp.compute_time_us();
        r.batch_rows = resp.batch_rows();
        r.model_version = resp.model_version();
      });
}

std::unique_ptr<CallTransport> NewModelInferTransport(
    std::vector<std::shared_ptr<grpc::Channel>> channels,
    inference::ModelInferRequest request) {
  using Stub = inference::GRPCInferenceService::Stub;
  std::vector<std::unique_ptr<Stub>> stubs;
  for (auto& ch : channels) {
    stubs.push_back(inference::GRPCInferenceService::NewStub(ch));
  }
  const int64_t rows =
      request.inputs_size() > 0 ? RowsOf(request.inputs(0).shape()) : 1;
  using T = GrpcTransport<Stub, inference::ModelInferRequest,
                          inference::ModelInferResponse>;
  return std::make_unique<T>(
      std::move(stubs), std::move(request), rows,
      [](Stub& stub, grpc::ClientContext* ctx, const inference::ModelInferRequest* req,
         inference::ModelInferResponse* resp, std::function<void(grpc::Status)> done) {
        stub.async()->ModelInfer(ctx, req, resp, std::move(done));
      },
      [](const inference::ModelInferResponse& resp, CallResult& r) {
        const auto& p = resp.parameters();
        auto param = [&p](const char* key) -> int64_t {
          auto it = p.find(key);
          return it == p.end() ? 0 : it->second.int64_param();
        };
        r.queue_us = param("queue_time_us");
        r.compute_us = param("compute_time_us");
        r.batch_rows = param("batch_rows");
        r.model_version = resp.model_version();
      });
}

}  // namespace metalserve::client
