// The adaptive batching policy, driven on simulated time: every Poll and
// Admit is given its `now`, so each decision is exact and instant.
#include "server/batcher/adaptive_policy.h"

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
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);
constexpr absl::Duration kUs = absl::Microseconds(1);

// A model whose batch has a large fixed cost (1 ms) and a small cost per row
// (10 us): batching pays whenever rows come faster than the fixed cost.
BatcherOptions Adaptive(int64_t max_batch = 8, absl::Duration delay = absl::Milliseconds(5)) {
  BatcherOptions o;
  o.policy = BatchingPolicy::kAdaptive;
  o.max_batch_size = max_batch;
  o.max_queue_delay = delay;
  o.max_queue_size = 1024;
  o.batch_costs = {{1, absl::Microseconds(1010)},
                   {max_batch, absl::Microseconds(1000 + 10 * max_batch)}};
  return o;
}

void Admit(BatchQueue& q, absl::Time now, int64_t rows = 1) {
  std::unique_ptr<BatchTask> t = MakeTask(rows);
  ASSERT_THAT(q.Admit(&t, now), IsOk());
}

// Arrivals every `gap` from `start`, each batch taken as soon as Poll gives
// one, so that the estimator has seen that rate. Returns the last arrival.
absl::Time Prime(BatchQueue& q, absl::Time start, absl::Duration gap, int n) {
  absl::Time t = start;
  for (int i = 0; i < n; ++i, t += gap) {
    Admit(q, t);
    q.Poll(t, /*draining=*/true);  // take everything: only the history counts
  }
  return t - gap;
}

TEST(AdaptivePolicyTest, LoneRequestIsSentAtOnceWhenNothingElseIsExpected) {
  BatchQueue q(Adaptive());
  Admit(q, kT0);
  auto r = q.Poll(kT0, false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->reason, CloseReason::kNoGain);
  EXPECT_EQ(r.batch->rows, 1);

  // The fixed policy makes the same request wait the whole delay.
  BatcherOptions fixed = Adaptive();
  fixed.policy = BatchingPolicy::kFixed;
  BatchQueue f(fixed);
  Admit(f, kT0);
  auto w = f.Poll(kT0, false);
  EXPECT_FALSE(w.batch.has_value());
  EXPECT_EQ(w.wake_at, kT0 + absl::Milliseconds(5));
}

TEST(AdaptivePolicyTest, LoneRequestAfterSlowTrafficIsSentAtOnce) {
  BatchQueue q(Adaptive());
  // One request every 20 ms: far slower than a batch costs.
  const absl::Time last = Prime(q, kT0, absl::Milliseconds(20), 10);
  const absl::Time now = last + absl::Milliseconds(20);
  Admit(q, now);
  auto r = q.Poll(now, false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->reason, CloseReason::kNoGain);
}

TEST(AdaptivePolicyTest, BurstFillsABatch) {
  BatchQueue q(Adaptive(/*max_batch=*/8));
  // A burst, one request every 10 us. The first is alone (nothing expected
  // yet), the next eight fill one batch without any closing early.
  absl::Time t = kT0;
  Admit(q, t);
  auto first = q.Poll(t, false);
  ASSERT_TRUE(first.batch.has_value());
  EXPECT_EQ(first.batch->rows, 1);
  for (int i = 1; i < 8; ++i) {
    t += 10 * kUs;
    Admit(q, t);
    auto r = q.Poll(t, false);
    ASSERT_FALSE(r.batch.has_value()) << "closed early at row " << i;
    EXPECT_GT(r.wake_at, t);
    EXPECT_LE(r.wake_at, t + absl::Milliseconds(5));
  }
  t += 10 * kUs;
  Admit(q, t);
  auto full = q.Poll(t, false);
  ASSERT_TRUE(full.batch.has_value());
  EXPECT_EQ(full.batch->reason, CloseReason::kFull);
  EXPECT_EQ(full.batch->rows, 8);
}

