// Unbatched calls, and lone calls of a batched model that the adaptive
// policy closes at once, run on the submitting thread (BatcherOptions::
// inline_max_cost): when they do, and every case in which the call is handed
// to an executor instead. Simulated clock: a batch's occupancy is the time
// the processor advances it by.
#include <atomic>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/batcher/batcher.h"
#include "tests/batcher/fake_task.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;

// Runs each batch "for" `took` of simulated time, noting the thread it ran
// on; a batch of key "hold" waits until Release().
class ThreadRecordingProcessor {
 public:
  ThreadRecordingProcessor(SimulatedClock* clock, absl::Duration took)
      : clock_(clock), took_(took) {}
  Batcher::ProcessFn Fn() {
    return [this](Batch batch) {
      if (batch.tasks.front()->batch_key() == "hold") {
        absl::MutexLock l(&mu_);
        holding_ = true;
        mu_.Await(absl::Condition(&released_));
      }
      clock_->AdvanceTime(took_);
      {
        absl::MutexLock l(&mu_);
        threads_.push_back(std::this_thread::get_id());
        for (auto& t : batch.tasks) {
          ran_on_[&static_cast<FakeTask&>(*t).outcome()] = std::this_thread::get_id();
          marked_[&static_cast<FakeTask&>(*t).outcome()] = batch.on_submitter;
        }
      }
      for (auto& t : batch.tasks) static_cast<FakeTask&>(*t).outcome().MarkRun();
    };
  }
  // Whether the task of `outcome` ran on the calling thread.
  bool RanHere(const TaskOutcome* outcome) {
    absl::MutexLock l(&mu_);
    auto it = ran_on_.find(outcome);
    return it != ran_on_.end() && it->second == std::this_thread::get_id();
  }
  // The thread the task of `outcome` ran on (a default id if it has not).
  std::thread::id RanOn(const TaskOutcome* outcome) {
    absl::MutexLock l(&mu_);
    auto it = ran_on_.find(outcome);
    return it == ran_on_.end() ? std::thread::id() : it->second;
  }
  // Batch::on_submitter of the batch that ran the task of `outcome`.
  bool Marked(const TaskOutcome* outcome) {
    absl::MutexLock l(&mu_);
    return marked_.at(outcome);
  }
  std::thread::id last_thread() {
    absl::MutexLock l(&mu_);
    return threads_.back();
  }
  void WaitHolding() {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(&holding_));
  }
  void Release() {
    absl::MutexLock l(&mu_);
    released_ = true;
  }

 private:
  SimulatedClock* const clock_;
  const absl::Duration took_;
  absl::Mutex mu_;
  std::vector<std::thread::id> threads_ ABSL_GUARDED_BY(mu_);
  std::map<const TaskOutcome*, std::thread::id> ran_on_ ABSL_GUARDED_BY(mu_);
  std::map<const TaskOutcome*, bool> marked_ ABSL_GUARDED_BY(mu_);
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

BatcherOptions Unbatched(absl::Duration inline_max_cost) {
  BatcherOptions o;
  o.policy = BatchingPolicy::kAdaptive;
  o.max_batch_size = 1;
  o.max_queue_delay = absl::Milliseconds(2);
  o.max_queue_size = 64;
  o.batch_costs = {{1, absl::Microseconds(20)}};  // the warm-up's device time
  o.inline_max_cost = inline_max_cost;
  return o;
}

// A batcher over `proc` on `clock` whose device is idle unless `device_idle`
// says otherwise.
std::unique_ptr<Batcher> MakeBatcher(
    const BatcherOptions& o, SimulatedClock& clock, ThreadRecordingProcessor& proc,
    Batcher::DeviceIdleFn device_idle = [] { return true; }) {
  return *Batcher::Create(o, &clock, proc.Fn(), nullptr, absl::Seconds(1), nullptr,
                          std::move(device_idle));
}

struct Call {
  std::shared_ptr<TaskOutcome> outcome = std::make_shared<TaskOutcome>();
  bool answered_in_submit = false;
  bool ran_here = false;  // on the submitting thread
};

// Submits one task that may run on its submitter (unless `allow` is false)
// and notes whether it was answered before Submit returned.
Call SubmitOne(Batcher& b, ThreadRecordingProcessor& proc, absl::string_view key = "k",
              bool allow = true, int64_t rows = 1) {
  Call c;
  auto task = std::make_unique<FakeTask>(rows, std::string(key), c.outcome);
  task->set_may_run_on_submitter(allow);
  std::unique_ptr<BatchTask> owned = std::move(task);
  EXPECT_THAT(b.Submit(&owned), IsOk());
  c.answered_in_submit = c.outcome->answered.HasBeenNotified();
  c.ran_here = proc.RanHere(c.outcome.get());
  return c;
}

