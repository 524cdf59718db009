// LoadGenerator: drives load through a CallTransport (call_transport.h):
// Predict against a metalserve server, or ModelInfer against any Open
// Inference Protocol (KServe v2) server over gRPC or REST, and measures it.
// Over KServe the server-side queue/compute/batch figures come from the
// response's parameters "queue_time_us", "compute_time_us" and "batch_rows"
// when the server sends them (zero otherwise).
//
// Each successful answer's model version is counted, and a worker (a
// closed-loop slot, or an open-loop lane) answered by a version older than
// one it had seen before sending counts as a regression (model_versions.h):
// the check that a reload switches traffic once and never back.
//
// Closed loop (`LoadSpec::concurrency`): exactly N calls are outstanding;
// each completion starts the next call from the completion callback, so a
// few transport threads keep thousands of calls in flight (no thread per
// call).
// Latency runs from the actual send to the completion.
//
// Open loop (`LoadSpec::rate`): a scheduler thread issues call i at its
// intended time start + offset_i (constant or Poisson spacing) whatever the
// number of calls outstanding, and latency runs from the *intended* time.
// A stalled server therefore shows its stall in the latencies instead of
// slowing the client down (no coordinated omission). When
// `max_outstanding` calls are in flight the due call is not sent and counts
// as a "CLIENT_OVERFLOW" error; the schedule is never delayed. If the
// scheduler itself runs late, the late calls go out at once and the
// lateness is part of their latency.
//
// A run is warmup (results dropped) then measurement; each ends by duration
// or request count, whichever comes first, and then waits for every call it
// started to finish (calls are bounded by the per-call deadline).
//
// Time: every time the generator reads (send, completion, phase ends, the
// open-loop schedule, the progress interval) comes from the `Clock` given to
// Create(), the monotonic Clock::SteadyClock() by default (a wall clock
// stepped by NTP mid-run would distort latencies and rates); tests pass a
// SimulatedClock and move time themselves. Per-call deadlines are the
// transport's and stay in real time.
//
// Ownership: owns the transport (its connections and the one immutable
// request shared by all calls); does not own the clock, which must outlive
// the generator. Thread-safety: Run() is called from one thread at a time;
// Stop() may be called from any thread (e.g. a signal watcher) and ends the
// current and later runs early. The destructor must not run during Run().
#ifndef METALSERVE_CLIENT_LOAD_GENERATOR_H_
#define METALSERVE_CLIENT_LOAD_GENERATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/call_transport.h"
#include "client/latency_histogram.h"
#include "client/load_spec.h"
#include "grpcpp/channel.h"
#include "inference/grpc_service.pb.h"
#include "metalserve/v1/inference.pb.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"

namespace metalserve::client {

// A live snapshot, offered about once a second while a run is going.
struct Progress {
  bool warmup = false;
  absl::Duration elapsed;
  int64_t ok = 0;
  int64_t errors = 0;
  int64_t outstanding = 0;
};
using ProgressFn = std::function<void(const Progress&)>;

class LoadGenerator {
 public:
  // `channels` non-empty; `request` is sent by every call; `clock` (not
  // owned, non-null) times and paces every run.
  static absl::StatusOr<std::unique_ptr<LoadGenerator>> Create(
      std::vector<std::shared_ptr<grpc::Channel>> channels,
      v1::PredictRequest request, Clock* clock = Clock::SteadyClock());
  // The same over inference.GRPCInferenceService/ModelInfer.
  static absl::StatusOr<std::unique_ptr<LoadGenerator>> Create(
      std::vector<std::shared_ptr<grpc::Channel>> channels,
      inference::ModelInferRequest request, Clock* clock = Clock::SteadyClock());
  // Any transport (non-null), e.g. HTTP (http_transport.h).
  static absl::StatusOr<std::unique_ptr<LoadGenerator>> Create(
      std::unique_ptr<CallTransport> transport, Clock* clock = Clock::SteadyClock());

  // Warmup then measurement as `spec` says. InvalidArgument for a bad spec;
  // Cancelled when Stop() was called before the measurement began.
  absl::StatusOr<RunStats> Run(const LoadSpec& spec,
                               const ProgressFn& progress = nullptr);

  // Ends the current run (and refuses later ones) soon; thread-safe.
  void Stop() { stop_.store(true); }

  // Blocks until at least `n` calls have finished since creation (answered,
  // failed, or dropped as kOverflowError; warmup included) and been
  // recorded; false when `timeout` of real time passes first. A test driving a SimulatedClock waits here before moving time
  // on, so each completion is timed at the instant the server answered.
  // Thread-safe.
  bool AwaitFinishedCalls(int64_t n, absl::Duration timeout) const;

  class Phase;  // one warmup or measurement, in load_generator.cc

 private:
  LoadGenerator(std::unique_ptr<CallTransport> transport, Clock* clock)
      : transport_(std::move(transport)), clock_(clock) {}
  void CountFinishedCall();
  absl::StatusOr<RunStats> RunPhase(const LoadSpec& spec, bool warmup,
                                    const ProgressFn& progress);

  const std::unique_ptr<CallTransport> transport_;
  Clock* const clock_;
  std::atomic<bool> stop_{false};
  mutable absl::Mutex finished_mu_;
  int64_t finished_calls_ ABSL_GUARDED_BY(finished_mu_) = 0;
};

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_LOAD_GENERATOR_H_