TEST(AdaptivePolicyTest, EstimateFollowsAChangeOfArrivalRate) {
  BatchQueue q(Adaptive());
  absl::Time last = Prime(q, kT0, 50 * kUs, 200);
  EXPECT_NEAR(absl::ToDoubleMicroseconds(q.adaptive()->arrivals().mean_gap()), 50, 1);
  // At that rate a partial batch waits for more.
  Admit(q, last + 50 * kUs);
  EXPECT_FALSE(q.Poll(last + 50 * kUs, false).batch.has_value());
  q.Poll(last + 50 * kUs, /*draining=*/true);

  // The rate drops to one request every 10 ms: 20 arrivals later the
  // estimate is within 10 % of the new gap, and a request goes at once.
  last = Prime(q, last + absl::Milliseconds(10), absl::Milliseconds(10), 20);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(q.adaptive()->arrivals().mean_gap()), 10, 1);
  const absl::Time now = last + absl::Milliseconds(10);
  Admit(q, now);
  auto r = q.Poll(now, false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->reason, CloseReason::kNoGain);
}

TEST(AdaptivePolicyTest, SilenceLongerThanTheMeanGapEndsTheWait) {
  BatchQueue q(Adaptive());
  const absl::Time last = Prime(q, kT0, 50 * kUs, 200);
  const absl::Time now = last + 50 * kUs;
  Admit(q, now);
  auto waiting = q.Poll(now, false);
  ASSERT_FALSE(waiting.batch.has_value());
  // Nothing arrives: by the time it reconsiders, the silence since the last
  // arrival has grown past what waiting can repay, well before the delay.
  absl::Time t = waiting.wake_at;
  std::optional<Batch> batch;
  for (int i = 0; i < 100 && !batch.has_value(); ++i) {
    auto r = q.Poll(t, false);
    batch = std::move(r.batch);
    if (!batch.has_value()) t = r.wake_at;
  }
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->reason, CloseReason::kNoGain);
  EXPECT_LT(t - now, absl::Milliseconds(2));
}

TEST(AdaptivePolicyTest, MaxQueueDelayStaysTheBound) {
  // Arrivals every 300 us, delay 1 ms: waiting pays, but the delay ends it.
  BatchQueue q(Adaptive(/*max_batch=*/8, absl::Milliseconds(1)));
  const absl::Time last = Prime(q, kT0, 300 * kUs, 50);
  const absl::Time start = last + 300 * kUs;
  Admit(q, start);
  auto r = q.Poll(start, false);
  ASSERT_FALSE(r.batch.has_value());
  Admit(q, start + 300 * kUs);
  r = q.Poll(start + 300 * kUs, false);
  ASSERT_FALSE(r.batch.has_value());
  EXPECT_LE(r.wake_at, start + absl::Milliseconds(1));
  auto due = q.Poll(start + absl::Milliseconds(1), false);
  ASSERT_TRUE(due.batch.has_value());
  EXPECT_EQ(due.batch->reason, CloseReason::kDelayExpired);
  EXPECT_EQ(due.batch->rows, 2);
}

TEST(AdaptivePolicyTest, WaitsWhileTheDeviceIsBusyAndClosesWhenItIsFree) {
  BatchQueue q(Adaptive());
  // One request every 3 ms: alone, each would go at once.
  const absl::Time last = Prime(q, kT0, absl::Milliseconds(3), 20);
  const absl::Time now = last + absl::Milliseconds(3);
  q.SetDeviceFreeAt(now + absl::Milliseconds(4));
  Admit(q, now);
  auto r = q.Poll(now, false);
  ASSERT_FALSE(r.batch.has_value()) << "the device is busy for 4 ms more";
  EXPECT_LE(r.wake_at, now + absl::Milliseconds(4));
  q.SetDeviceFreeAt(now + absl::Milliseconds(1));  // the batch came back early
  auto go = q.Poll(now + absl::Milliseconds(1), false);
  ASSERT_TRUE(go.batch.has_value());
  EXPECT_EQ(go.batch->reason, CloseReason::kNoGain);
}

TEST(AdaptivePolicyTest, NoCostFiguresMeansNoWait) {
  BatcherOptions o = Adaptive();
  o.batch_costs.clear();
  BatchQueue q(o);
  const absl::Time last = Prime(q, kT0, 10 * kUs, 50);
  Admit(q, last + 10 * kUs);
  auto r = q.Poll(last + 10 * kUs, false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->reason, CloseReason::kNoGain);
}

