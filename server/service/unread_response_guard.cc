#include "server/service/unread_response_guard.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "grpc/grpc.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/interceptor.h"

namespace metalserve {
namespace {

using grpc::experimental::InterceptionHookPoints;

const char* ReasonText(UnreadResponses::Reason reason) {
  switch (reason) {
    case UnreadResponses::Reason::kConnectionBytes: return "the connection's bound";
    case UnreadResponses::Reason::kTotalBytes: return "the server's bound";
    case UnreadResponses::Reason::kAge: return "the timeout";
  }
  return "?";
}

// Feeds one call's answer to the State: its size when sent, its end when the
// send completes (POST_SEND_MESSAGE) or the call is destroyed.
class UnreadInterceptor final : public grpc::experimental::Interceptor {
 public:
  UnreadInterceptor(std::shared_ptr<UnreadResponseGuard::State> state,
                    grpc::experimental::ServerRpcInfo* info)
      : state_(std::move(state)), info_(info), id_(state_->NextId()) {}
  ~UnreadInterceptor() override { state_->Done(id_); }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      grpc::ServerContextBase* ctx = info_->server_context();
      const grpc::ByteBuffer* message = methods->GetSerializedSendMessage();
      if (ctx != nullptr && message != nullptr) {
        state_->Sending(id_, ctx->c_call(), ctx->peer(),
                        static_cast<int64_t>(message->Length()));
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_SEND_MESSAGE)) {
      state_->Done(id_);
    }
    methods->Proceed();
  }

 private:
  const std::shared_ptr<UnreadResponseGuard::State> state_;
  grpc::experimental::ServerRpcInfo* const info_;
  const uint64_t id_;
};

}  // namespace

UnreadResponseGuard::State::State(std::unique_ptr<UnreadResponses> policy, Metrics* metrics,
                                  Clock* clock)
    : policy_(std::move(policy)), metrics_(metrics), log_limiter_(clock, absl::Seconds(1)) {}

void UnreadResponseGuard::State::Sending(uint64_t call, grpc_call* call_ptr,
                                         const std::string& peer, int64_t bytes) {
  {
    absl::MutexLock l(&mu_);
    calls_[call] = call_ptr;
  }
  std::vector<UnreadResponses::Cut> cuts = policy_->Add(call, peer, bytes);
  if (!cuts.empty()) CutOff(cuts);
}

void UnreadResponseGuard::State::Done(uint64_t call) {
  {
    absl::MutexLock l(&mu_);
    if (calls_.erase(call) == 0) return;
  }
  policy_->Remove(call);
}

void UnreadResponseGuard::State::Sweep() {
  std::vector<UnreadResponses::Cut> cuts = policy_->TakeExpired();
  if (!cuts.empty()) CutOff(cuts);
}

// Cancels the calls cut, holding a reference on each so that none is freed
// while it is cancelled; no lock is held while gRPC runs (cancelling may
// complete the call and destroy its interceptor on this thread).
void UnreadResponseGuard::State::CutOff(const std::vector<UnreadResponses::Cut>& cuts) {
  std::vector<std::pair<const UnreadResponses::Cut*, grpc_call*>> to_cancel;
  {
    absl::MutexLock l(&mu_);
    for (const UnreadResponses::Cut& cut : cuts) {
      auto it = calls_.find(cut.call);
      if (it == calls_.end()) continue;  // finished meanwhile
      grpc_call_ref(it->second);
      to_cancel.emplace_back(&cut, it->second);
      calls_.erase(it);
    }
  }
  int64_t bytes = 0;
  for (const auto& [cut, call] : to_cancel) {
    const std::string why = absl::StrCat(
        "answer not read by the client: ", cut->bytes, " bytes unsent for ",
        absl::FormatDuration(absl::Trunc(cut->age, absl::Milliseconds(1))),
        ", connection holding ", cut->peer_bytes, " unsent bytes; cut off at ",
        ReasonText(cut->reason));
    grpc_call_cancel_with_status(call, GRPC_STATUS_RESOURCE_EXHAUSTED, why.c_str(), nullptr);
    grpc_call_unref(call);
    bytes += cut->bytes;
    int64_t suppressed = 0;
    if (log_limiter_.Allow(&suppressed)) {
      LOG(WARNING) << "cut off a call from " << cut->peer << ": " << why << " ("
                   << suppressed << " similar lines suppressed)";
    }
  }
  if (metrics_ != nullptr && !to_cancel.empty()) {
    metrics_->UnreadResponsesCut(static_cast<int64_t>(to_cancel.size()), bytes);
  }
}

absl::StatusOr<std::unique_ptr<UnreadResponseGuard>> UnreadResponseGuard::Create(
    UnreadResponsesOptions limits, Metrics* metrics, Clock* clock,
    absl::Duration sweep_interval) {
  if (clock == nullptr) clock = Clock::SteadyClock();
  absl::StatusOr<std::unique_ptr<UnreadResponses>> policy =
      UnreadResponses::Create(limits, clock);
  if (!policy.ok()) return policy.status();
  auto state = std::make_shared<State>(std::move(*policy), metrics, clock);
  return std::unique_ptr<UnreadResponseGuard>(
      new UnreadResponseGuard(std::move(state), clock, sweep_interval));
}

UnreadResponseGuard::UnreadResponseGuard(std::shared_ptr<State> state, Clock* clock,
                                         absl::Duration sweep_interval)
    : state_(std::move(state)), clock_(clock), sweep_interval_(sweep_interval) {
  sweeper_ = std::thread([this] { SweepLoop(); });
}

UnreadResponseGuard::~UnreadResponseGuard() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  sweeper_.join();
}

void UnreadResponseGuard::SweepLoop() {
  absl::MutexLock l(&mu_);
  auto stopped = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_; };
  while (!clock_->AwaitWithDeadline(&mu_, absl::Condition(&stopped),
                                    clock_->TimeNow() + sweep_interval_)) {
    mu_.Unlock();
    state_->Sweep();
    mu_.Lock();
  }
}

grpc::experimental::Interceptor* UnreadResponseGuard::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  if (info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) return nullptr;
  return new UnreadInterceptor(state_, info);
}

}  // namespace metalserve