// Runs kSubmitterWarmBatches calls through the executor, one at a time,
// each finished (its occupancy recorded) before the next.
void Warm(Batcher& b, ThreadRecordingProcessor& proc, SimulatedClock& clock) {
  for (int i = 0; i < Batcher::kSubmitterWarmBatches; ++i) {
    Call c = SubmitOne(b, proc);
    c.outcome->answered.WaitForNotification();
    clock.BlockUntilWaiters(1);  // the executor is back, the batch accounted
    EXPECT_FALSE(c.ran_here) << "call " << i << " before the occupancy was measured";
    EXPECT_FALSE(proc.Marked(c.outcome.get())) << i;
  }
}

// The arrange step most tests share: a simulated clock, a processor that
// takes 30 us of it per batch, and an unbatched batcher with the 100 us
// bound, whose device is idle while `device_idle` says so, warmed up past
// kSubmitterWarmBatches.
class WarmSubmitterRunTest : public ::testing::Test {
 protected:
  WarmSubmitterRunTest() { Warm(*batcher, proc, clock); }

  std::atomic<bool> device_idle{true};  // declared first: outlives the batcher
  SimulatedClock clock;
  ThreadRecordingProcessor proc{&clock, absl::Microseconds(30)};
  std::unique_ptr<Batcher> batcher = MakeBatcher(Unbatched(absl::Microseconds(100)), clock, proc,
                                                 [this] { return device_idle.load(); });
};

TEST_F(WarmSubmitterRunTest, AMeasuredCheapLoneCallRunsOnTheSubmittingThread) {
  EXPECT_NE(proc.last_thread(), std::this_thread::get_id());
  EXPECT_EQ(batcher->ran_on_submitters(), 0);

  for (int i = 0; i < 3; ++i) {
    Call c = SubmitOne(*batcher, proc);
    EXPECT_TRUE(c.ran_here) << i;
    EXPECT_TRUE(c.answered_in_submit) << i;
    EXPECT_TRUE(proc.Marked(c.outcome.get())) << i;  // the metrics count it
    EXPECT_EQ(c.outcome->runs.load(), 1);
    EXPECT_EQ(proc.last_thread(), std::this_thread::get_id());
  }
  EXPECT_EQ(batcher->ran_on_submitters(), 3);
  EXPECT_EQ(batcher->queued_rows(), 0);
}

TEST_F(WarmSubmitterRunTest, ACallRunOnItsSubmitterWakesNoIdleExecutor) {
  const int64_t wakeups = clock.wakeups();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(SubmitOne(*batcher, proc).ran_here) << i;
  // Make the executor look at its condition once more, and wait until it has.
  clock.AdvanceTime(absl::ZeroDuration());
  clock.BlockUntilWaiters(1);
  // It found nothing changed: it was not woken (a thread switch per call).
  EXPECT_EQ(clock.wakeups(), wakeups);
}

TEST(SubmitterRunTest, AboveTheBoundTheCallGoesToAnExecutor) {
  SimulatedClock clock;
  // Occupancy 300 us: above the bound, although the device time (20 us) is not.
  ThreadRecordingProcessor proc(&clock, absl::Microseconds(300));
  auto batcher = MakeBatcher(Unbatched(absl::Microseconds(100)), clock, proc);
  Warm(*batcher, proc, clock);
  Call c = SubmitOne(*batcher, proc);
  c.outcome->answered.WaitForNotification();
  EXPECT_FALSE(c.ran_here);
  EXPECT_NE(proc.last_thread(), std::this_thread::get_id());
  EXPECT_EQ(batcher->ran_on_submitters(), 0);
}