// A fast model on a busy server: the forward costs 20-40 us, but each batch
// occupies its executor 400 us + 10 us per row end to end (hand-off,
// gathering, answering every request), as the identity model does here.
BatcherOptions FastModel() {
  BatcherOptions o;
  o.policy = BatchingPolicy::kAdaptive;
  o.max_batch_size = 32;
  o.max_queue_delay = absl::Milliseconds(5);
  o.max_queue_size = 1024;
  o.batch_costs = {{1, 20 * kUs}, {32, 40 * kUs}};
  return o;
}

void ObserveFastModelOccupancy(BatchQueue& q) {
  q.ObserveOccupancy(1, 410 * kUs);
  q.ObserveOccupancy(32, 720 * kUs);
}

TEST(AdaptivePolicyTest, CostIncludesTheExecutorsPerBatchOverhead) {
  BatchQueue q(FastModel());
  // The forward alone until the executors report.
  EXPECT_NEAR(absl::ToDoubleMicroseconds(q.EstimatedCost(16)), 20 + 20.0 * 15 / 31, 1e-3);
  ObserveFastModelOccupancy(q);
  EXPECT_EQ(q.EstimatedCost(1), 410 * kUs);
  EXPECT_NEAR(absl::ToDoubleMicroseconds(q.EstimatedCost(16)), 410 + 310.0 * 15 / 31, 1e-3);
}

TEST(AdaptivePolicyTest, FastModelWaitsForTheRowsItsPerBatchOverheadIsWorth) {
  BatchQueue q(FastModel());
  ObserveFastModelOccupancy(q);
  // One request every 20 us (50,000/s), the device idle: a batch's 400 us
  // of overhead is worth ~12 rows of waiting (see the header's formula).
  absl::Time t = Prime(q, kT0, 20 * kUs, 200) + 20 * kUs;
  int rows = 0;
  std::optional<Batch> batch;
  for (; rows < 32 && !batch.has_value(); t += 20 * kUs) {
    Admit(q, t);
    ++rows;
    batch = std::move(q.Poll(t, false).batch);
  }
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->reason, CloseReason::kNoGain);
  EXPECT_GE(batch->rows, 8);   // the forward alone (20-40 us) sends each row alone
  EXPECT_LE(batch->rows, 16);  // and it does not wait for the whole batch
}

TEST(AdaptivePolicyTest, AnExecutorStillAnsweringDoesNotHoldTheNextBatch) {
  // The device time, not the occupancy, tells when the device is free: the
  // other executor's forward is done and it answers its requests for ~500 us
  // more; waiting for it would make the executors take turns (measured
  // slower than fixed 0 ms), so the batch closes as if it were idle.
  BatchQueue q(FastModel());
  ObserveFastModelOccupancy(q);
  absl::Time t = Prime(q, kT0, 20 * kUs, 200) + 20 * kUs;
  DeviceLoad load;
  q.SetDeviceFreeAt(load.Started(t, q.EstimatedDeviceCost(16)));
  const absl::Time answered = t + q.EstimatedCost(16);
  int rows = 0;
  std::optional<Batch> batch;
  for (; rows < 32 && !batch.has_value(); t += 20 * kUs) {
    Admit(q, t);
    ++rows;
    batch = std::move(q.Poll(t, false).batch);
  }
  ASSERT_TRUE(batch.has_value());
  EXPECT_LE(batch->rows, 16);
  EXPECT_LT(t, answered - 200 * kUs);
}

TEST(DeviceLoadTest, FreeTimeStaysWithinTheWorkInFlightUnderSustainedLoad) {
  // Two executors keep the device busy: a batch always in flight, each
  // estimated at 1 ms, each really done in 0.5 ms.
  DeviceLoad load;
  const absl::Duration cost = absl::Milliseconds(1);
  absl::Time t = kT0;
  load.Started(t, cost);
  for (int i = 0; i < 1000; ++i) {
    load.Started(t, cost);
    t += 500 * kUs;
    load.Done(t, cost);
    ASSERT_LE(load.free_at(), t + cost) << "after " << i << " batches";
  }
  load.Done(t, cost);
  EXPECT_EQ(load.free_at(), t);
}

