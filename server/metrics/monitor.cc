#include "server/metrics/monitor.h"

#include <algorithm>
#include <cmath>

namespace metalserve {
namespace {

// Nearest-rank quantile of `v` (unsorted; reordered in place), v non-empty.
double NearestRank(std::vector<double>& v, double q) {
  const auto n = static_cast<int64_t>(v.size());
  int64_t rank = static_cast<int64_t>(std::ceil(q * static_cast<double>(n)));
  rank = std::clamp<int64_t>(rank, 1, n);
  auto nth = v.begin() + (rank - 1);
  std::nth_element(v.begin(), nth, v.end());
  return *nth;
}

}  // namespace

RequestOutcome ClassifyOutcome(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return RequestOutcome::kOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return RequestOutcome::kCallerError;
    default:
      return RequestOutcome::kServerError;
  }
}

RollingMonitor::RollingMonitor(int64_t window, absl::Duration max_age,
                               Clock* clock)
    : max_age_(max_age),
      clock_(clock != nullptr ? clock : Clock::RealClock()),
      ring_(static_cast<size_t>(std::max<int64_t>(window, 1))) {}

void RollingMonitor::Record(absl::Duration latency, absl::StatusCode code) {
  const Sample sample{absl::ToDoubleSeconds(latency), ClassifyOutcome(code),
                      clock_->TimeNow()};
  absl::MutexLock lock(&mu_);
  ring_[static_cast<size_t>(next_)] = sample;
  if (++next_ == static_cast<int64_t>(ring_.size())) next_ = 0;
}

MonitorSnapshot RollingMonitor::Snapshot() const {
  // Slots never written hold InfinitePast, so they fall out with the old.
  const absl::Time oldest = clock_->TimeNow() - max_age_;
  std::vector<double> latencies;
  int64_t caller_errors = 0, server_errors = 0;
  {
    absl::MutexLock lock(&mu_);
    latencies.reserve(ring_.size());
    for (const Sample& s : ring_) {
      if (s.finished < oldest) continue;
      latencies.push_back(s.seconds);
      caller_errors += s.outcome == RequestOutcome::kCallerError ? 1 : 0;
      server_errors += s.outcome == RequestOutcome::kServerError ? 1 : 0;
    }
  }
  MonitorSnapshot snapshot;
  if (latencies.empty()) return snapshot;
  const auto n = static_cast<double>(latencies.size());
  snapshot.count = static_cast<int64_t>(latencies.size());
  snapshot.error_ratio = static_cast<double>(server_errors) / n;
  snapshot.caller_error_ratio = static_cast<double>(caller_errors) / n;
  // Summed from the copy rather than kept running: a running double sum
  // drifts by rounding over millions of evictions.
  double sum = 0;
  for (double s : latencies) sum += s;
  snapshot.mean_seconds = sum / n;
  snapshot.p50_seconds = NearestRank(latencies, 0.50);
  snapshot.p95_seconds = NearestRank(latencies, 0.95);
  return snapshot;
}

}  // namespace metalserve
