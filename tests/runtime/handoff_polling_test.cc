// HandoffPolling, when a device thread's hand-offs poll: durations given
// directly, no clock, no threads.
#include "server/runtime/handoff_polling.h"

#include "gtest/gtest.h"

namespace metalserve {
namespace {

const absl::Duration kSpin = absl::Milliseconds(1);

// The caller polls over expected +- spin/2: it sleeps until half a spin
// before the expected end.
TEST(HandoffPollingTest, ACallerSleepsUntilHalfASpinBeforeTheExpectedEnd) {
  HandoffPolling p(kSpin);
  EXPECT_EQ(p.CallerSleepBeforePoll(absl::Microseconds(1400)), absl::Microseconds(900));
  EXPECT_EQ(p.CallerSleepBeforePoll(absl::Milliseconds(30)), absl::Microseconds(29500));
  // Items within half a spin, or of unknown length: polled from the start.
  EXPECT_EQ(p.CallerSleepBeforePoll(absl::Microseconds(500)), absl::ZeroDuration());
  EXPECT_EQ(p.CallerSleepBeforePoll(absl::Microseconds(200)), absl::ZeroDuration());
  EXPECT_EQ(p.CallerSleepBeforePoll(absl::ZeroDuration()), absl::ZeroDuration());
  EXPECT_EQ(p.CallerSleepBeforePoll(-absl::Seconds(1)), absl::ZeroDuration());
}

TEST(HandoffPollingTest, WithoutASpinNobodyPollsOrSleepsFirst) {
  HandoffPolling p(absl::ZeroDuration());
  EXPECT_FALSE(p.DevicePolls());
  EXPECT_EQ(p.CallerSleepBeforePoll(absl::Milliseconds(30)), absl::ZeroDuration());
  p.RecordIdle(absl::ZeroDuration());
  EXPECT_FALSE(p.DevicePolls());
}

// The device thread stops polling after kMissesToStop idle periods in a
// row that a poll would have missed, and starts again at the first one
// within the spin.
TEST(HandoffPollingTest, TheDeviceStopsPollingAfterMissesAndStartsAtAHit) {
  HandoffPolling p(kSpin);
  EXPECT_TRUE(p.DevicePolls());
  for (int i = 1; i < HandoffPolling::kMissesToStop; ++i) {
    p.RecordIdle(absl::Milliseconds(5));
    EXPECT_TRUE(p.DevicePolls()) << i << " misses";
  }
  p.RecordIdle(absl::Milliseconds(5));
  EXPECT_FALSE(p.DevicePolls());
  for (int i = 0; i < 100; ++i) p.RecordIdle(absl::Seconds(10));
  EXPECT_FALSE(p.DevicePolls());
  p.RecordIdle(kSpin);  // a poll of exactly the spin catches it
  EXPECT_TRUE(p.DevicePolls());
}

// Misses must come in a row: one hit between them starts the count again.
TEST(HandoffPollingTest, AHitBetweenMissesKeepsThePolling) {
  HandoffPolling p(kSpin);
  for (int i = 0; i < 10; ++i) {
    for (int j = 1; j < HandoffPolling::kMissesToStop; ++j) p.RecordIdle(absl::Milliseconds(2));
    p.RecordIdle(absl::ZeroDuration());  // work was queued at the item's end
    EXPECT_TRUE(p.DevicePolls()) << i;
  }
}

}  // namespace
}  // namespace metalserve
