// RollingMonitor on a simulated clock: quantiles, the request-count and age
// bounds of its window, and the split of caller errors from server errors.
#include "server/metrics/monitor.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/simulated_clock.h"

namespace metalserve {
namespace {

using absl::StatusCode;

TEST(RollingMonitorTest, EmptyWindowReportsZeros) {
  SimulatedClock clock;
  RollingMonitor monitor(10, absl::Seconds(60), &clock);
  const MonitorSnapshot s = monitor.Snapshot();
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.p50_seconds, 0);
  EXPECT_EQ(s.p95_seconds, 0);
  EXPECT_EQ(s.mean_seconds, 0);
  EXPECT_EQ(s.error_ratio, 0);
  EXPECT_EQ(s.caller_error_ratio, 0);
}

TEST(RollingMonitorTest, NearestRankQuantilesMeanAndErrorRatio) {
  SimulatedClock clock;
  RollingMonitor monitor(100, absl::Seconds(60), &clock);
  // 1..100 ms in a shuffled order; every 20th request fails on the server.
  for (int i = 0; i < 100; ++i) {
    const int ms = 1 + (i * 37) % 100;
    monitor.Record(absl::Milliseconds(ms),
                   ms % 20 == 0 ? StatusCode::kInternal : StatusCode::kOk);
  }
  const MonitorSnapshot s = monitor.Snapshot();
  EXPECT_EQ(s.count, 100);
  EXPECT_DOUBLE_EQ(s.p50_seconds, 0.050);
  EXPECT_DOUBLE_EQ(s.p95_seconds, 0.095);
  EXPECT_NEAR(s.mean_seconds, 0.0505, 1e-12);
  EXPECT_DOUBLE_EQ(s.error_ratio, 0.05);
  EXPECT_EQ(s.caller_error_ratio, 0);
}

TEST(RollingMonitorTest, WindowForgetsTheOldestRequests) {
  SimulatedClock clock;
  RollingMonitor monitor(4, absl::Seconds(60), &clock);
  monitor.Record(absl::Seconds(100), StatusCode::kInternal);
  monitor.Record(absl::Seconds(100), StatusCode::kInternal);
  for (int ms : {10, 20, 30, 40}) {
    monitor.Record(absl::Milliseconds(ms), StatusCode::kOk);
  }
  const MonitorSnapshot s = monitor.Snapshot();
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.p50_seconds, 0.020);
  EXPECT_DOUBLE_EQ(s.p95_seconds, 0.040);
  EXPECT_NEAR(s.mean_seconds, 0.025, 1e-12);
  EXPECT_EQ(s.error_ratio, 0);
}

TEST(RollingMonitorTest, DecaysToNoTrafficOnceTheLastRequestIsOlderThanMaxAge) {
  SimulatedClock clock;
  RollingMonitor monitor(100, absl::Seconds(60), &clock);
  for (int i = 0; i < 5; ++i) {
    monitor.Record(absl::Milliseconds(10),
                   i == 0 ? StatusCode::kUnavailable : StatusCode::kOk);
  }
  clock.AdvanceTime(absl::Seconds(60));  // exactly max_age: still counted
  EXPECT_EQ(monitor.Snapshot().count, 5);
  EXPECT_DOUBLE_EQ(monitor.Snapshot().error_ratio, 0.2);

  clock.AdvanceTime(absl::Milliseconds(1));
  const MonitorSnapshot idle = monitor.Snapshot();
  EXPECT_EQ(idle.count, 0);
  EXPECT_EQ(idle.error_ratio, 0);
  EXPECT_EQ(idle.p95_seconds, 0);
  EXPECT_EQ(idle.mean_seconds, 0);
}

TEST(RollingMonitorTest, KeepsOnlyTheRequestsWithinMaxAge) {
  SimulatedClock clock;
  RollingMonitor monitor(100, absl::Seconds(60), &clock);
  monitor.Record(absl::Seconds(2), StatusCode::kInternal);
  monitor.Record(absl::Seconds(2), StatusCode::kInternal);
  clock.AdvanceTime(absl::Seconds(30));
  monitor.Record(absl::Milliseconds(10), StatusCode::kOk);
  monitor.Record(absl::Milliseconds(30), StatusCode::kNotFound);
  clock.AdvanceTime(absl::Seconds(31));  // the first two are 61 s old
  const MonitorSnapshot s = monitor.Snapshot();
  EXPECT_EQ(s.count, 2);
  EXPECT_EQ(s.error_ratio, 0);
  EXPECT_DOUBLE_EQ(s.caller_error_ratio, 0.5);
  EXPECT_DOUBLE_EQ(s.p95_seconds, 0.030);
  EXPECT_NEAR(s.mean_seconds, 0.020, 1e-12);
}

TEST(RollingMonitorTest, CountsCallerErrorsApartFromServerErrors) {
  SimulatedClock clock;
  RollingMonitor monitor(10, absl::Seconds(60), &clock);
  for (StatusCode code :
       {StatusCode::kOk, StatusCode::kOk, StatusCode::kInvalidArgument,
        StatusCode::kNotFound, StatusCode::kCancelled,
        StatusCode::kFailedPrecondition, StatusCode::kOutOfRange,
        StatusCode::kUnavailable, StatusCode::kDeadlineExceeded,
        StatusCode::kInternal}) {
    monitor.Record(absl::Milliseconds(1), code);
  }
  const MonitorSnapshot s = monitor.Snapshot();
  EXPECT_EQ(s.count, 10);
  EXPECT_DOUBLE_EQ(s.caller_error_ratio, 0.5);
  EXPECT_DOUBLE_EQ(s.error_ratio, 0.3);
}

TEST(RollingMonitorTest, ClassifiesEveryCodeAsTheAlertRuleDoes) {
  // deploy/prometheus/alerts.yml, MetalserveHighErrorRate, excludes
  // OK|INVALID_ARGUMENT|NOT_FOUND|CANCELLED|FAILED_PRECONDITION|OUT_OF_RANGE.
  for (int i = 0; i <= 16; ++i) {
    const auto code = static_cast<StatusCode>(i);
    const RequestOutcome want =
        code == StatusCode::kOk ? RequestOutcome::kOk
        : (code == StatusCode::kInvalidArgument ||
           code == StatusCode::kNotFound || code == StatusCode::kCancelled ||
           code == StatusCode::kFailedPrecondition ||
           code == StatusCode::kOutOfRange)
            ? RequestOutcome::kCallerError
            : RequestOutcome::kServerError;
    EXPECT_EQ(ClassifyOutcome(code), want) << absl::StatusCodeToString(code);
  }
}

}  // namespace
}  // namespace metalserve
