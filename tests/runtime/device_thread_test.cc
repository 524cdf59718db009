// DeviceThread without LibTorch: order, shutdown draining, work refused after
// shutdown, and two owners sharing one thread. No test sleeps: each waits on
// a Notification or on the thread's observable state (accepting(),
// pending()); two bound a wait for something that must not happen.
#include "server/runtime/device_thread.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/simulated_clock.h"

namespace metalserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Blocks the device thread until Notify; returns once the blocker runs, so
// everything submitted afterwards is known to be queued behind it.
void BlockDeviceThread(DeviceThread& dt, absl::Notification& release) {
  absl::Notification started;
  ASSERT_TRUE(dt.Submit([&] {
                  started.Notify();
                  release.WaitForNotification();
                }).ok());
  started.WaitForNotification();
}

TEST(DeviceThreadTest, RunsSubmittedWorkInSubmissionOrderOnOneThread) {
  auto dt = DeviceThread::Create("cpu");
  std::vector<int> order;  // touched only on the device thread
  std::vector<std::thread::id> ids;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(dt->Submit([&order, &ids, i] {
                    order.push_back(i);
                    ids.push_back(std::this_thread::get_id());
                  }).ok());
  }
  std::vector<int> seen;
  std::thread::id device_id;
  ASSERT_TRUE(dt->RunSync([&] {
                  seen = order;
                  device_id = std::this_thread::get_id();
                }).ok());
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[i], i);
  EXPECT_NE(device_id, std::this_thread::get_id());
  for (const auto& id : ids) EXPECT_EQ(id, device_id);
}

TEST(DeviceThreadTest, RunSyncOnTheDeviceThreadRunsInline) {
  auto dt = DeviceThread::Create("cpu");
  std::vector<int> order;
  ASSERT_TRUE(dt->RunSync([&] {
                  EXPECT_TRUE(dt->IsCurrent());
                  order.push_back(1);
                  // Nested device work: must not wait for itself.
                  EXPECT_TRUE(dt->RunSync([&] { order.push_back(2); }).ok());
                  order.push_back(3);
                }).ok());
  EXPECT_THAT(order, ElementsAre(1, 2, 3));
  EXPECT_FALSE(dt->IsCurrent());
}

TEST(DeviceThreadTest, ShutdownDrainsAcceptedWorkThenRefusesNewWork) {
  auto dt = DeviceThread::Create("mps");
  absl::Notification release;
  BlockDeviceThread(*dt, release);
  std::atomic<int> ran{0};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(dt->Submit([&] { ++ran; }).ok());
  EXPECT_EQ(dt->pending(), 4);

  // Once Shutdown has begun (observable: accepting() is false), work is
  // refused without running; then the blocker is released.
  std::atomic<bool> refused_ran{false};
  absl::Status refused, refused_sync;
  std::thread releaser([&] {
    while (dt->accepting()) std::this_thread::yield();
    refused = dt->Submit([&] { refused_ran = true; });
    refused_sync = dt->RunSync([&] { refused_ran = true; });
    release.Notify();
  });
  dt->Shutdown();  // returns after the queued work ran
  releaser.join();

  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(dt->pending(), 0);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("mps"));
  EXPECT_EQ(refused_sync.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(refused_ran.load());
  dt->Shutdown();  // idempotent
  EXPECT_EQ(dt->Submit([] {}).code(), absl::StatusCode::kUnavailable);
}

