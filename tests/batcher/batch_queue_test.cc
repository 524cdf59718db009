#include "server/batcher/batch_queue.h"

#include <limits>
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/batcher/fake_task.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);

BatcherOptions Opts(int64_t max_batch, absl::Duration delay,
                    std::vector<int64_t> allowed = {}, int64_t queue = 64) {
  BatcherOptions o;
  o.max_batch_size = max_batch;
  o.max_queue_delay = delay;
  o.allowed_batch_sizes = std::move(allowed);
  o.max_queue_size = queue;
  return o;
}

void Admit(BatchQueue& q, std::unique_ptr<BatchTask> t, absl::Time now) {
  ASSERT_THAT(q.Admit(&t, now), IsOk());
}

TEST(BatchQueueTest, FlushesPartialBatchExactlyWhenDelayExpires) {
  BatchQueue q(Opts(8, absl::Milliseconds(5)));
  Admit(q, MakeTask(1), kT0);
  Admit(q, MakeTask(2), kT0 + absl::Milliseconds(1));

  auto early = q.Poll(kT0 + absl::Milliseconds(5) - absl::Nanoseconds(1), false);
  EXPECT_FALSE(early.batch.has_value());
  EXPECT_EQ(early.wake_at, kT0 + absl::Milliseconds(5));

  auto due = q.Poll(kT0 + absl::Milliseconds(5), false);
  ASSERT_TRUE(due.batch.has_value());
  EXPECT_EQ(due.batch->reason, CloseReason::kDelayExpired);
  EXPECT_EQ(due.batch->rows, 3);
  EXPECT_EQ(due.batch->tasks.size(), 2u);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.queued_rows(), 0);
}

TEST(BatchQueueTest, DelayCountsFromOldestRequest) {
  BatchQueue q(Opts(8, absl::Milliseconds(5)));
  Admit(q, MakeTask(1), kT0);
  Admit(q, MakeTask(1), kT0 + absl::Milliseconds(4));
  // The newer task does not extend the oldest one's wait.
  auto r = q.Poll(kT0 + absl::Milliseconds(5), false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->rows, 2);
}

TEST(BatchQueueTest, FillsToMaxBatchSizeWithoutWaitingForDelay) {
  BatchQueue q(Opts(4, absl::Seconds(10)));
  Admit(q, MakeTask(1), kT0);
  Admit(q, MakeTask(3), kT0);
  Admit(q, MakeTask(2), kT0);
  auto r = q.Poll(kT0, false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->reason, CloseReason::kFull);
  EXPECT_EQ(r.batch->rows, 4);
  EXPECT_EQ(q.queued_rows(), 2);
}

TEST(BatchQueueTest, ClosesAsFullWhenNextTaskDoesNotFit) {
  BatchQueue q(Opts(4, absl::Seconds(10)));
  Admit(q, MakeTask(3), kT0);
  Admit(q, MakeTask(2), kT0);
  auto r = q.Poll(kT0, false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->reason, CloseReason::kFull);
  EXPECT_EQ(r.batch->rows, 3);
}

TEST(BatchQueueTest, ZeroDelayTakesWhateverWaits) {
  BatchQueue q(Opts(8, absl::ZeroDuration()));
  Admit(q, MakeTask(2), kT0);
  auto r = q.Poll(kT0, false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->reason, CloseReason::kNoDelay);
}

TEST(BatchQueueTest, PadsToNextAllowedSize) {
  BatchQueue q(Opts(16, absl::Milliseconds(1), {1, 2, 4, 8, 16}));
  Admit(q, MakeTask(2), kT0);
  Admit(q, MakeTask(3), kT0);
  auto r = q.Poll(kT0 + absl::Milliseconds(1), false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->rows, 5);
  EXPECT_EQ(r.batch->padded_rows, 8);
}

TEST(BatchQueueTest, RefusesWithUnavailableWhenQueueFull) {
  BatchQueue q(Opts(4, absl::Seconds(1), {}, /*queue=*/5));
  Admit(q, MakeTask(4), kT0);
  auto t = MakeTask(2);
  EXPECT_THAT(q.Admit(&t, kT0),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("queue is full")));
  ASSERT_NE(t, nullptr) << "a refused task stays with the caller";
  auto fits = MakeTask(1);
  EXPECT_THAT(q.Admit(&fits, kT0), IsOk());
  EXPECT_EQ(q.queued_rows(), 5);
}

TEST(BatchQueueTest, RefusesTaskLargerThanMaxBatchSize) {
  BatchQueue q(Opts(4, absl::Seconds(1)));
  auto t = MakeTask(5);
  EXPECT_THAT(q.Admit(&t, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("5 rows")));
}

TEST(BatchQueueTest, ExpiresQueuedTaskAtDeadlineWithoutBatchingIt) {
  BatchQueue q(Opts(8, absl::Milliseconds(10)));
  Admit(q, MakeTask(1, "k", kT0 + absl::Milliseconds(3)), kT0);
  Admit(q, MakeTask(1, "k"), kT0);

  auto before = q.Poll(kT0 + absl::Milliseconds(3) - absl::Nanoseconds(1), false);
  EXPECT_TRUE(before.expired.empty());
  EXPECT_EQ(before.wake_at, kT0 + absl::Milliseconds(3));

  auto at = q.Poll(kT0 + absl::Milliseconds(3), false);
  ASSERT_EQ(at.expired.size(), 1u);
  EXPECT_FALSE(at.batch.has_value());
  EXPECT_EQ(q.queued_rows(), 1);

  auto later = q.Poll(kT0 + absl::Milliseconds(10), false);
  ASSERT_TRUE(later.batch.has_value());
  EXPECT_EQ(later.batch->rows, 1);
}

