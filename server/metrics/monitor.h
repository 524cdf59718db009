// The rolling latency/error monitor: the outcomes of the last `window`
// requests that finished within the last `max_age`, and their p50, p95,
// mean latency, server error ratio and caller error ratio.
//
// Two bounds make the window: at most `window` requests (a ring buffer),
// and none older than `max_age` on the monitor's clock. The age bound is
// what makes an idle server read as idle: once no request has finished for
// `max_age`, the window is empty and every figure is zero with count 0
// ("no traffic"), instead of the last busy minute's figures forever.
//
// Errors come in two kinds (ClassifyOutcome): the caller's (bad input,
// unknown model, the caller cancelled: INVALID_ARGUMENT, NOT_FOUND,
// CANCELLED, FAILED_PRECONDITION, OUT_OF_RANGE), which say nothing about the
// server's health, and the server's (every other code but OK: refusals,
// expired deadlines, model failures). error_ratio counts only the server's,
// the same split deploy/prometheus/alerts.yml's MetalserveHighErrorRate uses.
//
// Record() is the hot path: it reads the clock and overwrites one slot of
// the ring under a mutex held for a few assignments. Snapshot() copies the
// window and selects the quantiles (O(window)); it is meant for scrapes and
// periodic logs, not per request.
//
// Quantiles use the nearest-rank definition: the q-quantile of n sorted
// samples is sample ceil(q * n) (1-based), so over the latencies 1..100 ms
// p50 is 50 ms and p95 is 95 ms.
//
// Thread-safety: thread-safe. Owns no threads. The clock must outlive it.
#ifndef METALSERVE_SERVER_METRICS_MONITOR_H_
#define METALSERVE_SERVER_METRICS_MONITOR_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/metrics/metrics.h"

namespace metalserve {

enum class RequestOutcome { kOk, kCallerError, kServerError };

// OK; a caller's error (INVALID_ARGUMENT, NOT_FOUND, CANCELLED,
// FAILED_PRECONDITION, OUT_OF_RANGE); else a server error.
RequestOutcome ClassifyOutcome(absl::StatusCode code);

class RollingMonitor {
 public:
  // `window` >= 1 requests, `max_age` > 0; the caller validates both.
  // nullptr `clock`: Clock::RealClock().
  RollingMonitor(int64_t window, absl::Duration max_age, Clock* clock);

  RollingMonitor(const RollingMonitor&) = delete;
  RollingMonitor& operator=(const RollingMonitor&) = delete;

  // Adds one request outcome, finished now, evicting the oldest once the
  // ring is full.
  void Record(absl::Duration latency, absl::StatusCode code);

  // Figures over the requests in the window now (at most `window`, none
  // finished more than `max_age` ago); all zero when it is empty.
  MonitorSnapshot Snapshot() const;

  absl::Duration max_age() const { return max_age_; }

 private:
  struct Sample {
    double seconds = 0;
    RequestOutcome outcome = RequestOutcome::kOk;
    absl::Time finished = absl::InfinitePast();
  };

  const absl::Duration max_age_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::vector<Sample> ring_ ABSL_GUARDED_BY(mu_);  // capacity = window
  int64_t next_ ABSL_GUARDED_BY(mu_) = 0;          // slot Record() writes
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_METRICS_MONITOR_H_
