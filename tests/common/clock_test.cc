// The two real clocks of common/clock.h (the simulated one is tested with
// the modules that use it).
#include "common/clock.h"

#include <chrono>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace metalserve {
namespace {

TEST(ClockTest, SteadyClockNeverGoesBackwards) {
  Clock* clock = Clock::SteadyClock();
  absl::Time last = clock->TimeNow();
  for (int i = 0; i < 10000; ++i) {
    const absl::Time now = clock->TimeNow();
    ASSERT_GE(now, last);
    last = now;
  }
}

TEST(ClockTest, SteadyClockReadsTheMonotonicClockNotTheWallClock) {
  const auto steady = std::chrono::steady_clock::now().time_since_epoch();
  const absl::Time t = Clock::SteadyClock()->TimeNow();
  const absl::Time want = absl::UnixEpoch() + absl::FromChrono(steady);
  EXPECT_GE(t, want);
  EXPECT_LT(t - want, absl::Seconds(10));
  // steady_clock does not count from 1970 on the platforms built here, so a
  // wall-clock reading would be decades away from `want`.
  EXPECT_GT(absl::AbsDuration(absl::Now() - want), absl::Hours(24));
}

TEST(ClockTest, SteadyAwaitReturnsAtOnceWhenTheConditionHolds) {
  Clock* clock = Clock::SteadyClock();
  absl::Mutex mu;
  bool ready = true;
  absl::MutexLock l(&mu);
  EXPECT_TRUE(clock->AwaitWithDeadline(&mu, absl::Condition(&ready),
                                       absl::InfiniteFuture()));
}

TEST(ClockTest, SteadyAwaitTimesOutAtItsOwnDeadline) {
  // The deadline is a steady time: taken as a wall time it would lie decades
  // in the past (no wait) or the future (no return).
  Clock* clock = Clock::SteadyClock();
  absl::Mutex mu;
  bool ready = false;
  const auto start = std::chrono::steady_clock::now();
  {
    absl::MutexLock l(&mu);
    EXPECT_FALSE(clock->AwaitWithDeadline(&mu, absl::Condition(&ready),
                                          clock->TimeNow() + absl::Milliseconds(20)));
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(20));
  EXPECT_LT(waited, std::chrono::seconds(10));
}

}  // namespace
}  // namespace metalserve
