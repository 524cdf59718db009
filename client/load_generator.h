// LoadGenerator: drives Predict load against a metalserve server, or
// ModelInfer load against any Open Inference Protocol (KServe v2) server, and
// measures it. Over KServe the server-side queue/compute/batch figures come
// from the response's int64 parameters "queue_time_us", "compute_time_us"
// and "batch_rows" when the server sends them (zero otherwise).
//
// Closed loop (`LoadSpec::concurrency`): exactly N calls are outstanding;
// each completion starts the next call from the completion callback, so a
// few gRPC threads keep thousands of calls in flight (no thread per call).
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
// SimulatedClock and move time themselves. Per-call deadlines are gRPC's and
// stay in real time.
//
// Ownership: holds the channels' stubs and one immutable request shared by
// all calls; does not own the clock, which must outlive the generator. Thread-safety: Run() is called from one thread at a time;
// Stop() may be called from any thread (e.g. a signal watcher) and ends the
// current and later runs early. The destructor must not run during Run().
#ifndef METALSERVE_CLIENT_LOAD_GENERATOR_H_
#define METALSERVE_CLIENT_LOAD_GENERATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/latency_histogram.h"
#include "grpcpp/channel.h"
#include "absl/synchronization/mutex.h"
#include "inference/grpc_service.grpc.pb.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "common/clock.h"

namespace metalserve::client {

// Error class for open-loop calls dropped at the --max_outstanding bound.
inline constexpr char kOverflowError[] = "CLIENT_OVERFLOW";
// Distinct error messages kept per gRPC code, and the bytes kept of each
// (longer ones end in "...").
inline constexpr int kMaxMessagesPerCode = 3;
inline constexpr size_t kMaxMessageBytes = 200;

enum class Arrival { kConstant, kPoisson };

struct LoadSpec {
  // Closed loop when rate == 0: calls kept outstanding, >= 1.
  int concurrency = 1;
  // Open loop when > 0: requests per second.
  double rate = 0;
  Arrival arrival = Arrival::kConstant;
  // Open loop: calls in flight beyond this are dropped as kOverflowError.
  int64_t max_outstanding = 10000;
  // Measurement length; at least one of duration / max_requests is finite.
  absl::Duration duration = absl::InfiniteDuration();
  // Requests started in the measurement; < 0 means no limit.
  int64_t max_requests = -1;
  // Load before measuring, results dropped. Zero for none.
  absl::Duration warmup = absl::ZeroDuration();
  // Per-call deadline; infinite for none.
  absl::Duration deadline = absl::InfiniteDuration();
  // Seed of the Poisson arrivals.
  uint64_t seed = 1;

  bool open_loop() const { return rate > 0; }
};

// Results of one measurement.
struct RunStats {
  // Successful calls only; from (intended) send to completion.
  LatencyHistogram latency;
  int64_t ok = 0;
  // Failed calls by gRPC code name ("DEADLINE_EXCEEDED") or kOverflowError.
  std::map<std::string, int64_t> errors;
  // Rows carried by successful calls.
  int64_t rows = 0;
  // From the first send to the last completion.
  absl::Duration elapsed;
  // The first kMaxMessagesPerCode distinct messages of each failed code,
  // each cut to kMaxMessageBytes; in order of arrival per shard.
  std::map<std::string, std::vector<std::string>> error_messages;
  // Sums over successful responses of the server-reported fields.
  int64_t server_queue_us_sum = 0;
  int64_t server_compute_us_sum = 0;
  int64_t server_batch_rows_sum = 0;
  // The server-reported queue and compute times of successful responses,
  // for percentiles (recorded in whole microseconds).
  LatencyHistogram server_queue;
  LatencyHistogram server_compute;

  int64_t ErrorCount() const;
  int64_t Total() const { return ok + ErrorCount(); }
  // Errors / total; 0 when nothing ran.
  double ErrorRate() const;
  double RequestsPerSecond() const;
  double RowsPerSecond() const;
  double MeanServerQueueUs() const;
  double MeanServerComputeUs() const;
  double MeanBatchRows() const;
};

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
  LoadGenerator(std::vector<std::unique_ptr<v1::Inference::Stub>> stubs,
                v1::PredictRequest request, Clock* clock);
  LoadGenerator(
      std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> stubs,
      inference::ModelInferRequest request, Clock* clock);
  void CountFinishedCall();
  size_t num_stubs() const {
    return kserve_ ? kserve_stubs_.size() : stubs_.size();
  }
  absl::StatusOr<RunStats> RunPhase(const LoadSpec& spec, bool warmup,
                                    const ProgressFn& progress);

  // Exactly one protocol's stubs and request are used.
  const bool kserve_;
  const std::vector<std::unique_ptr<v1::Inference::Stub>> stubs_;
  const v1::PredictRequest request_;
  const std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>>
      kserve_stubs_;
  const inference::ModelInferRequest kserve_request_;
  const int64_t rows_per_request_;
  Clock* const clock_;
  std::atomic<bool> stop_{false};
  mutable absl::Mutex finished_mu_;
  int64_t finished_calls_ ABSL_GUARDED_BY(finished_mu_) = 0;
};

// Parses a concurrency sweep: "8", "1,4,16", "1:64:x2" (multiply) or
// "4:32:+4" (add). Every level >= 1, at most 64 levels.
absl::StatusOr<std::vector<int>> ParseConcurrencySweep(absl::string_view text);

// Parses an open-loop rate sweep in requests per second: "500" or
// "50,100,200". Every rate > 0 and finite, at most 64. "0" (or "") alone
// means closed loop and gives an empty list.
absl::StatusOr<std::vector<double>> ParseRateSweep(absl::string_view text);

// `message` cut to kMaxMessageBytes, ending in "..." when it was longer.
std::string TruncateMessage(absl::string_view message);

// Maps a status code to its canonical name, e.g. "UNAVAILABLE".
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_LOAD_GENERATOR_H_