TEST(BatchCostModelTest, InterpolatesBetweenWarmUpSizesAndLearnsFromBatches) {
  BatchCostModel m(32);
  m.Seed({{1, absl::Milliseconds(1)}, {32, absl::Milliseconds(32)}});
  EXPECT_EQ(m.Cost(1), absl::Milliseconds(1));
  EXPECT_NEAR(absl::ToDoubleMilliseconds(m.Cost(16)), 16, 1e-6);
  // A batch of 32 measured at 64 ms moves that size a quarter of the way.
  m.Observe(32, absl::Milliseconds(64));
  EXPECT_NEAR(absl::ToDoubleMilliseconds(m.Cost(32)), 40, 1e-6);
  // A size never measured before is taken as measured.
  m.Observe(8, absl::Milliseconds(4));
  EXPECT_NEAR(absl::ToDoubleMilliseconds(m.Cost(8)), 4, 1e-6);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(m.Cost(4)), 1 + 3.0 * 3 / 7, 1e-6);
}

// ResNet-50 fp32 on the H200 at the sizes bench/pipeline_h200.sh serves
// (warm-up figures of that run's order: a large fixed cost, then ~0.13 ms a
// row).
BatcherOptions H200Sizes(BatchingPolicy policy) {
  BatcherOptions o;
  o.policy = policy;
  o.max_batch_size = 256;
  o.max_queue_delay = absl::Milliseconds(2);
  o.max_queue_size = 1024;
  o.allowed_batch_sizes = {1, 8, 32, 64, 128, 256};
  o.batch_costs = {{1, absl::Microseconds(2100)},  {8, absl::Microseconds(2600)},
                   {32, absl::Microseconds(5200)}, {64, absl::Microseconds(9300)},
                   {128, absl::Microseconds(17500)}, {256, absl::Microseconds(34000)}};
  return o;
}

std::vector<int> Ids(const Batch& b) {
  std::vector<int> ids;
  for (const auto& t : b.tasks) ids.push_back(static_cast<const FakeTask&>(*t).id());
  return ids;
}

// `n` one-row tasks, ids from `first_id`, the i-th admitted at start + i x gap.
void AdmitRows(BatchQueue& q, int n, absl::Time start, absl::Duration gap = absl::ZeroDuration(),
               int first_id = 0) {
  for (int i = 0; i < n; ++i) {
    std::unique_ptr<BatchTask> t = MakePriorityTask(1, 0, first_id + i);
    ASSERT_THAT(q.Admit(&t, start + i * gap), IsOk());
  }
}

TEST(AdaptiveSizingTest, ABatchPaddedAtHighCostIsCutBackAndTheRestGoesNext) {
  BatchQueue q(H200Sizes(BatchingPolicy::kAdaptive));
  AdmitRows(q, 90, kT0);
  const absl::Time due = kT0 + absl::Milliseconds(2);
  auto first = q.Poll(due, false);
  ASSERT_TRUE(first.batch.has_value());
  // 90 rows padded to 128 cost 17.5 ms; 64 rows cost 9.3 and the other 26
  // (with the ~5 expected to arrive meanwhile) about 4.5 of a batch of 32.
  EXPECT_EQ(first.batch->rows, 64);
  EXPECT_EQ(first.batch->padded_rows, 64);
  EXPECT_EQ(first.batch->rows_left_by_cut, 26);  // what metalserve_batch_cut_rows_total adds
  std::vector<int> oldest(64);
  for (int i = 0; i < 64; ++i) oldest[i] = i;
  EXPECT_EQ(Ids(*first.batch), oldest);
  EXPECT_EQ(q.queued_rows(), 26);
  // The rest, past their delay too, go next, padded: 5.2 / 26 = 0.2 ms a
  // row at 32 beats 8 rows at 2.6 / 8 = 0.33.
  auto second = q.Poll(due, false);
  ASSERT_TRUE(second.batch.has_value());
  EXPECT_EQ(second.batch->rows, 26);
  EXPECT_EQ(second.batch->padded_rows, 32);
  EXPECT_EQ(second.batch->rows_left_by_cut, 0);
  EXPECT_EQ(Ids(*second.batch).front(), 64);
  EXPECT_TRUE(q.empty());
}

TEST(AdaptiveSizingTest, ABatchWhoseRestWouldRunAloneStaysWhole) {
  // 100 rows: cut to 64, the other 36 would pad to 64 on their own, 9.3 +
  // 9.3 = 18.6 ms against 17.5 ms for the whole batch padded to 128.
  for (bool draining : {false, true}) {
    BatchQueue q(H200Sizes(BatchingPolicy::kAdaptive));
    AdmitRows(q, 100, kT0);  // one burst, then nothing: 2 ms since the last
    auto r = q.Poll(kT0 + absl::Milliseconds(2), draining);
    ASSERT_TRUE(r.batch.has_value());
    EXPECT_EQ(r.batch->rows, 100) << "draining " << draining;
    EXPECT_EQ(r.batch->padded_rows, 128);
  }
}