TEST_F(WarmSubmitterRunTest, ABusyDeviceATaskThatDeclinesOrAnOffSwitchHandsTheCallOver) {
  auto expect_executor = [&](Call c, const char* why) {
    c.outcome->answered.WaitForNotification();
    clock.BlockUntilWaiters(1);
    EXPECT_FALSE(c.ran_here) << why;
    EXPECT_NE(proc.last_thread(), std::this_thread::get_id()) << why;
  };
  device_idle = false;
  expect_executor(SubmitOne(*batcher, proc), "device busy");
  device_idle = true;
  expect_executor(SubmitOne(*batcher, proc, "k", /*allow=*/false), "task declines");
  EXPECT_EQ(batcher->ran_on_submitters(), 0);
  // The same conditions otherwise: it runs here.
  EXPECT_TRUE(SubmitOne(*batcher, proc).ran_here);

  // Off (0), or a batched model under the fixed policy: never, whatever was
  // measured.
  for (BatcherOptions o : {Unbatched(absl::ZeroDuration()), Unbatched(absl::Microseconds(100))}) {
    if (o.inline_max_cost > absl::ZeroDuration()) {
      o.policy = BatchingPolicy::kFixed;
      o.max_batch_size = 4;
      o.max_queue_delay = absl::ZeroDuration();
      o.batch_costs = {{4, absl::Microseconds(20)}};
    }
    SimulatedClock c2;
    ThreadRecordingProcessor p2(&c2, absl::Microseconds(30));
    auto b2 = MakeBatcher(o, c2, p2);
    for (int i = 0; i < 2 * Batcher::kSubmitterWarmBatches; ++i) {
      Call c = SubmitOne(*b2, p2);
      c.outcome->answered.WaitForNotification();
      c2.BlockUntilWaiters(1);
      EXPECT_FALSE(c.ran_here) << "max_batch_size " << o.max_batch_size << " call " << i;
    }
    EXPECT_EQ(b2->ran_on_submitters(), 0);
  }
}

// A batched model (max 4 rows) under the adaptive policy, with the
// device time of a batch of 1 and of 4 rows.
BatcherOptions BatchedAdaptive(absl::Duration device_cost_1, absl::Duration device_cost_4) {
  BatcherOptions o = Unbatched(absl::Microseconds(100));
  o.max_batch_size = 4;
  o.batch_costs = {{1, device_cost_1}, {4, device_cost_4}};
  return o;
}

TEST(SubmitterRunTest, ALoneCallOfABatchedModelRunsHereOnlyAtLightLoad) {
  SimulatedClock clock;
  ThreadRecordingProcessor proc(&clock, absl::Microseconds(30));
  auto batcher = MakeBatcher(
      BatchedAdaptive(absl::Microseconds(20), absl::Microseconds(25)), clock, proc);
  // Dense: the warm-up's calls come one run (30 us) apart. The rule would
  // close a lone row at once, but the next call is expected within four
  // runs: the executor takes it (the batches of load, not gRPC's thread).
  Warm(*batcher, proc, clock);
  Call dense = SubmitOne(*batcher, proc);
  dense.outcome->answered.WaitForNotification();
  clock.BlockUntilWaiters(1);
  EXPECT_FALSE(dense.ran_here);
  EXPECT_EQ(batcher->ran_on_submitters(), 0);

  // One client whose calls come 400 us apart (its round trip): once the
  // arrival estimate has followed, each runs on its submitter.
  for (int i = 0; i < 30; ++i) {
    clock.AdvanceTime(absl::Microseconds(400));
    Call c = SubmitOne(*batcher, proc);
    if (!c.ran_here) {
      c.outcome->answered.WaitForNotification();
      clock.BlockUntilWaiters(1);
    }
    if (i < 20) continue;
    EXPECT_TRUE(c.ran_here) << i;
    EXPECT_TRUE(c.answered_in_submit) << i;
    EXPECT_TRUE(proc.Marked(c.outcome.get())) << i;
  }
  EXPECT_GE(batcher->ran_on_submitters(), 10);
}

TEST(SubmitterRunTest, ALoneCallAfterALullBetweenFullBatchesGoesToTheExecutor) {
  SimulatedClock clock;
  ThreadRecordingProcessor proc(&clock, absl::Microseconds(30));
  auto batcher = MakeBatcher(
      BatchedAdaptive(absl::Microseconds(20), absl::Microseconds(25)), clock, proc);
  // Load in bursts, each a full batch (a request of 4 rows, max_batch_size),
  // then 1 ms of nothing, again and again: calls far apart (~1 ms, far
  // above four runs of a row, ~120 us), but every batch full.
  for (int g = 0; g < 12; ++g) {
    Call burst = SubmitOne(*batcher, proc, "k", /*allow=*/false, /*rows=*/4);
    burst.outcome->answered.WaitForNotification();
    clock.BlockUntilWaiters(1);
    clock.AdvanceTime(absl::Milliseconds(1));
  }
  // The first call after the lull: the arrivals alone look light, the
  // batches do not. The executor's.
  Call c = SubmitOne(*batcher, proc);
  c.outcome->answered.WaitForNotification();
  EXPECT_FALSE(c.ran_here);
  EXPECT_EQ(batcher->ran_on_submitters(), 0);
}