TEST(BatchQueueTest, DropsCancelledTasks) {
  BatchQueue q(Opts(8, absl::ZeroDuration()));
  auto outcome = std::make_shared<TaskOutcome>();
  Admit(q, MakeTask(2, "k", absl::InfiniteFuture(), outcome), kT0);
  Admit(q, MakeTask(1, "k"), kT0);
  outcome->cancelled = true;
  auto r = q.Poll(kT0, false);
  ASSERT_EQ(r.cancelled.size(), 1u);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->rows, 1);
}

TEST(BatchQueueTest, CancelAtTheClientsDeadlineCountsAsExpired) {
  BatchQueue q(Opts(8, absl::Seconds(1)));
  // The client gave up at its own deadline, just before the server's.
  auto at_deadline = std::make_shared<TaskOutcome>();
  Admit(q, MakeTask(1, "k", kT0 + absl::Milliseconds(100), at_deadline), kT0);
  // This one cancelled long before its deadline.
  auto early = std::make_shared<TaskOutcome>();
  Admit(q, MakeTask(1, "k", kT0 + absl::Seconds(10), early), kT0);
  at_deadline->cancelled = true;
  early->cancelled = true;
  auto r = q.Poll(kT0 + absl::Milliseconds(100) - BatchQueue::kDeadlineSkew, false);
  EXPECT_EQ(r.expired.size(), 1u);
  EXPECT_EQ(r.cancelled.size(), 1u);
  EXPECT_TRUE(q.empty());
}

TEST(BatchQueueTest, NeverMixesKeys) {
  BatchQueue q(Opts(8, absl::ZeroDuration()));
  Admit(q, MakeTask(1, "f32[3,224,224]"), kT0);
  Admit(q, MakeTask(1, "f16[3,224,224]"), kT0);
  Admit(q, MakeTask(1, "f32[3,224,224]"), kT0);
  Admit(q, MakeTask(1, "f32[3,112,112]"), kT0);

  std::vector<std::string> keys;
  std::vector<int64_t> rows;
  while (!q.empty()) {
    auto r = q.Poll(kT0, false);
    ASSERT_TRUE(r.batch.has_value());
    const std::string key(r.batch->tasks.front()->batch_key());
    for (const auto& t : r.batch->tasks) EXPECT_EQ(t->batch_key(), key);
    keys.push_back(key);
    rows.push_back(r.batch->rows);
  }
  EXPECT_THAT(keys, ::testing::ElementsAre("f32[3,224,224]", "f16[3,224,224]",
                                           "f32[3,112,112]"));
  EXPECT_THAT(rows, ::testing::ElementsAre(2, 1, 1));
}

TEST(BatchQueueTest, DrainingClosesAtOnce) {
  BatchQueue q(Opts(8, absl::Seconds(10)));
  Admit(q, MakeTask(1), kT0);
  auto r = q.Poll(kT0, /*draining=*/true);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->reason, CloseReason::kDraining);
}

TEST(BatcherOptionsTest, RejectsAllowedSizesNotEndingAtMax) {
  BatcherOptions o = Opts(16, absl::Milliseconds(1), {1, 2, 8});
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("max_batch_size (16)")));
  o.allowed_batch_sizes = {4, 2, 16};
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  o.allowed_batch_sizes = {1, 4, 16};
  EXPECT_THAT(o.Validate(), IsOk());
}

TEST(BatcherOptionsTest, InFlightLimitGivesEachBatchRowsPerSlotBetweenTwoAndTheExecutors) {
  BatcherOptions o = Opts(16, absl::Milliseconds(2));
  o.num_executors = 4;
  EXPECT_EQ(o.InFlightLimit(1000), 4);  // off: every executor
  o.rows_per_slot = 32;
  EXPECT_EQ(o.InFlightLimit(0), 2);
  EXPECT_EQ(o.InFlightLimit(64), 2);  // 64 clients: two batches of 32
  EXPECT_EQ(o.InFlightLimit(65), 3);
  EXPECT_EQ(o.InFlightLimit(96), 3);
  EXPECT_EQ(o.InFlightLimit(128), 4);
  EXPECT_EQ(o.InFlightLimit(256), 4);  // never above the executors
  EXPECT_EQ(o.InFlightLimit(std::numeric_limits<int64_t>::max()), 4);  // no overflow
  o.rows_per_slot = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(o.InFlightLimit(std::numeric_limits<int64_t>::max()), 2);
  o.rows_per_slot = 32;
  o.num_executors = 1;
  EXPECT_EQ(o.InFlightLimit(0), 1);  // never above the executors either
  EXPECT_THAT(o.Validate(), IsOk());
  o.rows_per_slot = -1;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("rows_per_slot must be >= 0 (0: off), got -1")));
}

TEST(BatchQueueTest, PollDeadOnlyTakesTheExpiredAndFormsNoBatch) {
  BatchQueue q(Opts(2, absl::Milliseconds(1)));
  Admit(q, MakeTask(2), kT0);  // a full batch: Poll would send it
  Admit(q, MakeTask(1, "f32[3]", kT0 + absl::Milliseconds(5)), kT0);
  auto r = q.PollDeadOnly(kT0 + absl::Milliseconds(1));
  EXPECT_FALSE(r.batch.has_value());
  EXPECT_TRUE(r.expired.empty());
  EXPECT_EQ(r.wake_at, kT0 + absl::Milliseconds(5));  // the earliest deadline
  r = q.PollDeadOnly(kT0 + absl::Milliseconds(5));
  EXPECT_EQ(r.expired.size(), 1u);
  EXPECT_FALSE(r.batch.has_value());
  EXPECT_EQ(q.queued_rows(), 2);
}

}  // namespace
}  // namespace metalserve
