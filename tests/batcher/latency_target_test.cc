// The latency target in the BatchQueue, on simulated time: the start-up
// check against the batch-1 cost, batches sized and closed to fit it, and a
// request refused at once when it cannot finish in time.
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/batcher/batch_queue.h"
#include "tests/batcher/fake_task.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);
constexpr absl::Duration kMs = absl::Milliseconds(1);

// A batch of m rows costs 1 ms + 0.5 ms per row: 1.5 ms alone, 5 ms at 8.
BatcherOptions Target(absl::Duration target, BatchingPolicy policy = BatchingPolicy::kFixed) {
  BatcherOptions o;
  o.policy = policy;
  o.max_batch_size = 8;
  o.max_queue_delay = 50 * kMs;
  o.max_queue_size = 256;
  o.latency_target = target;
  o.batch_costs = {{1, absl::Microseconds(1500)}, {8, 5 * kMs}};
  return o;
}

void Admit(BatchQueue& q, int64_t rows, absl::Time now) {
  std::unique_ptr<BatchTask> t = MakeTask(rows);
  ASSERT_THAT(q.Admit(&t, now), IsOk());
}

TEST(LatencyTargetTest, TargetBelowTheMeasuredBatchOneCostIsRefusedNamingTheCost) {
  EXPECT_THAT(Target(kMs).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("latency_target 1ms"),
                             HasSubstr("cost of a batch of 1 (1.5ms)"))));
  EXPECT_THAT(Target(2 * kMs).Validate(), IsOk());
}

TEST(LatencyTargetTest, PartialBatchClosesInTimeToMeetTheTarget) {
  // The fixed delay (50 ms) alone would hold it far past a 10 ms target.
  BatchQueue q(Target(10 * kMs));
  Admit(q, 1, kT0);
  auto r = q.Poll(kT0, false);
  ASSERT_FALSE(r.batch.has_value());
  // Closes by arrival + 10 ms - 2 x 1.5 ms.
  EXPECT_EQ(r.wake_at, kT0 + 7 * kMs);
  auto due = q.Poll(kT0 + 7 * kMs, false);
  ASSERT_TRUE(due.batch.has_value());
  EXPECT_EQ(due.batch->reason, CloseReason::kDelayExpired);
}

TEST(LatencyTargetTest, BatchesAreCappedAtTheSizeWhoseCostFitsHalfTheTarget) {
  // Half of 6 ms is 3 ms: 1 + 0.5 x 4 = 3 ms, so at most 4 rows a batch.
  BatchQueue q(Target(6 * kMs));
  for (int i = 0; i < 6; ++i) Admit(q, 1, kT0);
  auto r = q.Poll(kT0, false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->reason, CloseReason::kFull);
  EXPECT_EQ(r.batch->rows, 4);
}

TEST(LatencyTargetTest, RequestThatCannotFinishInTimeIsRefusedAtOnceWithTheEstimate) {
  BatchQueue q(Target(10 * kMs));  // batches of up to 8 rows, 5 ms each
  Admit(q, 8, kT0);
  Admit(q, 1, kT0);  // 9 rows: 5 ms + 1.5 ms, fits 10 ms
  q.SetDeviceFreeAt(kT0 + 2 * kMs);
  std::unique_ptr<BatchTask> late = MakeTask(8);
  // Busy 2 ms, then 17 rows: two batches of 8 (10 ms) and one of 1 (1.5 ms).
  EXPECT_THAT(q.Admit(&late, kT0),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("estimated to finish in 13.5ms"),
                             HasSubstr("9 rows queued ahead"),
                             HasSubstr("deadline in 10ms"))));
  EXPECT_NE(late, nullptr);
  EXPECT_EQ(q.queued_rows(), 9);
}

// A fast model whose batches cost their executor 400 us + 10 us per row end
// to end, on two executors: eight full batches of 32 ahead take 5.76 ms one
// after another, 2.88 ms side by side.
BatcherOptions FastTwoExecutors() {
  BatcherOptions o;
  o.policy = BatchingPolicy::kAdaptive;
  o.max_batch_size = 32;
  o.max_queue_delay = 5 * kMs;
  o.max_queue_size = 1024;
  o.num_executors = 2;
  o.latency_target = 5 * kMs;
  o.batch_costs = {{1, absl::Microseconds(20)}, {32, absl::Microseconds(40)}};
  return o;
}