TEST_F(WarmSubmitterRunTest, ACallArrivingWhileABatchRunsWaitsForTheExecutor) {
  // Declines the submitter's thread: held there, it would block this test.
  Call held = SubmitOne(*batcher, proc, "hold", /*allow=*/false);
  proc.WaitHolding();
  // One batch in the processor: the next call queues for the executor, and
  // it is not run here (nor meanwhile: one executor, held).
  Call next = SubmitOne(*batcher, proc);
  EXPECT_FALSE(next.ran_here);
  EXPECT_FALSE(next.answered_in_submit);
  EXPECT_EQ(batcher->queued_rows(), 1);
  proc.Release();
  held.outcome->answered.WaitForNotification();
  next.outcome->answered.WaitForNotification();
  EXPECT_EQ(next.outcome->runs.load(), 1);
  EXPECT_NE(proc.last_thread(), std::this_thread::get_id());
}

// A submitter running its call on a thread of its own ("gRPC's" thread),
// held in the processor until the test releases it.
struct HeldSubmitter {
  Call call;
  std::thread thread;
  std::thread::id id;
  HeldSubmitter(Batcher& b, ThreadRecordingProcessor& proc) {
    absl::Notification started;
    thread = std::thread([&] {
      id = std::this_thread::get_id();
      started.Notify();
      call = SubmitOne(b, proc, "hold");
    });
    started.WaitForNotification();
    proc.WaitHolding();
  }
};

// Releases `first` and checks that `next`, which arrived while `first` ran
// on its submitter, was then run once by an executor, not by that
// submitter, which ran only its own call.
void ReleaseAndExpectAnExecutorRanTheNext(Batcher& b, ThreadRecordingProcessor& proc,
                                          HeldSubmitter& first, const Call& next) {
  proc.Release();
  first.thread.join();
  next.outcome->answered.WaitForNotification();
  EXPECT_NE(proc.RanOn(next.outcome.get()), first.id);
  EXPECT_FALSE(proc.Marked(next.outcome.get()));
  EXPECT_EQ(b.ran_on_submitters(), 1);
  EXPECT_EQ(next.outcome->runs.load(), 1);
}

TEST_F(WarmSubmitterRunTest, CallsArrivingMeanwhileFollowOnTheSubmitterUpToTheHoldBound) {
  // Each call takes 30 us (measured so: its estimate) and the hold bound is
  // kSubmitterHold x 100 us from the first call's arrival: a follow-on
  // starts while the time so far plus its 30 us fits, so after the first
  // call's 30 us, (5 x 100 - 30) / 30 = 15 of them (the 15th ends at 480 us;
  // a 16th would end at 510).
  absl::Duration unused;
  const int follow_ons = static_cast<int>(
      absl::IDivDuration(Batcher::kSubmitterHold * absl::Microseconds(100) - absl::Microseconds(30),
                         absl::Microseconds(30), &unused));
  ASSERT_EQ(follow_ons, 15);
  HeldSubmitter first(*batcher, proc);
  // While the first call runs on its submitter, more arrive (from other
  // gRPC threads): none is run or handed to an executor yet.
  std::vector<Call> later;
  for (int i = 0; i < follow_ons + 1; ++i) {
    later.push_back(SubmitOne(*batcher, proc));
    EXPECT_FALSE(later.back().answered_in_submit) << i;
  }
  EXPECT_EQ(batcher->queued_rows(), follow_ons + 1);
  proc.Release();
  first.thread.join();
  EXPECT_TRUE(first.call.answered_in_submit);
  // The submitter took the first follow_ons, in order, before its Submit
  // returned; the one beyond the bound went to the executor.
  for (int i = 0; i < follow_ons; ++i) {
    EXPECT_TRUE(later[i].outcome->answered.HasBeenNotified()) << i;
    EXPECT_EQ(proc.RanOn(later[i].outcome.get()), first.id) << i;
    EXPECT_TRUE(proc.Marked(later[i].outcome.get())) << i;
  }
  const Call& last = later.back();
  last.outcome->answered.WaitForNotification();
  EXPECT_NE(proc.RanOn(last.outcome.get()), first.id);
  EXPECT_NE(proc.RanOn(last.outcome.get()), std::this_thread::get_id());
  EXPECT_FALSE(proc.Marked(last.outcome.get()));
  EXPECT_EQ(batcher->ran_on_submitters(), 1 + follow_ons);
  for (const Call& c : later) EXPECT_EQ(c.outcome->runs.load(), 1);
}