TEST(AdaptiveSizingTest, UnderSaturationTheRestIsCountedInTheFullBatchItWillJoin) {
  BatchQueue q(H200Sizes(BatchingPolicy::kAdaptive));
  // A request every 20 us: 465 arrive while 64 rows run for 9.3 ms, so the
  // other 36 ride in a batch of 256 at 0.133 ms a row: 9.3 + 4.8 = 14.1 ms
  // against 17.5 padded to 128.
  AdmitRows(q, 100, kT0, absl::Microseconds(20));
  auto r = q.Poll(kT0 + absl::Milliseconds(2), false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->rows, 64);
  EXPECT_EQ(q.queued_rows(), 36);
}

TEST(AdaptiveSizingTest, EverySixteenthCutRunsWholeSoItsSizeIsMeasuredAgain) {
  BatchQueue q(H200Sizes(BatchingPolicy::kAdaptive));
  for (int i = 0; i < 2 * BatchQueue::kWholeEvery; ++i) {
    const absl::Time start = kT0 + i * absl::Milliseconds(10);
    AdmitRows(q, 90, start);
    auto r = q.Poll(start + absl::Milliseconds(2), false);
    ASSERT_TRUE(r.batch.has_value());
    const bool whole = (i + 1) % BatchQueue::kWholeEvery == 0;
    EXPECT_EQ(r.batch->rows, whole ? 90 : 64) << "batch " << i;
    EXPECT_EQ(r.batch->rows_left_by_cut, whole ? 0 : 26) << "batch " << i;
    while (q.Poll(start + absl::Milliseconds(2), /*draining=*/true).batch.has_value()) {
    }
    ASSERT_TRUE(q.empty());
  }
}

TEST(AdaptiveSizingTest, TheFixedPolicyNoCostsOrTheSwitchOffPadTheWholeBatch) {
  BatcherOptions no_costs = H200Sizes(BatchingPolicy::kAdaptive);
  no_costs.batch_costs.clear();
  BatcherOptions off = H200Sizes(BatchingPolicy::kAdaptive);
  off.trim_padded_batches = false;
  for (const BatcherOptions& o : {H200Sizes(BatchingPolicy::kFixed), no_costs, off}) {
    BatchQueue q(o);
    AdmitRows(q, 90, kT0);
    auto r = q.Poll(kT0 + absl::Milliseconds(2), false);
    ASSERT_TRUE(r.batch.has_value());
    EXPECT_EQ(r.batch->rows, 90);
    EXPECT_EQ(r.batch->padded_rows, 128);
    EXPECT_EQ(r.batch->rows_left_by_cut, 0);
  }
}

TEST(AdaptiveSizingTest, ABatchThatPadsCheaplyStaysWhole) {
  BatchQueue q(H200Sizes(BatchingPolicy::kAdaptive));
  AdmitRows(q, 5, kT0);
  auto r = q.Poll(kT0 + absl::Milliseconds(2), false);
  ASSERT_TRUE(r.batch.has_value());
  // 2.6 / 5 = 0.52 ms a row padded to 8, against 2.1 for one row alone.
  EXPECT_EQ(r.batch->rows, 5);
  EXPECT_EQ(r.batch->padded_rows, 8);
}

