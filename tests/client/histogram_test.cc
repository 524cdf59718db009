#include "client/latency_histogram.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace metalserve::client {
namespace {

// Nearest-rank percentile of sorted samples: the ceil(p/100 * n)-th value.
int64_t ExactPercentile(const std::vector<int64_t>& sorted, double p) {
  const double rank = std::ceil(p / 100.0 * sorted.size() - 1e-9);
  const size_t idx = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return sorted[std::min(idx, sorted.size() - 1)];
}

void ExpectPercentilesWithinOnePercent(const std::vector<int64_t>& samples) {
  LatencyHistogram h;
  for (int64_t v : samples) h.RecordNanos(v);
  std::vector<int64_t> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  for (double p : {1.0, 10.0, 50.0, 90.0, 95.0, 99.0, 99.9, 100.0}) {
    const double exact = static_cast<double>(ExactPercentile(sorted, p));
    const double got = absl::ToDoubleNanoseconds(h.Percentile(p));
    EXPECT_LE(std::abs(got - exact), 0.01 * exact + 0.5)
        << "p" << p << " exact " << exact << " got " << got;
  }
}

TEST(LatencyHistogramTest, EmptyHistogramReportsZeros) {
  LatencyHistogram h;
  EXPECT_EQ(h.Count(), 0);
  EXPECT_EQ(h.Percentile(50), absl::ZeroDuration());
  EXPECT_EQ(h.Mean(), absl::ZeroDuration());
  EXPECT_EQ(h.StdDev(), absl::ZeroDuration());
}

TEST(LatencyHistogramTest, SmallValuesAreExact) {
  LatencyHistogram h;
  for (int64_t v = 1; v <= 100; ++v) h.RecordNanos(v);
  EXPECT_EQ(h.Percentile(50), absl::Nanoseconds(50));
  EXPECT_EQ(h.Percentile(90), absl::Nanoseconds(90));
  EXPECT_EQ(h.Percentile(99), absl::Nanoseconds(99));
  EXPECT_EQ(h.Min(), absl::Nanoseconds(1));
  EXPECT_EQ(h.Max(), absl::Nanoseconds(100));
}

TEST(LatencyHistogramTest, UniformMillisecondPercentilesMatchExactWithinOnePercent) {
  std::vector<int64_t> samples;
  for (int64_t us = 1; us <= 10000; ++us) samples.push_back(us * 1000);
  ExpectPercentilesWithinOnePercent(samples);
}

TEST(LatencyHistogramTest, LogNormalPercentilesMatchExactWithinOnePercent) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(std::log(2e6), 0.8);  // ~2 ms
  std::vector<int64_t> samples;
  for (int i = 0; i < 50000; ++i) samples.push_back(static_cast<int64_t>(dist(rng)));
  ExpectPercentilesWithinOnePercent(samples);
}

TEST(LatencyHistogramTest, BimodalWithRareStallShowsStallInTail) {
  std::vector<int64_t> samples(990, 2'000'000);            // 2 ms
  samples.insert(samples.end(), 10, 200'000'000);          // 200 ms, 1%
  LatencyHistogram h;
  for (int64_t v : samples) h.RecordNanos(v);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(h.Percentile(99)), 2.0, 0.02);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(h.Percentile(99.9)), 200.0, 2.0);
  EXPECT_EQ(h.Max(), absl::Milliseconds(200));
  ExpectPercentilesWithinOnePercent(samples);
}

TEST(LatencyHistogramTest, EveryValueMapsToBucketWithinOnePercent) {
  // Exhaustive over bucket edges and a stride of values up to 2^41 ns.
  for (int i = 0; i < LatencyHistogram::NumBuckets(); ++i) {
    const int64_t lo = LatencyHistogram::BucketLowerBound(i);
    const int64_t hi = LatencyHistogram::BucketUpperBound(i);
    ASSERT_LT(lo, hi);
    EXPECT_EQ(LatencyHistogram::BucketIndex(lo), i);
    EXPECT_EQ(LatencyHistogram::BucketIndex(hi - 1), i);
    EXPECT_LE(static_cast<double>(hi - 1 - lo), 0.01 * lo + 0.5) << "bucket " << i;
    if (i + 1 < LatencyHistogram::NumBuckets()) {
      EXPECT_EQ(LatencyHistogram::BucketLowerBound(i + 1), hi);
    }
  }
}

TEST(LatencyHistogramTest, MeanAndStdDevAreExact) {
  LatencyHistogram h;
  for (int64_t v : {2, 4, 4, 4, 5, 5, 7, 9}) h.RecordNanos(v * 1000);
  EXPECT_EQ(h.Mean(), absl::Microseconds(5));
  EXPECT_NEAR(absl::ToDoubleMicroseconds(h.StdDev()), 2.0, 1e-6);
}

TEST(LatencyHistogramTest, MergeEqualsRecordingEverythingInOne) {
  std::mt19937_64 rng(3);
  std::exponential_distribution<double> dist(1.0 / 1e6);
  LatencyHistogram all, parts[4];
  for (int i = 0; i < 20000; ++i) {
    const int64_t v = static_cast<int64_t>(dist(rng));
    all.RecordNanos(v);
    parts[i % 4].RecordNanos(v);
  }
  LatencyHistogram merged;
  for (const LatencyHistogram& p : parts) merged.Merge(p);
  EXPECT_EQ(merged.Count(), all.Count());
  EXPECT_EQ(merged.Min(), all.Min());
  EXPECT_EQ(merged.Max(), all.Max());
  EXPECT_NEAR(absl::ToDoubleNanoseconds(merged.Mean()),
              absl::ToDoubleNanoseconds(all.Mean()), 1e-3);
  for (double p : {50.0, 90.0, 99.0, 99.9}) {
    EXPECT_EQ(merged.Percentile(p), all.Percentile(p)) << "p" << p;
  }
}

TEST(LatencyHistogramTest, HugeValuesKeepExactMax) {
  LatencyHistogram h;
  h.Record(absl::Hours(2));
  h.Record(absl::Milliseconds(1));
  EXPECT_EQ(h.Max(), absl::Hours(2));
  EXPECT_EQ(h.Percentile(100), absl::Hours(2));
  EXPECT_NEAR(absl::ToDoubleMilliseconds(h.Percentile(50)), 1.0, 0.01);
}

TEST(LatencyHistogramTest, NegativeDurationsCountAsZero) {
  LatencyHistogram h;
  h.Record(-absl::Milliseconds(1));
  EXPECT_EQ(h.Count(), 1);
  EXPECT_EQ(h.Max(), absl::ZeroDuration());
}

}  // namespace
}  // namespace metalserve::client
