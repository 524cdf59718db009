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

RollingMonitor::RollingMonitor(int64_t window)
    : ring_(static_cast<size_t>(std::max<int64_t>(window, 1))) {}

void RollingMonitor::Record(absl::Duration latency, bool error) {
  const double seconds = absl::ToDoubleSeconds(latency);
  absl::MutexLock lock(&mu_);
  Sample& slot = ring_[static_cast<size_t>(next_)];
  if (count_ == static_cast<int64_t>(ring_.size())) {
    errors_ -= slot.error ? 1 : 0;
  } else {
    ++count_;
  }
  slot = Sample{seconds, error};
  errors_ += error ? 1 : 0;
  if (++next_ == static_cast<int64_t>(ring_.size())) next_ = 0;
}

MonitorSnapshot RollingMonitor::Snapshot() const {
  std::vector<double> latencies;
  MonitorSnapshot snapshot;
  {
    absl::MutexLock lock(&mu_);
    if (count_ == 0) return snapshot;
    latencies.reserve(static_cast<size_t>(count_));
    // The first count_ slots hold samples until the ring wraps; after that
    // every slot does.
    for (int64_t i = 0; i < count_; ++i) {
      latencies.push_back(ring_[static_cast<size_t>(i)].seconds);
    }
    snapshot.count = count_;
    snapshot.error_ratio =
        static_cast<double>(errors_) / static_cast<double>(count_);
  }
  // Summed from the copy rather than kept running: a running double sum
  // drifts by rounding over millions of evictions.
  double sum = 0;
  for (double s : latencies) sum += s;
  snapshot.mean_seconds = sum / static_cast<double>(latencies.size());
  snapshot.p50_seconds = NearestRank(latencies, 0.50);
  snapshot.p95_seconds = NearestRank(latencies, 0.95);
  return snapshot;
}

}  // namespace metalserve
