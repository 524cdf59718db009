// What a load-generator run is asked to do (LoadSpec, and the sweeps of
// them that --concurrency and --rate describe) and what it measured
// (RunStats and the figures derived from it), apart from the LoadGenerator
// that runs it (load_generator.h, which includes this header).
//
// Thread-safety: plain values and free functions; no shared state.
#ifndef METALSERVE_CLIENT_LOAD_SPEC_H_
#define METALSERVE_CLIENT_LOAD_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/latency_histogram.h"
#include "client/model_versions.h"
#include "grpcpp/support/status.h"

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
  // Open loop: threads that send the calls, each its share of the schedule
  // (load_generator.cc says how). One thread alone serialises and writes
  // every request: with 602 KB requests that capped the offered load near
  // 5,000/s on a 16-core host while a closed loop reached 7,900/s.
  int open_loop_threads = 4;
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
  // Successful responses per answering model version (model_versions.h),
  // and how often a worker was answered by a version older than one it had
  // already seen (0 across a correct reload).
  VersionCounts versions;
  int64_t model_version_regressions = 0;

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

#endif  // METALSERVE_CLIENT_LOAD_SPEC_H_
