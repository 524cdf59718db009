#include "server/service/accepted_calls.h"

#include <utility>

#include "grpcpp/support/interceptor.h"

namespace metalserve {
namespace {

// Counts its call while it lives; passes every hook straight on.
class CountingInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit CountingInterceptor(std::shared_ptr<AcceptedCalls::State> state)
      : state_(std::move(state)) {
    state_->Add(1);
  }
  ~CountingInterceptor() override { state_->Add(-1); }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    methods->Proceed();
  }

 private:
  const std::shared_ptr<AcceptedCalls::State> state_;
};

}  // namespace

bool AcceptedCalls::State::AwaitNoneOpen(absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto none = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return open_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&none), deadline);
}

int64_t AcceptedCalls::State::open() {
  absl::MutexLock l(&mu_);
  return open_;
}

void AcceptedCalls::State::Add(int64_t delta) {
  absl::MutexLock l(&mu_);
  open_ += delta;
}

grpc::experimental::Interceptor* AcceptedCalls::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  if (info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) return nullptr;
  return new CountingInterceptor(state_);
}

}  // namespace metalserve