TEST(LatencyTargetTest, WorkAheadIsSharedAmongTheExecutors) {
  BatchQueue q(FastTwoExecutors());
  q.ObserveOccupancy(1, absl::Microseconds(410));
  q.ObserveOccupancy(32, absl::Microseconds(720));
  // Eight full batches, each admitted (one after another the eighth would
  // finish in 5.76 ms, past the target).
  for (int i = 0; i < 8; ++i) Admit(q, 32, kT0);
  // 8 x 720 us / 2 + 410 us = 3.29 ms: within the 5 ms target.
  std::unique_ptr<BatchTask> t = MakeTask(1);
  EXPECT_THAT(q.Admit(&t, kT0), IsOk());
  // The device busy for 4 ms more: (4 + 5.76) / 2 + 0.42 = 5.3 ms.
  q.SetDeviceFreeAt(kT0 + 4 * kMs);
  std::unique_ptr<BatchTask> late = MakeTask(1);
  EXPECT_THAT(q.Admit(&late, kT0),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("estimated to finish in 5.3ms"),
                             HasSubstr("device busy 4ms"), HasSubstr("on 2 executor(s)"))));
}

TEST(LatencyTargetTest, WorkAheadIsSharedAmongTheBatchesTheInFlightLimitLetsRun) {
  BatcherOptions o = FastTwoExecutors();
  o.num_executors = 4;
  o.rows_per_slot = 256;
  BatchQueue q(o);
  q.ObserveOccupancy(1, absl::Microseconds(410));
  q.ObserveOccupancy(32, absl::Microseconds(720));
  for (int i = 0; i < 8; ++i) Admit(q, 32, kT0);
  q.SetDeviceFreeAt(kT0 + 4 * kMs);
  // 256 rows in the server, 256 per slot: two of the four executors run,
  // (4 + 5.76) / 2 + 0.41 = 5.29 ms (four would give 2.85 ms).
  std::unique_ptr<BatchTask> late = MakeTask(1);
  EXPECT_THAT(q.Admit(&late, kT0),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("estimated to finish in 5.29ms"),
                             HasSubstr("on 2 executor(s)"))));
  // 768 more rows running: all four.
  q.AddRowsInFlight(768);
  std::unique_ptr<BatchTask> now_fits = MakeTask(1);
  EXPECT_THAT(q.Admit(&now_fits, kT0), IsOk());
}

TEST(LatencyTargetTest, TheDeviceStillRunsOneForwardAtATime) {
  // A slow model (5 ms per batch of 8 on the device): two executors do not
  // halve the device's work, so the estimate stays the serial one.
  BatcherOptions o = Target(10 * kMs);
  o.num_executors = 2;
  BatchQueue q(o);
  Admit(q, 8, kT0);
  Admit(q, 1, kT0);
  q.SetDeviceFreeAt(kT0 + 2 * kMs);
  std::unique_ptr<BatchTask> late = MakeTask(8);
  EXPECT_THAT(q.Admit(&late, kT0), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                            HasSubstr("estimated to finish in 13.5ms")));
}

TEST(LatencyTargetTest, RequestWithNothingAheadIsNotRefusedByTheTarget) {
  // Slow batches inflated the curve past the target (a loaded machine):
  // a request heading the queue still runs, so the curve can come back.
  BatchQueue q(Target(10 * kMs));
  for (int i = 0; i < 8; ++i) q.ObserveOccupancy(1, 40 * kMs);
  ASSERT_GT(q.EstimatedCost(1), 10 * kMs);
  Admit(q, 1, kT0);
  std::unique_ptr<BatchTask> behind = MakeTask(1);
  EXPECT_THAT(q.Admit(&behind, kT0), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                              HasSubstr("1 rows queued ahead")));
}

TEST(LatencyTargetTest, CallerDeadlineShorterThanTheTargetCountsToo) {
  BatchQueue q(Target(absl::Seconds(1)));
  std::unique_ptr<BatchTask> t = MakeTask(4, "f32[3]", kT0 + 2 * kMs);
  EXPECT_THAT(q.Admit(&t, kT0), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                         HasSubstr("deadline in 2ms")));
  std::unique_ptr<BatchTask> ok = MakeTask(1, "f32[3]", kT0 + 2 * kMs);
  EXPECT_THAT(q.Admit(&ok, kT0), IsOk());
}

}  // namespace
}  // namespace metalserve
