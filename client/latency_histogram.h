// LatencyHistogram: a log-linear (HdrHistogram-like) latency recorder.
//
// Values are recorded in nanoseconds. Values below 2^8 ns land in exact
// one-nanosecond buckets; above that every power of two is split into 128
// equal sub-buckets, so a bucket is never wider than 1/128 of its lower
// bound. Percentiles report the bucket midpoint (clamped to the recorded
// min/max), whose relative error is at most 1/256 (0.4%), well inside the
// 1% the report promises. Values above kMaxTrackable (about 36 minutes)
// are counted in the last bucket; Max() stays exact.
//
// Mean and standard deviation come from exact running sums, not buckets.
//
// Memory: about 36 KiB of counters, allocated once in the constructor.
//
// Thread-safety: none. Each thread records into its own histogram (or a
// shard guarded by the caller) and the results are combined with Merge().
#ifndef METALSERVE_CLIENT_LATENCY_HISTOGRAM_H_
#define METALSERVE_CLIENT_LATENCY_HISTOGRAM_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace metalserve::client {

class LatencyHistogram {
 public:
  // Values from here up share the last bucket: 2^41 ns (about 36 minutes).
  static constexpr int64_t kMaxTrackable = int64_t{1} << 41;

  LatencyHistogram();

  // Records one sample; negative durations are recorded as zero.
  void Record(absl::Duration latency);
  void RecordNanos(int64_t nanos);
  // Adds every sample of `other` to this histogram.
  void Merge(const LatencyHistogram& other);
  void Clear();

  int64_t Count() const { return count_; }
  absl::Duration Min() const;
  absl::Duration Max() const;
  absl::Duration Mean() const;
  // Population standard deviation.
  absl::Duration StdDev() const;
  // Nearest-rank percentile, `p` in [0, 100]: the smallest recorded value
  // with at least p% of the samples at or below it. Percentile(100) == Max().
  // Zero when the histogram is empty.
  absl::Duration Percentile(double p) const;

  // Bucket arithmetic, exposed for tests.
  static int BucketIndex(int64_t nanos);
  static int64_t BucketLowerBound(int index);
  // Exclusive upper bound of the bucket.
  static int64_t BucketUpperBound(int index);
  static int NumBuckets();

 private:
  std::vector<int64_t> counts_;
  int64_t count_ = 0;
  int64_t min_ = 0;
  int64_t max_ = 0;
  double sum_ = 0;     // ns
  double sum_sq_ = 0;  // ns^2
};

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_LATENCY_HISTOGRAM_H_
