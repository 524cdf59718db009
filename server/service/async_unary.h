// AsyncUnaryServer: serves raw unary methods (Predict, ModelInfer) through
// gRPC's asynchronous API, on completion queues polled by threads the server
// owns, instead of the callback API (--grpc_api=async).
//
// Why: gRPC 1.51 runs callback-API completions on its own "nexting" threads,
// Clamp(cores / 2, 2, 16) of them, shared by every callback call. Measured
// on the GPU host (16 cores; bench/async_floor_h200.sh), an echo through
// completion queues costs 0.46-0.59x the callback echo's server CPU per
// [1,4] request and 0.69-0.95x per 602 KB request; on a 2-core machine it
// costs the same or more. The whole server measured alike (AutoGrpcApi), so
// --grpc_api=auto picks this on large hosts and the callback API on small
// ones.
//
// One call's life: a poller asks gRPC for the next call of a method on its
// queue (with kWaitingCalls asked for at once per method and queue). When
// one arrives the poller asks for the next, then runs the method's handler
// on the call; the handler, or later a batcher's executor, calls Finish
// once, from any thread. The call is freed on its poller once both
// its answer has been sent (or failed) and gRPC reports it done
// (AsyncNotifyWhenDone, which also makes IsCancelled() work while the call
// runs).
//
// The handler runs on the poller, so the batcher's inline path
// (--inline_max_cost) runs a cheap call's forward there too, holding that
// queue's other events for at most Batcher::kSubmitterHold x
// --inline_max_cost, as it holds one of gRPC's threads on the callback API.
//
// Shutdown order (the server's): gRPC's shutdown begins (no new calls; the
// calls asked for come back refused), AwaitNoCalls tells when every call
// that started has been answered, the batchers drain, then Join() waits for
// the last calls (e.g. of a version being unloaded) and only then shuts the
// queues down: no operation ever starts on a queue that is shut down, which
// gRPC aborts on. The pollers run until then.
//
// Ownership: owns its queues, threads and the calls in flight. The methods'
// handlers must outlive Join(). Thread-safety: Finish and AwaitNoCalls from
// any thread; Start and Join from one thread, in that order.
#ifndef METALSERVE_SERVER_SERVICE_ASYNC_UNARY_H_
#define METALSERVE_SERVER_SERVICE_ASYNC_UNARY_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/usable_cores.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/async_unary_call.h"

namespace metalserve {

class AsyncUnaryServer;

// Which gRPC API serves Predict and ModelInfer (--grpc_api).
enum class GrpcApi { kCallback, kAsync };
// "callback" or "async"; "auto" is AutoGrpcApi(`cores`). INVALID_ARGUMENT
// naming `text` otherwise.
absl::StatusOr<GrpcApi> ParseGrpcApi(absl::string_view text, int cores = 0);
// --grpc_api=auto: kAsync on a host with at least kAsyncMinCores cores,
// kCallback below. Measured (bench/transport.py, null runner): on a 16-core
// host the queues cost 0.33-0.40x the callback API's server CPU per [1,4]
// request and 0.78-0.91x per 602 KB one; on a 2-core host 1.04-1.19x, with
// 13-28 % fewer requests/s (docs/performance.md). Hosts between were not measured: 8 is where
// gRPC's callback pool (half the cores) first outnumbers the two queues
// twice over.
inline constexpr int kAsyncMinCores = 8;
GrpcApi AutoGrpcApi(int cores);

absl::string_view GrpcApiName(GrpcApi api);

// One unary call served through a completion queue: its context, request
// body and response buffer stay valid until Finish's answer is sent.
class AsyncUnaryCall {
 public:
  grpc::ServerContext* context() { return &context_; }
  // The request's body; the handler may empty it.
  grpc::ByteBuffer* request() { return &request_; }
  // Filled by whoever finishes the call; sent when the status is OK.
  grpc::ByteBuffer* response() { return &response_; }
  // Answers the call: `status` with the response buffer when it is OK, the
  // status alone otherwise. Once per call, from any thread; a later call does
  // nothing (the poller answers UNKNOWN for a handler that threw before
  // answering or handing the call on).
  void Finish(const grpc::Status& status);

