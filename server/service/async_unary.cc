#include "server/service/async_unary.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace metalserve {

absl::StatusOr<GrpcApi> ParseGrpcApi(absl::string_view text, int cores) {
  if (text == "callback") return GrpcApi::kCallback;
  if (text == "async") return GrpcApi::kAsync;
  if (text == "auto") return AutoGrpcApi(cores);
  return absl::InvalidArgumentError(
      absl::StrCat("grpc_api must be auto, callback or async, got '", text, "'"));
}

GrpcApi AutoGrpcApi(int cores) {
  return cores >= kAsyncMinCores ? GrpcApi::kAsync : GrpcApi::kCallback;
}

absl::string_view GrpcApiName(GrpcApi api) {
  return api == GrpcApi::kAsync ? "async" : "callback";
}

void AsyncUnaryCall::Finish(const grpc::Status& status) {
  if (status.ok()) {
    writer_.Finish(response_, status, &answered_);
  } else {
    writer_.FinishWithError(status, &answered_);
  }
}

int AsyncUnaryServer::QueuesFor(int threads) {
  return threads > 0 ? threads : kDefaultQueues;
}

AsyncUnaryServer::AsyncUnaryServer(grpc::ServerBuilder* builder, int queues,
                                   std::vector<AsyncUnaryMethod> methods)
    : methods_(std::move(methods)) {
  for (int i = 0; i < queues; ++i) {
    queues_.push_back(builder->AddCompletionQueue());
    poller_of_.push_back(&pollers_.emplace_back());
  }
}

AsyncUnaryServer::~AsyncUnaryServer() { Join(); }

void AsyncUnaryServer::Start() {
  for (int q = 0; q < queues(); ++q) threads_.emplace_back([this, q] { Poll(q); });
}

void AsyncUnaryServer::Stop() {
  for (Poller& p : pollers_) {
    std::lock_guard<std::mutex> lock(p.mu);
    p.stopping = true;
  }
}

void AsyncUnaryServer::Join() {
  if (joined_) return;
  joined_ = true;
  Stop();
  for (auto& q : queues_) q->Shutdown();
  if (threads_.empty()) {
    // Never started: nothing was asked for, so the queues hold no call.
    for (auto& q : queues_) {
      void* tag = nullptr;
      bool ok = false;
      while (q->Next(&tag, &ok)) {
      }
    }
  }
  for (std::thread& t : threads_) t.join();
}

void AsyncUnaryServer::Ask(int method, int queue) {
  auto* call = new AsyncUnaryCall(method, queue);
  // Before the call starts: gRPC then reports its end (kDone) and
  // IsCancelled() reads the cancellation while it runs.
  call->context_.AsyncNotifyWhenDone(&call->done_);
  grpc::ServerCompletionQueue* cq = queues_[queue].get();
  methods_[method].request(&call->context_, &call->request_, &call->writer_, cq,
                           &call->arrived_);
}

void AsyncUnaryServer::Poll(int queue) {
  grpc::ServerCompletionQueue* cq = queues_[queue].get();
  Poller& poller = *poller_of_[queue];
  {
    std::lock_guard<std::mutex> lock(poller.mu);
    for (int m = 0; !poller.stopping && m < static_cast<int>(methods_.size()); ++m) {
      for (int i = 0; i < kWaitingCalls; ++i) Ask(m, queue);
    }
  }
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) {
    const auto* event = static_cast<const AsyncUnaryCall::Event*>(tag);
    AsyncUnaryCall* call = event->call;
    if (event->kind != AsyncUnaryCall::Event::kArrived) {
      if (call->Release()) delete call;
      continue;
    }
    // Refused by a server shutting down: the call never started, so no
    // other event of it will come.
    if (!ok) {
      delete call;
      continue;
    }
    std::lock_guard<std::mutex> lock(poller.mu);
    if (poller.stopping) {
      // Its answer could reach a queue already shut down, which gRPC aborts
      // on: cancelled unanswered, freed at its kDone.
      call->context_.TryCancel();
      if (call->Release()) delete call;
      continue;
    }
    Ask(call->method_, queue);
    methods_[call->method_].handle(call);
  }
}

}  // namespace metalserve