// Under a latency target the admission estimate follows the cut: 99 rows
// queued at one every 20 us, batches capped at 128 (2 x 17.5 ms fits 40
// ms). The 100th request's batch of 100 would pad to 128 (17.5 ms); the
// cut keeps 64 (9.3 ms) and leaves the newest 36, the request among them,
// for a batch the arrivals fill to 128: done in 9.3 + 17.5 = 26.8 ms.
TEST(AdaptiveSizingTest, TheLatencyTargetEstimatesARequestTheCutLeavesOutInTheNextBatch) {
  BatcherOptions o = H200Sizes(BatchingPolicy::kAdaptive);
  o.latency_target = absl::Milliseconds(40);
  const absl::Time last = kT0 + 99 * absl::Microseconds(20);
  {
    BatchQueue q(o);
    AdmitRows(q, 99, kT0, absl::Microseconds(20));
    // A deadline 20 ms away: met by the whole batch padded (17.5 ms), not
    // by the batch the request will really ride in.
    std::unique_ptr<BatchTask> t = MakeTask(1, "f32[3]", last + absl::Milliseconds(20),
                                            std::make_shared<TaskOutcome>(), 99);
    EXPECT_THAT(q.Admit(&t, last),
                testing::StatusIs(absl::StatusCode::kDeadlineExceeded,
                                  AllOf(HasSubstr("estimated to finish in 26.8ms"),
                                        HasSubstr("1 batch(es) before its own of 128 rows"))));
    EXPECT_EQ(q.queued_rows(), 99);
  }
  // What the estimate expects is what runs: the request is left out.
  BatchQueue q(o);
  AdmitRows(q, 100, kT0, absl::Microseconds(20));
  auto r = q.Poll(kT0 + absl::Milliseconds(2), false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(r.batch->rows, 64);
  EXPECT_THAT(Ids(*r.batch), Not(Contains(99)));
  // With the cut off the estimate is the whole batch's, and it is admitted.
  o.trim_padded_batches = false;
  BatchQueue whole(o);
  AdmitRows(whole, 99, kT0, absl::Microseconds(20));
  std::unique_ptr<BatchTask> t = MakeTask(1, "f32[3]", last + absl::Milliseconds(20),
                                          std::make_shared<TaskOutcome>(), 99);
  EXPECT_THAT(whole.Admit(&t, last), IsOk());
}

TEST(AdaptiveSizingTest, WholeTasksAreLeftOutFromTheTailAndTheHeadStays) {
  BatcherOptions o;
  o.policy = BatchingPolicy::kAdaptive;
  o.max_batch_size = 8;
  o.max_queue_delay = absl::Milliseconds(2);
  o.allowed_batch_sizes = {4, 8};
  o.batch_costs = {{4, absl::Milliseconds(4)}, {8, absl::Milliseconds(8)}};  // 1 ms a row
  BatchQueue q(o);
  for (int id : {0, 1, 2}) {
    std::unique_ptr<BatchTask> t = MakePriorityTask(id == 2 ? 1 : 2, 0, id);
    ASSERT_THAT(q.Admit(&t, kT0), IsOk());
  }
  // 5 rows padded to 8: 1.6 ms a row; the first two tasks fill 4 exactly.
  auto r = q.Poll(kT0 + absl::Milliseconds(2), false);
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(Ids(*r.batch), std::vector<int>({0, 1}));
  EXPECT_EQ(r.batch->rows, 4);
  EXPECT_EQ(r.batch->padded_rows, 4);
  auto rest = q.Poll(kT0 + absl::Milliseconds(2), false);
  ASSERT_TRUE(rest.batch.has_value());
  EXPECT_EQ(Ids(*rest.batch), std::vector<int>({2}));
  EXPECT_EQ(rest.batch->padded_rows, 4);
}

TEST(BatchCostModelTest, OneStalledBatchRaisesTheFigureByAtMostSeventyFivePercent) {
  BatchCostModel m(8);
  m.Seed({{1, absl::Microseconds(400)}});
  m.Observe(1, absl::Milliseconds(40));  // the executor was descheduled
  EXPECT_NEAR(absl::ToDoubleMicroseconds(m.Cost(1)), 700, 1e-3);
  // A lasting change is still followed: 2 ms a batch from now on.
  for (int i = 0; i < 12; ++i) m.Observe(1, absl::Milliseconds(2));
  EXPECT_NEAR(absl::ToDoubleMilliseconds(m.Cost(1)), 2, 0.1);
}

TEST(BatchCostModelTest, EmptyModelCostsNothing) {
  BatchCostModel m(8);
  EXPECT_EQ(m.Cost(4), absl::ZeroDuration());
}

TEST(BatchCostModelTest, ExtendsTheSlopeOfTheLargestSizes) {
  BatchCostModel m(64);
  m.Seed({{8, absl::Milliseconds(2)}, {16, absl::Milliseconds(3)}});
  EXPECT_NEAR(absl::ToDoubleMilliseconds(m.Cost(32)), 5, 1e-6);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(m.Cost(2)), 2, 1e-6);
}

