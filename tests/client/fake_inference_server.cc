#include "tests/client/fake_inference_server.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <queue>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "metalserve/v1/inference.grpc.pb.h"

namespace metalserve::testing {
namespace {

struct Pending {
  absl::Time due;
  grpc::ServerUnaryReactor* reactor;
  grpc::Status status;
  bool operator>(const Pending& o) const { return due > o.due; }
};

}  // namespace

class FakeInferenceServer::Impl final : public v1::Inference::CallbackService {
 public:
  explicit Impl(FakeServerOptions options)
      : options_(options), timer_([this] { TimerLoop(); }) {}

  ~Impl() override {
    if (options_.clock != Clock::RealClock()) {
      absl::MutexLock l(&mu_);
      stopping_ = true;  // simulated time stands still: answer pending calls
    }
    if (server_) server_->Shutdown();  // waits for pending calls to finish
    {
      absl::MutexLock l(&mu_);
      stopping_ = true;
    }
    timer_.join();
  }

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* ctx,
                                    const v1::PredictRequest* request,
                                    v1::PredictResponse* response) override {
    const absl::Time now = options_.clock->TimeNow();
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    absl::Time due = now + options_.delay;
    int64_t n;
    {
      absl::MutexLock l(&mu_);
      arrivals_.push_back(now);
      peak_in_flight_ = std::max(peak_in_flight_, ++in_flight_);
      if (request->inputs_size() > 0) {
        last_shape_.assign(request->inputs(0).shape().begin(),
                           request->inputs(0).shape().end());
      }
      n = static_cast<int64_t>(arrivals_.size());
      if (n == options_.stall_at_request) {
        stall_ = {now, now + options_.stall};
      }
      if (stall_ && now < stall_->second) due = std::max(due, stall_->second);
      if (stopping_) due = now;  // the timer may be gone: answer inline
    }
    grpc::Status status;
    if ((options_.fail_every > 0 && n % options_.fail_every == 0) ||
        request->model_name() == kFailMarker) {
      status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            options_.fail_message + " #" + std::to_string(n));
    } else {
      response->set_model_name("fake");
      const int64_t k = options_.queue_time_cycle;
      response->set_queue_time_us(k > 0 ? kQueueTimeUs * ((n - 1) % k + 1)
                                        : kQueueTimeUs);
      response->set_compute_time_us(absl::ToInt64Microseconds(options_.delay));
      const int64_t rows = request->inputs_size() > 0 &&
                                   request->inputs(0).shape_size() > 0
                               ? request->inputs(0).shape(0)
                               : 1;
      response->set_batch_rows(rows);
      if (!options_.versions.empty()) {
        const size_t i = static_cast<size_t>(n - 1) % options_.versions.size();
        response->set_model_version(options_.versions[i]);
      }
    }
    if (due <= now) {
      {
        absl::MutexLock l(&mu_);
        ++registered_;
      }
      Finished(1);
      reactor->Finish(status);
    } else {
      absl::MutexLock l(&mu_);
      pending_.push({due, reactor, std::move(status)});
      ++registered_;  // AwaitReceived: only now may a test move the clock
    }
    return reactor;
  }

  grpc::ServerUnaryReactor* GetModelMetadata(
      grpc::CallbackServerContext* ctx, const v1::GetModelMetadataRequest*,
      v1::GetModelMetadataResponse* response) override {
    response->set_model_name("fake");
    v1::TensorSpec* in = response->add_inputs();
    in->set_name("input");
    in->set_dtype(v1::DATA_TYPE_FLOAT32);
    in->add_shape(-1);
    in->add_shape(4);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  // Counts `n` calls as finished (just before their reactors finish).
  void Finished(int64_t n) {
    absl::MutexLock l(&mu_);
    in_flight_ -= n;
  }

  void TimerLoop() {
    for (;;) {
      std::vector<Pending> ready;
      {
        absl::MutexLock l(&mu_);
        auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || !pending_.empty();
        };
        mu_.Await(absl::Condition(&has_work));
        if (pending_.empty()) return;  // stopping with nothing left
        const absl::Time now =
            stopping_ ? absl::InfiniteFuture() : options_.clock->TimeNow();
        const absl::Time due = pending_.top().due;
        if (due > now) {
          // Wake at the earliest due time, when an earlier call arrives or
          // when the server stops.
          const size_t size = pending_.size();
          auto changed = [this, size]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            return pending_.size() != size || stopping_;
          };
          options_.clock->AwaitWithDeadline(&mu_, absl::Condition(&changed), due);
          continue;
        }
        while (!pending_.empty() && pending_.top().due <= now) {
          ready.push_back(pending_.top());
          pending_.pop();
        }
      }
      Finished(static_cast<int64_t>(ready.size()));
      for (Pending& p : ready) p.reactor->Finish(p.status);
    }
  }

  const FakeServerOptions options_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;

  mutable absl::Mutex mu_;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> pending_
      ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> arrivals_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> last_shape_ ABSL_GUARDED_BY(mu_);
  std::optional<std::pair<absl::Time, absl::Time>> stall_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Calls whose answer is scheduled (pending_) or given: a call counts in
  // arrivals_ first, and a test that moved the clock between the two would
  // see it answered a step late.
  int64_t registered_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread timer_;
};

std::unique_ptr<FakeInferenceServer> FakeInferenceServer::Start(
    FakeServerOptions options) {
  auto impl = std::make_unique<Impl>(options);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &impl->port_);
  builder.RegisterService(impl.get());
  impl->server_ = builder.BuildAndStart();
  if (!impl->server_ || impl->port_ == 0) {
    std::cerr << "FakeInferenceServer: cannot listen on 127.0.0.1\n";
    std::abort();
  }
  return std::unique_ptr<FakeInferenceServer>(
      new FakeInferenceServer(std::move(impl)));
}

FakeInferenceServer::FakeInferenceServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
FakeInferenceServer::~FakeInferenceServer() = default;

std::string FakeInferenceServer::address() const {
  return "127.0.0.1:" + std::to_string(impl_->port_);
}

std::shared_ptr<grpc::Channel> FakeInferenceServer::NewChannel() const {
  return grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
}

int64_t FakeInferenceServer::received() const {
  absl::MutexLock l(&impl_->mu_);
  return static_cast<int64_t>(impl_->arrivals_.size());
}

bool FakeInferenceServer::AwaitReceived(int64_t n,
                                        absl::Duration timeout) const {
  absl::MutexLock l(&impl_->mu_);
  auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl_->mu_) {
    return impl_->registered_ >= n;
  };
  return impl_->mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

int64_t FakeInferenceServer::in_flight() const {
  absl::MutexLock l(&impl_->mu_);
  return impl_->in_flight_;
}

int64_t FakeInferenceServer::peak_in_flight() const {
  absl::MutexLock l(&impl_->mu_);
  return impl_->peak_in_flight_;
}

std::vector<absl::Time> FakeInferenceServer::arrivals() const {
  absl::MutexLock l(&impl_->mu_);
  return impl_->arrivals_;
}

std::vector<int64_t> FakeInferenceServer::last_input_shape() const {
  absl::MutexLock l(&impl_->mu_);
  return impl_->last_shape_;
}

std::optional<std::pair<absl::Time, absl::Time>>
FakeInferenceServer::stall_window() const {
  absl::MutexLock l(&impl_->mu_);
  return impl_->stall_;
}

}  // namespace metalserve::testing
