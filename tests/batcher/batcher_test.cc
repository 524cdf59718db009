#include "server/batcher/batcher.h"

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/batcher/fake_task.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;

// Records every batch the batcher hands over and marks its tasks as run.
class RecordingProcessor {
 public:
  Batcher::ProcessFn Fn() {
    return [this](Batch batch) {
      {
        absl::MutexLock l(&mu_);
        reasons_.push_back(batch.reason);
        rows_.push_back(batch.rows);
      }
      for (auto& t : batch.tasks) static_cast<FakeTask&>(*t).outcome().MarkRun();
    };
  }
  int batches() {
    absl::MutexLock l(&mu_);
    return static_cast<int>(rows_.size());
  }
  std::vector<CloseReason> reasons() {
    absl::MutexLock l(&mu_);
    return reasons_;
  }
  std::vector<int64_t> rows() {
    absl::MutexLock l(&mu_);
    return rows_;
  }

 private:
  absl::Mutex mu_;
  std::vector<CloseReason> reasons_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> rows_ ABSL_GUARDED_BY(mu_);
};

BatcherOptions Opts(int64_t max_batch, absl::Duration delay, int executors = 1) {
  BatcherOptions o;
  o.max_batch_size = max_batch;
  o.max_queue_delay = delay;
  o.max_queue_size = 256;
  o.num_executors = executors;
  return o;
}

TEST(BatcherTest, FlushesPartialBatchWhenDelayExpiresAndNotATickBefore) {
  SimulatedClock clock;
  RecordingProcessor proc;
  auto batcher = Batcher::Create(Opts(8, absl::Milliseconds(5)), &clock, proc.Fn());
  ASSERT_THAT(batcher, IsOk());
  auto outcome = std::make_shared<TaskOutcome>();
  auto task = MakeTask(2, "k", absl::InfiniteFuture(), outcome);
  ASSERT_THAT((*batcher)->Submit(&task), IsOk());

  clock.BlockUntilWaiters(1);
  clock.AdvanceTime(absl::Milliseconds(5) - absl::Nanoseconds(1));
  // The executor has seen the new time and gone back to waiting.
  clock.BlockUntilWaiters(1);
  EXPECT_EQ(proc.batches(), 0);
  EXPECT_FALSE(outcome->answered.HasBeenNotified());

  clock.AdvanceTime(absl::Nanoseconds(1));
  outcome->answered.WaitForNotification();
  EXPECT_THAT(proc.reasons(), ::testing::ElementsAre(CloseReason::kDelayExpired));
  EXPECT_EQ(outcome->runs.load(), 1);
}

TEST(BatcherTest, SendsFullBatchWithoutWaitingForDelay) {
  SimulatedClock clock;
  RecordingProcessor proc;
  auto batcher = *Batcher::Create(Opts(4, absl::Hours(1)), &clock, proc.Fn());
  std::vector<std::shared_ptr<TaskOutcome>> outcomes;
  for (int i = 0; i < 4; ++i) {
    outcomes.push_back(std::make_shared<TaskOutcome>());
    auto t = MakeTask(1, "k", absl::InfiniteFuture(), outcomes.back());
    ASSERT_THAT(batcher->Submit(&t), IsOk());
  }
  for (auto& o : outcomes) o->answered.WaitForNotification();  // time never moved
  EXPECT_EQ(proc.rows().back(), 4);
  EXPECT_EQ(proc.reasons().back(), CloseReason::kFull);
}

