// Priority levels in the BatchQueue, on simulated time: order, the
// starvation bound, per-level bounds and timeouts, the range check.
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/batcher/batch_queue.h"
#include "tests/batcher/fake_task.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);
constexpr absl::Duration kMs = absl::Milliseconds(1);

BatcherOptions Levels(int levels, int64_t max_batch = 4, absl::Duration delay = 5 * kMs) {
  BatcherOptions o;
  o.max_batch_size = max_batch;
  o.max_queue_delay = delay;
  o.max_queue_size = 256;
  o.priority_levels = levels;
  return o;
}

void Admit(BatchQueue& q, std::unique_ptr<BatchTask> t, absl::Time now) {
  ASSERT_THAT(q.Admit(&t, now), IsOk());
}

// Ids of the tasks of the batch Poll gives at `now` (empty: none).
std::vector<int> NextBatch(BatchQueue& q, absl::Time now) {
  std::vector<int> ids;
  auto r = q.Poll(now, false);
  if (!r.batch.has_value()) return ids;
  for (auto& t : r.batch->tasks) ids.push_back(static_cast<FakeTask*>(t.get())->id());
  return ids;
}

TEST(PriorityTest, AdaptiveBatchHeadedByAHigherLevelIsNotHeldToFill) {
  // A fast model under load at level 2: the adaptive rule keeps a batch
  // filling while another executor is busy. A level-1 request goes at once
  // (taking the waiting level-2 rows along) instead of waiting with them.
  BatcherOptions o = Levels(2, /*max_batch=*/32);
  o.policy = BatchingPolicy::kAdaptive;
  o.batch_costs = {{1, absl::Microseconds(410)}, {32, absl::Microseconds(720)}};
  BatchQueue q(o);
  const absl::Duration gap = absl::Microseconds(20);
  absl::Time t = kT0;
  for (int i = 0; i < 100; ++i, t += gap) {  // the arrival rate: 50,000/s
    Admit(q, MakePriorityTask(1, 2, 0), t);
    q.Poll(t, /*draining=*/true);
  }
  q.SetDeviceFreeAt(t + absl::Microseconds(500));  // the other executor is busy
  for (int id = 2; id < 5; ++id, t += gap) {
    Admit(q, MakePriorityTask(1, 2, id), t);
    ASSERT_TRUE(NextBatch(q, t).empty()) << "level 2 keeps filling";
  }
  Admit(q, MakePriorityTask(1, 1, /*id=*/1), t);
  EXPECT_THAT(NextBatch(q, t), ElementsAre(1, 2, 3, 4));
}

TEST(PriorityTest, BatchesGoInPriorityOrderWhateverTheArrivalOrder) {
  BatchQueue q(Levels(3));
  Admit(q, MakePriorityTask(1, 3, /*id=*/3, "c"), kT0);
  Admit(q, MakePriorityTask(1, 2, /*id=*/2, "b"), kT0 + kMs);
  Admit(q, MakePriorityTask(1, 1, /*id=*/1, "a"), kT0 + 2 * kMs);
  const absl::Time due = kT0 + 10 * kMs;
  EXPECT_THAT(NextBatch(q, due), ElementsAre(1));
  EXPECT_THAT(NextBatch(q, due), ElementsAre(2));
  EXPECT_THAT(NextBatch(q, due), ElementsAre(3));
}

TEST(PriorityTest, HigherPriorityHeadsTheBatchAndLowerRowsFillItsRoom) {
  BatchQueue q(Levels(2));
  Admit(q, MakePriorityTask(2, 2, /*id=*/20), kT0);
  Admit(q, MakePriorityTask(1, 2, /*id=*/21), kT0);
  Admit(q, MakePriorityTask(2, 1, /*id=*/10), kT0 + kMs);
  // Full at once: the high request first, then the older low one in order.
  EXPECT_THAT(NextBatch(q, kT0 + kMs), ElementsAre(10, 20));
  EXPECT_THAT(NextBatch(q, kT0 + 10 * kMs), ElementsAre(21));
}

TEST(PriorityTest, HighPriorityRequestDoesNotWaitForALowerBatchStillForming) {
  BatchQueue q(Levels(2, /*max_batch=*/4, /*delay=*/5 * kMs));
  Admit(q, MakePriorityTask(1, 2, /*id=*/20, "low"), kT0);
  EXPECT_TRUE(NextBatch(q, kT0).empty());  // forming: delay not yet passed
  Admit(q, MakePriorityTask(4, 1, /*id=*/10, "high"), kT0 + kMs);
  // The high request is a full batch of its own: it goes at once, without
  // waiting for the low batch to close first.
  EXPECT_THAT(NextBatch(q, kT0 + kMs), ElementsAre(10));
  EXPECT_THAT(NextBatch(q, kT0 + 5 * kMs), ElementsAre(20));
}