TEST(LinearCostFitTest, TwoSizesGiveTheLineThroughThem) {
  LinearCostFit f;
  EXPECT_EQ(f.Cost(4), absl::ZeroDuration());
  f.Observe(1, 410 * kUs);
  EXPECT_NEAR(absl::ToDoubleMicroseconds(f.Cost(32)), 410, 1e-6);  // flat
  f.Observe(32, 720 * kUs);
  EXPECT_NEAR(absl::ToDoubleMicroseconds(f.Cost(1)), 410, 1e-6);
  EXPECT_NEAR(absl::ToDoubleMicroseconds(f.Cost(11)), 510, 1e-6);
  EXPECT_NEAR(absl::ToDoubleMicroseconds(f.Cost(64)), 1040, 1e-6);
}

// The scatter the per-size table turned into a jagged curve (measured on the
// identity model at 256 clients: c(2) 202 us beside c(1) 25 us).
TEST(LinearCostFitTest, OneSizeSeenInAStallDoesNotBendTheCurve) {
  LinearCostFit f;
  for (int i = 0; i < 40; ++i) {
    f.Observe(1, 410 * kUs);
    f.Observe(32, 720 * kUs);
  }
  f.Observe(2, 4 * 410 * kUs);  // descheduled: four times what the line says
  const double c1 = absl::ToDoubleMicroseconds(f.Cost(1));
  const double c2 = absl::ToDoubleMicroseconds(f.Cost(2));
  const double c3 = absl::ToDoubleMicroseconds(f.Cost(3));
  EXPECT_LT(c2, c3);
  EXPECT_LT(c2, 1.1 * c1) << "c(1) " << c1 << " us, c(2) " << c2 << " us";
  // A lasting change is followed: every batch now twice as dear.
  for (int i = 0; i < 100; ++i) {
    f.Observe(1, 820 * kUs);
    f.Observe(32, 1440 * kUs);
  }
  EXPECT_NEAR(absl::ToDoubleMicroseconds(f.Cost(1)), 820, 20);
  EXPECT_NEAR(absl::ToDoubleMicroseconds(f.Cost(32)), 1440, 20);
}

TEST(LinearCostFitTest, ALargerBatchThanAnySeenIsTakenAsMeasured) {
  LinearCostFit f;
  for (int i = 0; i < 10; ++i) f.Observe(1, 20 * kUs);
  // The first batch of 256 rows: 30 ms, not 4x the flat line's 20 us.
  f.Observe(256, absl::Milliseconds(30));
  EXPECT_GT(f.Cost(256), absl::Milliseconds(25));
  // Within the sizes seen, a stall is still bounded.
  f.Observe(2, absl::Seconds(1));
  EXPECT_LT(f.Cost(2), absl::Milliseconds(1));
}

TEST(LinearCostFitTest, NeverBelowZeroNorFallingWithRows) {
  LinearCostFit f;
  // Measured dearer at 1 row than at 8: no falling line, and a line through
  // the origin when the fit would cut below it.
  for (int i = 0; i < 10; ++i) {
    f.Observe(1, 300 * kUs);
    f.Observe(8, 200 * kUs);
  }
  EXPECT_LE(f.Cost(1), f.Cost(8));
  for (int i = 0; i < 200; ++i) {
    f.Observe(10, 10 * kUs);
    f.Observe(20, 200 * kUs);
  }
  EXPECT_GE(f.Cost(1), absl::ZeroDuration());
  EXPECT_LT(f.Cost(10), f.Cost(20));
}

// The decision the jagged table got wrong: on the fast model (400 us a
// batch + 10 us a row) with a request every 20 us, a lone row should wait
// for the next. One batch of 2 rows stalled to 4x must not make the second
// row look dear enough to send the first alone.
TEST(AdaptivePolicyTest, AStalledBatchOfOneSizeDoesNotCloseBatchesAtThatSize) {
  BatchQueue q(FastModel());
  for (int i = 0; i < 40; ++i) ObserveFastModelOccupancy(q);
  q.ObserveOccupancy(2, 4 * 420 * kUs);
  const absl::Time last = Prime(q, kT0, 20 * kUs, 50);
  Admit(q, last + 20 * kUs);
  auto r = q.Poll(last + 20 * kUs, false);
  EXPECT_FALSE(r.batch.has_value()) << "closed at " << r.batch->rows << " row(s)";
}

}  // namespace
}  // namespace metalserve
