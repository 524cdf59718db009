#include "client/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace metalserve::client {
namespace {

// 2^kSubBits sub-buckets per power of two; values below 2^(kSubBits+1) are
// exact.
constexpr int kSubBits = 7;
constexpr int64_t kSubCount = int64_t{1} << kSubBits;    // 128
constexpr int64_t kExactLimit = int64_t{1} << (kSubBits + 1);  // 256
constexpr int kMaxMagnitude = 40;  // log2(kMaxTrackable) - 1

}  // namespace

int LatencyHistogram::NumBuckets() {
  // Exact buckets plus one run of kSubCount per magnitude in
  // [kSubBits + 1, kMaxMagnitude].
  return static_cast<int>(kExactLimit +
                          (kMaxMagnitude - kSubBits) * kSubCount);
}

int LatencyHistogram::BucketIndex(int64_t nanos) {
  if (nanos < kExactLimit) return static_cast<int>(std::max<int64_t>(nanos, 0));
  if (nanos >= kMaxTrackable) return NumBuckets() - 1;
  const int magnitude =
      static_cast<int>(std::bit_width(static_cast<uint64_t>(nanos))) - 1;
  const int shift = magnitude - kSubBits;
  const int64_t sub = (nanos >> shift) - kSubCount;
  return static_cast<int>(kExactLimit +
                          (magnitude - kSubBits - 1) * kSubCount + sub);
}

int64_t LatencyHistogram::BucketLowerBound(int index) {
  if (index < kExactLimit) return index;
  const int64_t rel = index - kExactLimit;
  const int magnitude = static_cast<int>(rel / kSubCount) + kSubBits + 1;
  const int64_t sub = rel % kSubCount;
  return (kSubCount + sub) << (magnitude - kSubBits);
}

int64_t LatencyHistogram::BucketUpperBound(int index) {
  if (index < kExactLimit) return index + 1;
  const int64_t rel = index - kExactLimit;
  const int magnitude = static_cast<int>(rel / kSubCount) + kSubBits + 1;
  return BucketLowerBound(index) + (int64_t{1} << (magnitude - kSubBits));
}

LatencyHistogram::LatencyHistogram() : counts_(NumBuckets(), 0) {}

void LatencyHistogram::Record(absl::Duration latency) {
  RecordNanos(absl::ToInt64Nanoseconds(latency));
}

void LatencyHistogram::RecordNanos(int64_t nanos) {
  nanos = std::max<int64_t>(nanos, 0);
  ++counts_[BucketIndex(nanos)];
  if (count_ == 0) {
    min_ = max_ = nanos;
  } else {
    min_ = std::min(min_, nanos);
    max_ = std::max(max_, nanos);
  }
  ++count_;
  const double v = static_cast<double>(nanos);
  sum_ += v;
  sum_sq_ += v * v;
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  if (other.count_ == 0) return;
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  if (count_ == 0) {
    min_ = other.min_;
    max_ = other.max_;
  } else {
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
  }
  count_ += other.count_;
  sum_ += other.sum_;
  sum_sq_ += other.sum_sq_;
}

void LatencyHistogram::Clear() {
  std::fill(counts_.begin(), counts_.end(), 0);
  count_ = min_ = max_ = 0;
  sum_ = sum_sq_ = 0;
}

absl::Duration LatencyHistogram::Min() const { return absl::Nanoseconds(min_); }
absl::Duration LatencyHistogram::Max() const { return absl::Nanoseconds(max_); }

absl::Duration LatencyHistogram::Mean() const {
  if (count_ == 0) return absl::ZeroDuration();
  return absl::Nanoseconds(sum_ / static_cast<double>(count_));
}

absl::Duration LatencyHistogram::StdDev() const {
  if (count_ == 0) return absl::ZeroDuration();
  const double n = static_cast<double>(count_);
  const double mean = sum_ / n;
  const double var = std::max(0.0, sum_sq_ / n - mean * mean);
  return absl::Nanoseconds(std::sqrt(var));
}

absl::Duration LatencyHistogram::Percentile(double p) const {
  if (count_ == 0) return absl::ZeroDuration();
  if (p >= 100) return Max();
  if (p <= 0) return Min();
  // Nearest rank, 1-based: ceil(p/100 * n), at least 1.
  const double exact_rank = p / 100.0 * static_cast<double>(count_);
  int64_t rank = static_cast<int64_t>(std::ceil(exact_rank - 1e-9));
  rank = std::clamp<int64_t>(rank, 1, count_);
  int64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      const int idx = static_cast<int>(i);
      const int64_t lo = BucketLowerBound(idx);
      const int64_t hi = BucketUpperBound(idx);
      const int64_t mid = lo + (hi - 1 - lo) / 2;
      return absl::Nanoseconds(std::clamp(mid, min_, max_));
    }
  }
  return Max();
}

}  // namespace metalserve::client
