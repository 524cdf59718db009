#include "server/service/async_unary.h"

#include <exception>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

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
  if (finished_.exchange(true)) return;
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
  for (int i = 0; i < queues; ++i) queues_.push_back(builder->AddCompletionQueue());
}

AsyncUnaryServer::~AsyncUnaryServer() { Join(); }

void AsyncUnaryServer::Start() {
  // Asked for here, not by the pollers, so that they are counted before
  // Start returns: a Join right after must not find none and shut a queue
  // down before a poller asks on it.
  for (int q = 0; q < queues(); ++q) {
    for (int m = 0; m < static_cast<int>(methods_.size()); ++m) {
      for (int i = 0; i < kWaitingCalls; ++i) Ask(m, q);
    }
  }
  for (int q = 0; q < queues(); ++q) threads_.emplace_back([this, q] { Poll(q); });
}

bool AsyncUnaryServer::AwaitNoCalls(absl::Time deadline) {
  absl::MutexLock l(&calls_mu_);
  auto none = [this]() ABSL_SHARED_LOCKS_REQUIRED(calls_mu_) { return calls_ == 0; };
  return calls_mu_.AwaitWithDeadline(absl::Condition(&none), deadline);
}

void AsyncUnaryServer::Join() {
  if (joined_) return;
  joined_ = true;
  // No operation may start on a queue once it is shut down, so every call
  // is answered and freed first, while the pollers still run. With none
  // left no poller asks for another (it asks only when one arrives).
  while (!AwaitNoCalls(absl::Now() + absl::Seconds(10))) {
    absl::MutexLock l(&calls_mu_);
    LOG(WARNING) << "shutdown: " << calls_
                 << " Predict/ModelInfer call(s) still asked for or unanswered; waiting";
  }
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

void AsyncUnaryServer::Free(AsyncUnaryCall* call) {
  delete call;
  absl::MutexLock l(&calls_mu_);
  --calls_;
}

void AsyncUnaryServer::Ask(int method, int queue) {
  {
    absl::MutexLock l(&calls_mu_);
    ++calls_;
  }
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
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) {
    const auto* event = static_cast<const AsyncUnaryCall::Event*>(tag);
    AsyncUnaryCall* call = event->call;
    if (event->kind != AsyncUnaryCall::Event::kArrived) {
      if (call->Release()) Free(call);
      continue;
    }
    // Refused by a server shutting down: the call never started, so no
    // other event of it will come.
    if (!ok) {
      Free(call);
      continue;
    }
    Ask(call->method_, queue);
    // gRPC's callback API answers a handler that throws UNKNOWN; so does
    // this (the handlers throw only where an allocation fails, before they
    // hand the call on).
    try {
      methods_[call->method_].handle(call);
    } catch (const std::exception& e) {
      LOG(ERROR) << "Predict/ModelInfer handler threw: " << e.what();
      call->Finish(grpc::Status(grpc::StatusCode::UNKNOWN,
                                absl::StrCat("the server failed: ", e.what())));
    }
  }
}

}  // namespace metalserve
