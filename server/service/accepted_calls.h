// AcceptedCalls: counts the unary calls gRPC has handed to the server's
// handlers and not yet finished, so that Shutdown() can tell when only
// streams (health Watch, reflection) and requests still arriving remain.
//
// It is a server interceptor factory: gRPC creates one interceptor per call
// when the call is matched to a handler (for a unary call, once its request
// message has arrived) and destroys it with the call's context, after the
// status was sent or the call was cancelled. A unary call is counted from
// the first moment to the second. The interceptor itself does nothing else.
//
// Ownership: the factory is handed to the ServerBuilder, which gives it to
// the grpc::Server; it shares the counter (State) with its creator, so the
// counter outlives whichever is destroyed last. Thread-safety: thread-safe.
#ifndef METALSERVE_SERVER_SERVICE_ACCEPTED_CALLS_H_
#define METALSERVE_SERVER_SERVICE_ACCEPTED_CALLS_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"

namespace metalserve {

class AcceptedCalls final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // The shared counter.
  class State {
   public:
    // Blocks until no accepted unary call is open or `deadline` passes;
    // true in the first case.
    bool AwaitNoneOpen(absl::Time deadline);
    int64_t open() ABSL_LOCKS_EXCLUDED(mu_);
    void Add(int64_t delta) ABSL_LOCKS_EXCLUDED(mu_);

   private:
    absl::Mutex mu_;
    int64_t open_ ABSL_GUARDED_BY(mu_) = 0;
  };

  AcceptedCalls() : state_(std::make_shared<State>()) {}
  std::shared_ptr<State> state() const { return state_; }

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  const std::shared_ptr<State> state_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_ACCEPTED_CALLS_H_