// A bound that never ends the hold (--inline_max_cost=inf) still stops the
// follow-ons at the count backstop.
TEST(SubmitterRunTest, AnUnboundedHoldStopsFollowOnsAtTheBackstop) {
  SimulatedClock clock;
  ThreadRecordingProcessor proc(&clock, absl::Microseconds(30));
  BatcherOptions o = Unbatched(absl::InfiniteDuration());
  o.max_queue_size = 2 * Batcher::kMaxFollowOns;
  auto batcher = MakeBatcher(o, clock, proc);
  Warm(*batcher, proc, clock);
  HeldSubmitter first(*batcher, proc);
  std::vector<Call> later;
  for (int i = 0; i < Batcher::kMaxFollowOns + 1; ++i) {
    later.push_back(SubmitOne(*batcher, proc));
  }
  proc.Release();
  first.thread.join();
  EXPECT_EQ(batcher->ran_on_submitters(), 1 + Batcher::kMaxFollowOns);
  const Call& last = later.back();
  last.outcome->answered.WaitForNotification();
  EXPECT_NE(proc.RanOn(last.outcome.get()), first.id);
  for (const Call& c : later) EXPECT_EQ(c.outcome->runs.load(), 1);
}

// Without follow-ons (a model on an accelerator), a call arriving while
// another runs on its submitter goes to an executor at once: it is answered
// while the submitter is still held (with follow-ons it would wait for that
// submitter; the bounded wait then fails instead of hanging the test).
TEST(SubmitterRunTest, WithoutFollowOnsACallArrivingMeanwhileRunsOnAnExecutorAtOnce) {
  SimulatedClock clock;
  ThreadRecordingProcessor proc(&clock, absl::Microseconds(30));
  BatcherOptions o = Unbatched(absl::Microseconds(100));
  o.inline_follow_ons = false;
  o.num_executors = 2;  // the call on its submitter counts as one in flight
  auto batcher = MakeBatcher(o, clock, proc);
  Warm(*batcher, proc, clock);
  HeldSubmitter first(*batcher, proc);
  Call next = SubmitOne(*batcher, proc);
  EXPECT_FALSE(next.ran_here);
  EXPECT_TRUE(next.outcome->answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_NE(proc.RanOn(next.outcome.get()), first.id);
  EXPECT_FALSE(proc.Marked(next.outcome.get()));
  proc.Release();
  first.thread.join();
  EXPECT_TRUE(first.call.answered_in_submit);
  next.outcome->answered.WaitForNotification();
  EXPECT_EQ(batcher->ran_on_submitters(), 1);
  EXPECT_EQ(next.outcome->runs.load(), 1);
}

// Without follow-ons, a call that its executor cannot take yet (one
// executor, the call on its submitter counting as in flight) is still the
// executor's once the submitter is done: the submitter does not take it.
TEST(SubmitterRunTest, WithoutFollowOnsTheSubmitterTakesNoCallAfterItsOwn) {
  SimulatedClock clock;
  ThreadRecordingProcessor proc(&clock, absl::Microseconds(30));
  BatcherOptions o = Unbatched(absl::Microseconds(100));
  o.inline_follow_ons = false;
  auto batcher = MakeBatcher(o, clock, proc);
  Warm(*batcher, proc, clock);
  HeldSubmitter first(*batcher, proc);
  Call next = SubmitOne(*batcher, proc);
  EXPECT_FALSE(next.answered_in_submit);
  ReleaseAndExpectAnExecutorRanTheNext(*batcher, proc, first, next);
}

TEST_F(WarmSubmitterRunTest, ADeviceBusyAfterTheSubmittersCallLeavesTheRestToTheExecutor) {
  HeldSubmitter first(*batcher, proc);
  Call next = SubmitOne(*batcher, proc);
  EXPECT_FALSE(next.answered_in_submit);
  device_idle = false;  // another model took the device meanwhile
  ReleaseAndExpectAnExecutorRanTheNext(*batcher, proc, first, next);
}

}  // namespace
}  // namespace metalserve
