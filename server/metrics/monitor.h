// The rolling latency/error monitor: the last `window` request outcomes and
// their p50, p95, mean latency and error ratio.
//
// Record() is the hot path: it overwrites one slot of a ring buffer and
// updates the error count under a mutex held for a few arithmetic
// operations. Snapshot() copies the window and selects the quantiles
// (O(window)); it is meant for scrapes and periodic logs, not per request.
//
// Quantiles use the nearest-rank definition: the q-quantile of n sorted
// samples is sample ceil(q * n) (1-based), so over the latencies 1..100 ms
// p50 is 50 ms and p95 is 95 ms.
//
// Thread-safety: thread-safe. Owns no threads.
#ifndef METALSERVE_SERVER_METRICS_MONITOR_H_
#define METALSERVE_SERVER_METRICS_MONITOR_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"

namespace metalserve {

class RollingMonitor {
 public:
  // `window` >= 1 requests; the caller validates it.
  explicit RollingMonitor(int64_t window);

  RollingMonitor(const RollingMonitor&) = delete;
  RollingMonitor& operator=(const RollingMonitor&) = delete;

  // Adds one request outcome, evicting the oldest once the window is full.
  void Record(absl::Duration latency, bool error);

  // Figures over the requests currently in the window; all zero when empty.
  MonitorSnapshot Snapshot() const;

 private:
  struct Sample {
    double seconds = 0;
    bool error = false;
  };

  mutable absl::Mutex mu_;
  std::vector<Sample> ring_ ABSL_GUARDED_BY(mu_);  // capacity = window
  int64_t next_ ABSL_GUARDED_BY(mu_) = 0;          // slot Record() writes
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;         // min(recorded, window)
  int64_t errors_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_METRICS_MONITOR_H_
