// FakeInferenceServer: an in-process metalserve.v1.Inference server on
// 127.0.0.1 with a known per-request delay, for load-generator tests and the
// client benchmark.
//
// Predict never blocks a gRPC thread: the handler queues the reactor on a
// timer thread that finishes it when its delay is over (delay 0 finishes
// inline). Optional behaviours: every `fail_every`-th request, or any
// request whose model_name is kFailMarker, fails with INVALID_ARGUMENT and
// the message "<fail_message> #<request number>"; the `stall_at_request`-th
// request opens a stall window during which nothing finishes before the
// window closes. Responses carry queue_time_us = kQueueTimeUs (or, with
// queue_time_cycle = k > 0, kQueueTimeUs * ((n - 1) % k + 1) for the n-th
// request), compute_time_us = the delay and batch_rows = the request's
// first input rows, and model_version = versions[(n - 1) % size] for the
// n-th request when `versions` is given (empty otherwise). GetModelMetadata describes one float32 input "input" of
// shape [-1, 4].
//
// Time comes from `FakeServerOptions::clock`: with a SimulatedClock a call's
// delay (and a stall) is over only when the test moves simulated time past
// it, and arrivals are stamped with simulated time.
//
// Ownership: owns the gRPC server and the timer thread; not the clock.
// Thread-safety: all methods are thread-safe. The destructor shuts the
// server down and joins the timer thread; on the real clock pending calls
// still finish on schedule, on a simulated clock (which nobody moves any
// more) they are answered at once.
#ifndef METALSERVE_TESTS_CLIENT_FAKE_INFERENCE_SERVER_H_
#define METALSERVE_TESTS_CLIENT_FAKE_INFERENCE_SERVER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "common/clock.h"

namespace metalserve::testing {

struct FakeServerOptions {
  absl::Duration delay = absl::Milliseconds(2);
  // Every n-th request (1-based arrival count) fails; 0 for never.
  int64_t fail_every = 0;
  // The n-th request (1-based) opens a stall window of `stall`; 0 for never.
  int64_t stall_at_request = 0;
  absl::Duration stall = absl::Milliseconds(200);
  // Failure message, followed by " #<request number>".
  std::string fail_message = "fake failure requested";
  // 0: every response reports kQueueTimeUs; k > 0: the n-th reports
  // kQueueTimeUs * ((n - 1) % k + 1), a known spread for percentiles.
  int64_t queue_time_cycle = 0;
  // Times delays, stalls and arrivals; not owned, outlives the server.
  Clock* clock = Clock::RealClock();
  // The model_version of the n-th answer is versions[(n - 1) % size()];
  // none when empty.
  std::vector<std::string> versions;
  // gRPC callback threads are the library's; this bounds nothing else.
};

class FakeInferenceServer {
 public:
  static constexpr int64_t kQueueTimeUs = 100;
  static constexpr char kFailMarker[] = "fail";

  // Starts on 127.0.0.1 with a free port; aborts the test binary on failure.
  static std::unique_ptr<FakeInferenceServer> Start(FakeServerOptions options);
  ~FakeInferenceServer();

  // "127.0.0.1:port".
  std::string address() const;
  std::shared_ptr<grpc::Channel> NewChannel() const;

  int64_t received() const;
  // Blocks until at least `n` Predict calls have arrived and their answers
  // are scheduled (so a clock moved next answers them), or (false) until
  // `timeout` of real time, a safety bound, has passed.
  bool AwaitReceived(int64_t n,
                     absl::Duration timeout = absl::Seconds(20)) const;
  // Predict calls arrived and not yet finished.
  int64_t in_flight() const;
  // The most Predict calls the server held at once (arrived, not yet
  // finished): a closed loop of concurrency N reaches N when the server is
  // slow enough for every connection to be waiting at the same time.
  int64_t peak_in_flight() const;
  // Arrival times of Predict calls, in arrival order.
  std::vector<absl::Time> arrivals() const;
  // Shape of the first input of the latest Predict call.
  std::vector<int64_t> last_input_shape() const;
  // The stall window, once a stall has been triggered.
  std::optional<std::pair<absl::Time, absl::Time>> stall_window() const;

  class Impl;

 private:
  explicit FakeInferenceServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace metalserve::testing

#endif  // METALSERVE_TESTS_CLIENT_FAKE_INFERENCE_SERVER_H_
