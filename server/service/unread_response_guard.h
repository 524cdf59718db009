// UnreadResponseGuard: bounds the answers clients do not read. A server
// interceptor factory that feeds UnreadResponses (the pure policy) with
// every answer's serialised size when it is handed to gRPC and with the end
// of its sending, and cancels the calls the policy names:
// RESOURCE_EXHAUSTED "answer not read by the client ...", one WARNING line
// a second at most (naming the peer, the bytes and the age) and
// metalserve_unread_responses_cut_total / _bytes_total.
//
// gRPC 1.51 completes a server's send batch (message + status) only when the
// message has passed the client's flow-control window, so a call whose
// client holds its window at zero stays counted until it is cut off; its
// interceptor sees POST_SEND_MESSAGE only then. A "connection" is gRPC's
// peer string (ipv4:host:port), so all clients of one Unix socket share one
// bound.
//
// A sweeper thread, owned here, cuts answers older than the timeout once
// per `sweep_interval` on the given clock.
//
// Ownership: the factory is handed to the ServerBuilder, which gives it to
// the grpc::Server; the interceptors share its State. Destruction stops and
// joins the sweeper. Thread-safety: thread-safe.
#ifndef METALSERVE_SERVER_SERVICE_UNREAD_RESPONSE_GUARD_H_
#define METALSERVE_SERVER_SERVICE_UNREAD_RESPONSE_GUARD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/metrics/metrics.h"
#include "server/service/log_limiter.h"
#include "server/service/unread_responses.h"

struct grpc_call;

namespace metalserve {

class UnreadResponseGuard final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // What the interceptors share: the policy and the calls it may cut.
  class State {
   public:
    State(std::unique_ptr<UnreadResponses> policy, Metrics* metrics, Clock* clock);
    // `call`'s answer of `bytes` is being sent on `call_ptr` from `peer`.
    void Sending(uint64_t call, grpc_call* call_ptr, const std::string& peer, int64_t bytes);
    // `call`'s answer was sent, or the call ended.
    void Done(uint64_t call);
    // Cuts the answers older than the timeout.
    void Sweep();
    uint64_t NextId() { return next_id_.fetch_add(1); }
    UnreadResponses& policy() { return *policy_; }

   private:
    void CutOff(const std::vector<UnreadResponses::Cut>& cuts) ABSL_LOCKS_EXCLUDED(mu_);

    const std::unique_ptr<UnreadResponses> policy_;
    Metrics* const metrics_;
    LogLimiter log_limiter_;
    std::atomic<uint64_t> next_id_{1};
    absl::Mutex mu_;
    absl::flat_hash_map<uint64_t, grpc_call*> calls_ ABSL_GUARDED_BY(mu_);
  };

  // INVALID_ARGUMENT (naming the flag) when `limits` are out of range.
  // `metrics` may be null; `clock` null means the steady clock.
  static absl::StatusOr<std::unique_ptr<UnreadResponseGuard>> Create(
      UnreadResponsesOptions limits, Metrics* metrics, Clock* clock,
      absl::Duration sweep_interval = absl::Seconds(1));
  ~UnreadResponseGuard() override;

  std::shared_ptr<State> state() const { return state_; }

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  UnreadResponseGuard(std::shared_ptr<State> state, Clock* clock, absl::Duration sweep_interval);
  void SweepLoop();

  const std::shared_ptr<State> state_;
  Clock* const clock_;
  const absl::Duration sweep_interval_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sweeper_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_UNREAD_RESPONSE_GUARD_H_