TEST(PriorityTest, DueLowerBatchRunsWhileTheHigherOneIsStillForming) {
  BatchQueue q(Levels(2, /*max_batch=*/4, /*delay=*/5 * kMs));
  Admit(q, MakePriorityTask(4, 2, /*id=*/20, "low"), kT0);   // full
  Admit(q, MakePriorityTask(1, 1, /*id=*/10, "high"), kT0);  // forming
  EXPECT_THAT(NextBatch(q, kT0), ElementsAre(20));
  EXPECT_THAT(NextBatch(q, kT0 + 5 * kMs), ElementsAre(10));
}

TEST(PriorityTest, LowestLevelHeadsOneBatchInEveryShareEvery) {
  BatcherOptions o = Levels(2, /*max_batch=*/1, /*delay=*/absl::ZeroDuration());
  o.lower_priority_share_every = 4;
  BatchQueue q(o);
  Admit(q, MakePriorityTask(1, 2, /*id=*/200), kT0);
  Admit(q, MakePriorityTask(1, 2, /*id=*/201), kT0);
  // A steady stream of high requests: always one waiting.
  std::vector<int> order;
  for (int i = 0; i < 8; ++i) {
    Admit(q, MakePriorityTask(1, 1, /*id=*/100 + i), kT0 + (i + 1) * kMs);
    std::vector<int> b = NextBatch(q, kT0 + (i + 1) * kMs);
    ASSERT_EQ(b.size(), 1u);
    order.push_back(b[0]);
  }
  // Three high batches pass the low requests over; the fourth is theirs.
  EXPECT_THAT(order, ElementsAre(100, 101, 102, 200, 103, 104, 105, 201));
}

TEST(PriorityTest, PriorityOutOfRangeIsInvalidArgumentNamingTheRange) {
  BatchQueue q(Levels(3));
  for (int bad : {4, -1}) {
    std::unique_ptr<BatchTask> t = MakePriorityTask(1, bad, 0);
    EXPECT_THAT(q.Admit(&t, kT0),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("priority ", bad, " is out of range [1, 3]"))));
    EXPECT_NE(t, nullptr);
  }
}

TEST(PriorityTest, UnsetPriorityGetsTheDefaultLevel) {
  BatcherOptions o = Levels(3);
  BatchQueue lowest(o);
  Admit(lowest, MakePriorityTask(1, 0, 0), kT0);
  EXPECT_EQ(lowest.queued_rows_at(3), 1);
  o.default_priority = 2;
  BatchQueue second(o);
  Admit(second, MakePriorityTask(1, 0, 0), kT0);
  EXPECT_EQ(second.queued_rows_at(2), 1);
}

TEST(PriorityTest, EachLevelHasItsOwnQueueBound) {
  BatcherOptions o = Levels(2);
  o.priority_queue_rows = {0, 2};
  BatchQueue q(o);
  Admit(q, MakePriorityTask(2, 2, 0), kT0);
  std::unique_ptr<BatchTask> over = MakePriorityTask(1, 2, 1);
  EXPECT_THAT(q.Admit(&over, kT0), StatusIs(absl::StatusCode::kUnavailable,
                                            HasSubstr("queue of priority 2 is full")));
  Admit(q, MakePriorityTask(3, 1, 2), kT0);  // level 1 is not bounded by it
  EXPECT_EQ(q.queued_rows_at(1), 3);
}

TEST(PriorityTest, EachLevelHasItsOwnDefaultTimeout) {
  BatcherOptions o = Levels(2, /*max_batch=*/4, /*delay=*/absl::Seconds(1));
  o.priority_timeouts = {absl::ZeroDuration(), 10 * kMs};
  BatchQueue q(o);
  Admit(q, MakePriorityTask(1, 1, 1, "a"), kT0);
  Admit(q, MakePriorityTask(1, 2, 2, "b"), kT0);
  auto before = q.Poll(kT0, false);
  EXPECT_EQ(before.wake_at, kT0 + 10 * kMs);
  auto r = q.Poll(kT0 + 10 * kMs, false);
  ASSERT_EQ(r.expired.size(), 1u);
  EXPECT_EQ(static_cast<FakeTask*>(r.expired[0].get())->id(), 2);
  EXPECT_EQ(q.queued_rows_at(1), 1);
  EXPECT_EQ(q.queued_rows_at(2), 0);
}

TEST(PriorityTest, InvalidPriorityOptionsAreRefusedNamingTheField) {
  BatcherOptions o = Levels(2);
  o.default_priority = 3;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("default_priority")));
  o = Levels(0);
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("priority_levels must be >= 1, got 0")));
  o = Levels(2);
  o.lower_priority_share_every = 1;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("lower_priority_share_every")));
}

}  // namespace
}  // namespace metalserve