TEST(DeviceThreadTest, RefusedWorkIsDestroyedWithoutRunning) {
  auto dt = DeviceThread::Create("cpu");
  dt->Shutdown();
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> watch = token;
  bool ran = false;
  EXPECT_EQ(dt->Submit([t = std::move(token), &ran] { ran = true; }).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(ran);
  EXPECT_TRUE(watch.expired());  // the closure and what it held are gone
}

TEST(DeviceThreadTest, DestructionRunsWorkStillQueued) {
  std::atomic<int> ran{0};
  {
    auto dt = DeviceThread::Create("cpu");
    absl::Notification release;
    BlockDeviceThread(*dt, release);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(dt->Submit([&] { ++ran; }).ok());
    release.Notify();
  }  // the destructor drains the five
  EXPECT_EQ(ran.load(), 5);
}

// Two owners (as two runners on one device would be) share one thread: their
// work interleaves in submission order on the same thread, and the thread
// outlives the first owner.
TEST(DeviceThreadTest, TwoOwnersShareOneThreadThatOutlivesTheFirst) {
  std::shared_ptr<DeviceThread> first = DeviceThread::Create("cuda:0");
  std::shared_ptr<DeviceThread> second = first;
  std::vector<char> order;
  std::thread::id a_id, b_id;
  ASSERT_TRUE(first->Submit([&] { order.push_back('a'); a_id = std::this_thread::get_id(); }).ok());
  ASSERT_TRUE(second->Submit([&] { order.push_back('b'); b_id = std::this_thread::get_id(); }).ok());
  ASSERT_TRUE(first->Submit([&] { order.push_back('a'); }).ok());
  first.reset();  // one owner gone: the thread keeps serving the other

  std::vector<char> seen;
  ASSERT_TRUE(second->RunSync([&] { seen = order; }).ok());
  EXPECT_THAT(seen, ElementsAre('a', 'b', 'a'));
  EXPECT_EQ(a_id, b_id);
  EXPECT_TRUE(second->accepting());
  EXPECT_EQ(second.use_count(), 1);
}

TEST(DeviceThreadTest, ConcurrentSubmittersEachKeepTheirOwnOrder) {
  auto dt = DeviceThread::Create("cpu");
  constexpr int kPerThread = 200;
  std::vector<int> seen_a, seen_b;  // device thread only
  auto submitter = [&](std::vector<int>* seen) {
    for (int i = 0; i < kPerThread; ++i) {
      EXPECT_TRUE(dt->Submit([seen, i] { seen->push_back(i); }).ok());
    }
  };
  std::thread a(submitter, &seen_a), b(submitter, &seen_b);
  a.join();
  b.join();
  dt->Shutdown();
  ASSERT_EQ(seen_a.size(), static_cast<size_t>(kPerThread));
  ASSERT_EQ(seen_b.size(), static_cast<size_t>(kPerThread));
  for (int i = 0; i < kPerThread; ++i) {
    EXPECT_EQ(seen_a[i], i);
    EXPECT_EQ(seen_b[i], i);
  }
}

// The device thread charges each item's measured time (here a simulated
// clock the item advances) to its key and orders keys by fair_queue.h's
// rule: a light model's batch queued behind five flood batches runs right
// after the flood's running batch, not after all of them.
std::vector<std::string> OrderUnder(FairQueue::Order order) {
  SimulatedClock clock;
  auto dt = DeviceThread::Create("cpu", {.order = order, .clock = &clock});
  std::vector<std::string> order_seen;  // device thread only
  auto batch = [&](std::string label) {
    return [&, label] {
      clock.AdvanceTime(absl::Milliseconds(10));
      order_seen.push_back(label);
    };
  };
  absl::Notification release, started;
  EXPECT_TRUE(dt->Submit("flood:1", [&] {
                  started.Notify();
                  release.WaitForNotification();
                  clock.AdvanceTime(absl::Milliseconds(10));
                  order_seen.push_back("flood0");
                }).ok());
  started.WaitForNotification();
  for (int i = 1; i <= 5; ++i) {
    EXPECT_TRUE(dt->Submit("flood:1", batch("flood" + std::to_string(i))).ok());
  }
  EXPECT_TRUE(dt->Submit("light:1", batch("light")).ok());
  release.Notify();
  dt->Shutdown();
  EXPECT_GE(dt->virtual_time("flood:1"), absl::Milliseconds(60));
  return order_seen;
}

TEST(DeviceThreadTest, FairOrderRunsALightKeyBeforeAFloodedKeysBacklog) {
  EXPECT_THAT(OrderUnder(FairQueue::Order::kFair),
              ElementsAre("flood0", "light", "flood1", "flood2", "flood3", "flood4", "flood5"));
  EXPECT_THAT(OrderUnder(FairQueue::Order::kFifo),
              ElementsAre("flood0", "flood1", "flood2", "flood3", "flood4", "flood5", "light"));
}

TEST(DeviceThreadTest, UnkeyedWorkKeepsSubmissionOrderAmongItself) {
  auto dt = DeviceThread::Create("cpu");
  EXPECT_EQ(dt->order(), FairQueue::Order::kFair);
  std::vector<int> seen;  // device thread only
  absl::Notification release;
  BlockDeviceThread(*dt, release);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(dt->Submit([&seen, i] { seen.push_back(i); }).ok());
  release.Notify();
  dt->Shutdown();
  EXPECT_THAT(seen, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
}

// RunHereIfIdle on an idle device: fn runs on the calling thread, and its
// time is charged to its key as a queued item's would be.
TEST(DeviceThreadTest, RunHereIfIdleRunsOnTheCallerWhenIdleAndChargesItsKey) {
  SimulatedClock clock;
  auto dt = DeviceThread::Create("cpu", {.clock = &clock});
  std::thread::id ran_on;
  ASSERT_TRUE(dt->RunHereIfIdle("m:1", [&] {
                  ran_on = std::this_thread::get_id();
                  EXPECT_EQ(dt->pending(), 1);  // the caller holds the device
                  clock.AdvanceTime(absl::Milliseconds(5));
                }).ok());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(dt->virtual_time("m:1"), absl::Milliseconds(5));
  EXPECT_EQ(dt->pending(), 0);
}

// A busy device: RunHereIfIdle queues fn like RunSync, and it runs on the
// device thread after the work ahead of it.
TEST(DeviceThreadTest, RunHereIfIdleTakesItsTurnOnTheDeviceThreadWhenBusy) {
  auto dt = DeviceThread::Create("cpu");
  std::thread::id device_id;
  ASSERT_TRUE(dt->RunSync([&] { device_id = std::this_thread::get_id(); }).ok());
  absl::Notification release;
  BlockDeviceThread(*dt, release);
  std::thread::id ran_on;
  std::thread caller([&] { EXPECT_TRUE(dt->RunHereIfIdle("m:1", [&] {
                                           ran_on = std::this_thread::get_id();
                                         }).ok()); });
  // Observable: queued behind the blocker.
  while (dt->pending() < 2) std::this_thread::yield();
  release.Notify();
  caller.join();
  EXPECT_EQ(ran_on, device_id);
}

// While a caller holds the device, submitted work waits for it: the device
// runs one thing at a time whichever thread runs it. (The bounded wait is
// for something that must not happen; with the hold missing, the submitted
// work starts at once and the wait returns true.)
TEST(DeviceThreadTest, WorkSubmittedWhileACallerHoldsTheDeviceWaitsForIt) {
  auto dt = DeviceThread::Create("cpu");
  std::atomic<bool> holding{false};
  std::atomic<bool> overlapped{false};
  absl::Notification queued_started;
  ASSERT_TRUE(dt->RunHereIfIdle("a:1", [&] {
                  holding = true;
                  ASSERT_TRUE(dt->Submit("b:1", [&] {
                                  overlapped = holding.load();
                                  queued_started.Notify();
                                }).ok());
                  EXPECT_FALSE(queued_started.WaitForNotificationWithTimeout(
                      absl::Milliseconds(200)));
                  holding = false;
                }).ok());
  queued_started.WaitForNotification();
  EXPECT_FALSE(overlapped.load());
}

// Shutdown waits for a caller holding the device, then refuses: it drains.
TEST(DeviceThreadTest, ShutdownWaitsForACallerHoldingTheDeviceThenRefuses) {
  auto dt = DeviceThread::Create("cpu");
  absl::Notification inside, release, shut;
  std::thread holder([&] {
    EXPECT_TRUE(dt->RunHereIfIdle("a:1", [&] {
                    inside.Notify();
                    release.WaitForNotification();
                  }).ok());
  });
  inside.WaitForNotification();
  std::thread stopper([&] {
    dt->Shutdown();
    shut.Notify();
  });
  while (dt->accepting()) std::this_thread::yield();
  EXPECT_FALSE(shut.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  release.Notify();
  holder.join();
  stopper.join();
  EXPECT_TRUE(shut.HasBeenNotified());
  bool ran = false;
  EXPECT_EQ(dt->RunHereIfIdle("a:1", [&] { ran = true; }).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(ran);
}

// Polling (Options::spin). The spins below are far longer than any test
// runs, so "polled" and "slept" do not depend on how fast this host is; the
// bounded waits are for things that must not happen (with polling broken,
// they happen well within them).
constexpr absl::Duration kLongSpin = absl::Minutes(10);

// True if `dt` has slept more than `n` times within `bound` (polled for, on
// this thread).
bool SleepsAbove(const DeviceThread& dt, int64_t n, absl::Duration bound) {
  const absl::Time end = absl::Now() + bound;
  while (absl::Now() < end) {
    if (dt.sleeps() > n) return true;
    std::this_thread::yield();
  }
  return dt.sleeps() > n;
}

// True once nothing is running or queued on `dt`, within `bound` (a
// RunSync may return before the loop has ended its item).
bool BecomesIdle(const DeviceThread& dt, absl::Duration bound) {
  const absl::Time end = absl::Now() + bound;
  while (dt.pending() != 0) {
    if (absl::Now() >= end) return false;
    std::this_thread::yield();
  }
  return true;
}

// Runs an empty item; returns the thread's sleeps() read inside it (the
// sleeps before the item counted, none after).
int64_t SleepsDuringAnItem(DeviceThread& dt) {
  int64_t during = -1;
  EXPECT_TRUE(dt.RunSync("m:1", [&] { during = dt.sleeps(); }).ok());
  return during;
}

TEST(DeviceThreadTest, ForDeviceSpinsOnAcceleratorsOnly) {
  const absl::Duration spin = absl::Microseconds(300);
  const auto kFair = FairQueue::Order::kFair;
  EXPECT_EQ(DeviceThread::ForDevice("cpu", kFair, spin, 16).spin, absl::ZeroDuration());
  EXPECT_EQ(DeviceThread::ForDevice("cuda:0", kFair, spin, 16).spin, spin);
  EXPECT_EQ(DeviceThread::ForDevice("mps", FairQueue::Order::kFifo, spin, 8).spin, spin);
  EXPECT_EQ(DeviceThread::ForDevice("mps", FairQueue::Order::kFifo, spin, 8).order,
            FairQueue::Order::kFifo);
  // Too few cores to poll: off (the polling threads would delay the rest).
  EXPECT_EQ(DeviceThread::ForDevice("cuda:0", kFair, spin, DeviceThread::kMinCoresToPoll).spin,
            spin);
  EXPECT_EQ(
      DeviceThread::ForDevice("cuda:0", kFair, spin, DeviceThread::kMinCoresToPoll - 1).spin,
      absl::ZeroDuration());
  EXPECT_EQ(DeviceThread::ForDevice("cuda:0", kFair, absl::ZeroDuration(), 16).spin,
            absl::ZeroDuration());
  EXPECT_EQ(DeviceThread::Create("cuda:0", {.spin = absl::InfiniteDuration()})->spin(),
            absl::Hours(1));
}

// A polling thread takes the next item without going to sleep, however
// long the caller takes between items.
TEST(DeviceThreadTest, APollingThreadTakesWorkBetweenItemsWithoutSleeping) {
  auto dt = DeviceThread::Create("cuda:0", {.spin = kLongSpin});
  const int64_t first = SleepsDuringAnItem(*dt);  // 0 or 1: before the first item
  int ran = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(SleepsAbove(*dt, first, absl::Milliseconds(20)));
    ASSERT_TRUE(dt->RunSync("m:1", [&] { ++ran; }).ok());
  }
  EXPECT_EQ(ran, 3);
  EXPECT_EQ(dt->sleeps(), first);
}

// Without a spin the thread sleeps once nothing is queued, and no caller
// polls.
TEST(DeviceThreadTest, AThreadWithoutSpinSleepsWhenIdle) {
  auto dt = DeviceThread::Create("cuda:0");
  for (int i = 0; i < 2; ++i) {
    const int64_t during = SleepsDuringAnItem(*dt);
    EXPECT_TRUE(SleepsAbove(*dt, during, absl::Seconds(30)));
  }
  EXPECT_EQ(dt->caught_polling(), 0);
}

// Shutdown ends a poll at once, not after the spin.
TEST(DeviceThreadTest, ShutdownEndsAPoll) {
  auto dt = DeviceThread::Create("cuda:0", {.spin = absl::Seconds(40)});
  const int64_t during = SleepsDuringAnItem(*dt);
  EXPECT_FALSE(SleepsAbove(*dt, during, absl::Milliseconds(20)));  // polling now
  absl::Notification shut;
  std::thread stopper([&] {
    dt->Shutdown();
    shut.Notify();
  });
  EXPECT_TRUE(shut.WaitForNotificationWithTimeout(absl::Seconds(20)));
  stopper.join();
  EXPECT_FALSE(dt->accepting());
}

// A RunSync whose work starts at once polls for its end and sees it there.
TEST(DeviceThreadTest, RunSyncToAnIdleDevicePollsForItsEnd) {
  auto dt = DeviceThread::Create("cuda:0", {.spin = kLongSpin});
  int ran = 0;
  ASSERT_TRUE(dt->RunSync("m:1", [&] { ++ran; }).ok());
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(dt->caught_polling(), 1);
}

// Work queued behind other work does not poll (it would spin through all of
// it): the caller sleeps, and its work still runs in its turn.
TEST(DeviceThreadTest, RunSyncBehindOtherWorkDoesNotPoll) {
  auto dt = DeviceThread::Create("cuda:0", {.spin = kLongSpin});
  absl::Notification release;
  BlockDeviceThread(*dt, release);
  bool ran = false;
  std::thread caller([&] { EXPECT_TRUE(dt->RunSync("m:1", [&] { ran = true; }).ok()); });
  while (dt->pending() < 2) std::this_thread::yield();
  release.Notify();
  caller.join();
  EXPECT_TRUE(ran);
  EXPECT_EQ(dt->caught_polling(), 0);
}

// A caller whose key's last item took long (an hour, on the simulated
// clock) sleeps until half a spin before that length instead of polling
// from the start: its own item, which ends at once, wakes it from that
// sleep, so it is not caught polling. Without the plan it would poll (for
// up to a minute) and catch it, as the first call does.
TEST(DeviceThreadTest, ACallerSleepsThroughMostOfAnItemItExpectsToBeLong) {
  SimulatedClock clock;
  auto dt = DeviceThread::Create("cuda:0", {.clock = &clock, .spin = absl::Minutes(1)});
  // A RunSync returns once its item has run, maybe before the loop has
  // ended it: each call below waits until the device is idle, so that its
  // work starts at once (the case that polls).
  ASSERT_TRUE(dt->RunSync("m:1", [&] { clock.AdvanceTime(absl::Hours(1)); }).ok());
  EXPECT_EQ(dt->caught_polling(), 1);  // no length known yet: polled from the start
  ASSERT_TRUE(BecomesIdle(*dt, absl::Seconds(20)));
  bool ran = false;
  ASSERT_TRUE(dt->RunSync("m:1", [&] { ran = true; }).ok());
  EXPECT_TRUE(ran);
  EXPECT_EQ(dt->caught_polling(), 1);
  // Another key has no length known: its caller polls from the start.
  ASSERT_TRUE(BecomesIdle(*dt, absl::Seconds(20)));
  ASSERT_TRUE(dt->RunSync("n:1", [] {}).ok());
  EXPECT_EQ(dt->caught_polling(), 2);
}

// The device thread stops polling after kMissesToStop idle periods in a
// row that outlasted the spin (on the simulated clock), sleeping at once
// after the next item; one idle period within the spin starts it polling
// again.
TEST(DeviceThreadTest, ADeviceThreadStopsPollingForSparseWorkAndStartsAgain) {
  SimulatedClock clock;
  auto dt = DeviceThread::Create("cuda:0", {.clock = &clock, .spin = kLongSpin});
  int64_t during = SleepsDuringAnItem(*dt);
  for (int i = 0; i < HandoffPolling::kMissesToStop; ++i) {
    // Still polling: no sleep after the item.
    EXPECT_FALSE(SleepsAbove(*dt, during, absl::Milliseconds(20))) << i;
    ASSERT_TRUE(BecomesIdle(*dt, absl::Seconds(20)));  // the item's end is read
    clock.AdvanceTime(kLongSpin + absl::Seconds(1));  // an idle period a poll misses
    during = SleepsDuringAnItem(*dt);
  }
  EXPECT_TRUE(SleepsAbove(*dt, during, absl::Seconds(20)));  // stopped polling
  during = SleepsDuringAnItem(*dt);                          // idle ~0 on the clock
  EXPECT_FALSE(SleepsAbove(*dt, during, absl::Milliseconds(20)));  // polling again
}

}  // namespace
}  // namespace metalserve