TEST(BatcherTest, ExpiresQueuedRequestAtDeadlineWithoutRunningIt) {
  SimulatedClock clock;
  RecordingProcessor proc;
  auto batcher = *Batcher::Create(Opts(8, absl::Milliseconds(10)), &clock, proc.Fn());
  auto outcome = std::make_shared<TaskOutcome>();
  auto t = MakeTask(1, "k", clock.TimeNow() + absl::Milliseconds(3), outcome);
  ASSERT_THAT(batcher->Submit(&t), IsOk());
  clock.BlockUntilWaiters(1);
  clock.AdvanceTime(absl::Milliseconds(3));
  outcome->answered.WaitForNotification();
  EXPECT_THAT(outcome->abort_status,
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(outcome->runs.load(), 0);
  EXPECT_EQ(proc.batches(), 0);
}

TEST(BatcherTest, DropsCancelledRequestBeforeItRuns) {
  SimulatedClock clock;
  RecordingProcessor proc;
  auto batcher = *Batcher::Create(Opts(8, absl::Milliseconds(10)), &clock, proc.Fn());
  auto gone = std::make_shared<TaskOutcome>();
  auto stays = std::make_shared<TaskOutcome>();
  auto t1 = MakeTask(1, "k", absl::InfiniteFuture(), gone);
  auto t2 = MakeTask(1, "k", absl::InfiniteFuture(), stays);
  ASSERT_THAT(batcher->Submit(&t1), IsOk());
  ASSERT_THAT(batcher->Submit(&t2), IsOk());
  gone->cancelled = true;
  clock.BlockUntilWaiters(1);
  clock.AdvanceTime(absl::Milliseconds(10));
  gone->answered.WaitForNotification();
  stays->answered.WaitForNotification();
  EXPECT_THAT(gone->abort_status, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(gone->runs.load(), 0);
  EXPECT_EQ(stays->runs.load(), 1);
  EXPECT_THAT(proc.rows(), ::testing::ElementsAre(1));
}

// Records the depths the batcher reports.
class DepthRecorder {
 public:
  Batcher::DepthFn Fn() {
    return [this](int64_t rows) {
      absl::MutexLock l(&mu_);
      depths_.push_back(rows);
    };
  }
  std::vector<int64_t> depths() {
    absl::MutexLock l(&mu_);
    return depths_;
  }

 private:
  absl::Mutex mu_;
  std::vector<int64_t> depths_ ABSL_GUARDED_BY(mu_);
};

TEST(BatcherTest, DepthReturnsToZeroWhenQueuedTasksExpire) {
  SimulatedClock clock;
  RecordingProcessor proc;
  DepthRecorder depth;
  auto batcher = *Batcher::Create(Opts(8, absl::Hours(1)), &clock, proc.Fn(),
                                  nullptr, absl::Seconds(1), depth.Fn());
  std::vector<std::shared_ptr<TaskOutcome>> outcomes;
  for (int i = 0; i < 3; ++i) {
    outcomes.push_back(std::make_shared<TaskOutcome>());
    auto t = MakeTask(2, "k", clock.TimeNow() + absl::Milliseconds(5), outcomes.back());
    ASSERT_THAT(batcher->Submit(&t), IsOk());
  }
  EXPECT_THAT(depth.depths(), ::testing::ElementsAre(2, 4, 6));
  clock.BlockUntilWaiters(1);
  clock.AdvanceTime(absl::Milliseconds(5));
  for (auto& o : outcomes) o->answered.WaitForNotification();
  // The executor reports before it aborts the tasks.
  EXPECT_EQ(depth.depths().back(), 0);
  EXPECT_EQ(proc.batches(), 0);
  for (auto& o : outcomes) {
    EXPECT_THAT(o->abort_status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  }
}

TEST(BatcherTest, DepthReturnsToZeroWhenQueuedTasksAreCancelled) {
  SimulatedClock clock;
  RecordingProcessor proc;
  DepthRecorder depth;
  auto batcher = *Batcher::Create(Opts(8, absl::Hours(1)), &clock, proc.Fn(),
                                  nullptr, absl::Seconds(1), depth.Fn());
  auto outcome = std::make_shared<TaskOutcome>();
  auto t = MakeTask(3, "k", absl::InfiniteFuture(), outcome);
  ASSERT_THAT(batcher->Submit(&t), IsOk());
  outcome->cancelled = true;
  clock.BlockUntilWaiters(1);
  clock.AdvanceTime(absl::Hours(1));  // the next poll finds it cancelled
  outcome->answered.WaitForNotification();
  EXPECT_THAT(outcome->abort_status, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(depth.depths(), ::testing::ElementsAre(3, 0));
}

TEST(BatcherTest, DepthReturnsToZeroWhenShutdownDrainsTheQueue) {
  SimulatedClock clock;
  RecordingProcessor proc;
  DepthRecorder depth;
  auto batcher = *Batcher::Create(Opts(8, absl::Hours(1)), &clock, proc.Fn(),
                                  nullptr, absl::Seconds(1), depth.Fn());
  auto t = MakeTask(5);
  ASSERT_THAT(batcher->Submit(&t), IsOk());
  batcher->Shutdown();
  EXPECT_THAT(depth.depths(), ::testing::ElementsAre(5, 0));
}

TEST(BatcherTest, ShutdownDrainsAcceptedTasksAndRefusesNewOnes) {
  SimulatedClock clock;
  RecordingProcessor proc;
  auto batcher = *Batcher::Create(Opts(8, absl::Hours(1)), &clock, proc.Fn());
  auto outcome = std::make_shared<TaskOutcome>();
  auto t = MakeTask(3, "k", absl::InfiniteFuture(), outcome);
  ASSERT_THAT(batcher->Submit(&t), IsOk());
  batcher->Shutdown();
  EXPECT_EQ(outcome->runs.load(), 1);
  EXPECT_THAT(proc.reasons(), ::testing::ElementsAre(CloseReason::kDraining));
  auto late = MakeTask(1);
  EXPECT_THAT(batcher->Submit(&late), StatusIs(absl::StatusCode::kUnavailable));
}

// Many producers, random sizes, some deadlines and cancellations: every task
// is answered exactly once, and no batch exceeds the limit or mixes keys.
void ExpectExactlyOnceUnderConcurrentProducers(int executors, int64_t rows_per_slot) {
  constexpr int kProducers = 8;
  constexpr int kPerProducer = 400;
  std::atomic<int> max_rows_seen{0};
  std::atomic<int> mixed{0};
  auto process = [&](Batch batch) {
    int64_t rows = 0;
    for (auto& t : batch.tasks) {
      rows += t->rows();
      if (t->batch_key() != batch.tasks.front()->batch_key()) mixed++;
      static_cast<FakeTask&>(*t).outcome().MarkRun();
    }
    int prev = max_rows_seen.load();
    while (rows > prev && !max_rows_seen.compare_exchange_weak(prev, rows)) {
    }
  };
  BatcherOptions o = Opts(8, absl::Microseconds(200), executors);
  o.max_queue_size = 64;
  o.rows_per_slot = rows_per_slot;
  auto batcher = *Batcher::Create(o, Clock::RealClock(), process);

  std::vector<std::shared_ptr<TaskOutcome>> outcomes(kProducers * kPerProducer);
  std::atomic<int> refused{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      std::mt19937 rng(p);
      for (int i = 0; i < kPerProducer; ++i) {
        const int idx = p * kPerProducer + i;
        auto outcome = std::make_shared<TaskOutcome>();
        outcomes[idx] = outcome;
        const absl::Time deadline =
            rng() % 10 == 0 ? absl::Now() + absl::Microseconds(50)
                            : absl::InfiniteFuture();
        auto t = MakeTask(1 + rng() % 3, rng() % 2 ? "a" : "b", deadline, outcome);
        if (rng() % 20 == 0) outcome->cancelled = true;
        if (!batcher->Submit(&t).ok()) {
          refused++;
          t->Abort(absl::UnavailableError("refused"));
        }
      }
    });
  }
  for (auto& t : producers) t.join();
  batcher->Shutdown();

  for (const auto& o : outcomes) {
    ASSERT_EQ(o->runs.load() + o->aborts.load(), 1);
  }
  EXPECT_LE(max_rows_seen.load(), 8);
  EXPECT_EQ(mixed.load(), 0);
  EXPECT_EQ(batcher->queued_rows(), 0);
}

TEST(BatcherTest, ExactlyOnceDeliveryUnderConcurrentProducers) {
  ExpectExactlyOnceUnderConcurrentProducers(/*executors=*/2, /*rows_per_slot=*/0);
}

TEST(BatcherTest, ExactlyOnceDeliveryWithExecutorsHeldByTheInFlightLimit) {
  // Four executors, a third and fourth batch only with 8+ rows per batch in
  // the server: executors are held and let go all the time.
  ExpectExactlyOnceUnderConcurrentProducers(/*executors=*/4, /*rows_per_slot=*/8);
}

// Holds every batch it is handed until Release(); counts them.
class GatedProcessor {
 public:
  Batcher::ProcessFn Fn() {
    return [this](Batch batch) {
      absl::MutexLock l(&mu_);
      ++entered_;
      mu_.Await(absl::Condition(&released_));
      for (auto& t : batch.tasks) static_cast<FakeTask&>(*t).outcome().MarkRun();
    };
  }
  void Release() {
    absl::MutexLock l(&mu_);
    released_ = true;
  }
  int entered() {
    absl::MutexLock l(&mu_);
    return entered_;
  }

 private:
  absl::Mutex mu_;
  int entered_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

// Waits (in real time, bounded) until `done` holds: for a state the
// executors reach on their own, never as a measurement.
template <typename F>
bool Eventually(F done) {
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!done()) {
    if (absl::Now() > give_up) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(BatcherTest, InFlightLimitHoldsExecutorsUntilTheRowsGiveEachBatchItsShare) {
  SimulatedClock clock;
  GatedProcessor proc;
  BatcherOptions o = Opts(4, absl::Hours(1), /*executors=*/4);
  o.rows_per_slot = 8;
  auto batcher = *Batcher::Create(o, &clock, proc.Fn());
  std::vector<std::shared_ptr<TaskOutcome>> outcomes;
  auto submit = [&](int n) {
    for (int i = 0; i < n; ++i) {
      outcomes.push_back(std::make_shared<TaskOutcome>());
      auto t = MakeTask(1, "k", absl::InfiniteFuture(), outcomes.back());
      ASSERT_THAT(batcher->Submit(&t), IsOk());
    }
  };
  // 16 rows in the server, 8 per slot: two batches in flight, although four
  // full batches wait and four executors are free.
  submit(16);
  ASSERT_TRUE(Eventually([&] { return proc.entered() >= 2; }));
  // A new simulated time counts only the executors that wait having seen
  // every submission: the two held back (without the limit all four would
  // be in the processor and none would wait).
  clock.AdvanceTime(absl::Nanoseconds(1));
  ASSERT_TRUE(Eventually([&] { return clock.waiters() >= 2 || proc.entered() > 2; }));
  EXPECT_EQ(proc.entered(), 2);
  EXPECT_EQ(batcher->queued_rows(), 8);
  // 32 rows: four.
  submit(16);
  ASSERT_TRUE(Eventually([&] { return proc.entered() == 4; }));
  EXPECT_EQ(batcher->queued_rows(), 16);
  proc.Release();
  for (auto& out : outcomes) out->answered.WaitForNotification();
  for (auto& out : outcomes) EXPECT_EQ(out->runs.load(), 1);
  EXPECT_EQ(batcher->queued_rows(), 0);
}

TEST(BatcherTest, ExecutorHeldByTheInFlightLimitStillExpiresDeadlines) {
  SimulatedClock clock;
  GatedProcessor proc;
  BatcherOptions o = Opts(1, absl::Hours(1), /*executors=*/3);
  o.rows_per_slot = 8;
  auto batcher = *Batcher::Create(o, &clock, proc.Fn());
  std::vector<std::shared_ptr<TaskOutcome>> running;
  for (int i = 0; i < 2; ++i) {
    running.push_back(std::make_shared<TaskOutcome>());
    auto t = MakeTask(1, "k", absl::InfiniteFuture(), running.back());
    ASSERT_THAT(batcher->Submit(&t), IsOk());
  }
  ASSERT_TRUE(Eventually([&] { return proc.entered() == 2; }));
  auto late = std::make_shared<TaskOutcome>();
  auto t = MakeTask(1, "k", clock.TimeNow() + absl::Milliseconds(3), late);
  ASSERT_THAT(batcher->Submit(&t), IsOk());
  // The third executor is held back (3 rows: 2 slots), yet the deadline is
  // enforced (without the limit it would run the task: a third batch).
  clock.AdvanceTime(absl::Nanoseconds(1));
  ASSERT_TRUE(Eventually([&] { return clock.waiters() >= 1 || proc.entered() > 2; }));
  EXPECT_EQ(proc.entered(), 2);
  clock.AdvanceTime(absl::Milliseconds(3) - absl::Nanoseconds(1));
  ASSERT_TRUE(Eventually([&] { return late->answered.HasBeenNotified(); }));
  EXPECT_THAT(late->abort_status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(late->runs.load(), 0);
  proc.Release();
  for (auto& out : running) out->answered.WaitForNotification();
}

}  // namespace
}  // namespace metalserve