 private:
  friend class AsyncUnaryServer;
  // What a completion-queue event is about: its tag is one of these.
  struct Event {
    enum Kind { kArrived, kAnswered, kDone } kind;
    AsyncUnaryCall* call;
  };
  AsyncUnaryCall(int method, int queue) : method_(method), queue_(queue) {}
  // True when this was the last of the two events that free the call.
  bool Release() { return pending_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

  grpc::ServerContext context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> writer_{&context_};
  const int method_;  // index into the server's methods
  const int queue_;   // index of the queue (and poller) it arrived on
  Event arrived_{Event::kArrived, this};
  Event answered_{Event::kAnswered, this};
  Event done_{Event::kDone, this};
  std::atomic<int> pending_{2};  // answered and done, once started
  std::atomic<bool> finished_{false};
};

// A raw unary method served through queues.
struct AsyncUnaryMethod {
  // Asks gRPC for the next call of the method: the generated
  // Request<Method> (or grpc::Service::RequestAsyncUnary) with these
  // arguments, `queue` as both the call's and the notification queue.
  std::function<void(grpc::ServerContext* context, grpc::ByteBuffer* request,
                     grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>* writer,
                     grpc::ServerCompletionQueue* queue, void* tag)>
      request;
  // Handles one call; it, or whoever it hands the call to, calls Finish.
  std::function<void(AsyncUnaryCall* call)> handle;
};

class AsyncUnaryServer {
 public:
  // Calls asked for at once per method and queue, so that a burst of
  // clients finds one waiting.
  static constexpr int kWaitingCalls = 16;

  // Queues (and threads) when none are asked for. Measured on the GPU host
  // (16 cores; ResNet-50 on CUDA, 602 KB requests, concurrency 64 and 256,
  // bench/results/h200-2026-12-04-async-serve-log.txt): two queues cost
  // 545-688 us of server CPU per request where four cost 633-691 and the
  // callback API's eight threads 659-776; more threads share the same calls
  // with more wake-ups.
  static constexpr int kDefaultQueues = 2;
  // The number of queues (and threads) for `threads` (0: kDefaultQueues).
  static int QueuesFor(int threads);

  // Adds `queues` completion queues to `builder`; call before BuildAndStart.
  AsyncUnaryServer(grpc::ServerBuilder* builder, int queues,
                   std::vector<AsyncUnaryMethod> methods);
  ~AsyncUnaryServer();  // Join()s

  // After BuildAndStart: asks for kWaitingCalls calls per method and queue,
  // then starts one polling thread per queue.
  void Start();
  // True once none of its calls is asked for or open: every call asked for
  // has come back refused and every one that started has been answered and
  // reported done. Until the server shuts down calls are always asked for,
  // so this is for the shutdown: once gRPC has begun it (no new calls), a
  // call matched but still in a poller's queue is counted here though no
  // interceptor has seen it yet. False at `deadline`.
  bool AwaitNoCalls(absl::Time deadline);
  // Waits until no call is asked for or open (AwaitNoCalls, logging while it
  // waits: a call still in a batcher, e.g. of a version being unloaded, is
  // answered first), then stops the pollers, shuts the queues down, lets the
  // pollers drain them and joins them. After the server's Shutdown.
  void Join();

  int queues() const { return static_cast<int>(queues_.size()); }

 private:
  void Poll(int queue);
  void Ask(int method, int queue);
  void Free(AsyncUnaryCall* call);

  const std::vector<AsyncUnaryMethod> methods_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  bool joined_ = false;
  absl::Mutex calls_mu_;
  int64_t calls_ ABSL_GUARDED_BY(calls_mu_) = 0;  // asked for or open
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_ASYNC_UNARY_H_
