// Priority isolation in the BatchQueue, on simulated time: the lower-batch
// cap (only while a higher level is active, sized from the cost curve), the
// fill ratio, both off = the batches of before, the close reason of the
// batches they stop, the latency target's admission estimate under them,
// the starvation bound with them on, and a simulation of the H200 case
// (ResNet-50, 90 % of the arrivals at level 2) that shows level 1's p99
// falling.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/batcher/adaptive_policy.h"
#include "server/batcher/batch_queue.h"
#include "tests/batcher/fake_task.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);
constexpr absl::Duration kMs = absl::Milliseconds(1);

// Two levels, fixed policy without delay (a free executor takes what
// waits), sizes 1, 2, 4, 8 costing 1 ms per row.
BatcherOptions TwoLevels() {
  BatcherOptions o;
  o.max_batch_size = 8;
  o.allowed_batch_sizes = {1, 2, 4, 8};
  o.max_queue_delay = absl::ZeroDuration();
  o.max_queue_size = 256;
  o.priority_levels = 2;
  o.batch_costs = {{1, kMs}, {2, 2 * kMs}, {4, 4 * kMs}, {8, 8 * kMs}};
  return o;
}

void Admit(BatchQueue& q, int64_t rows, int level, int id, absl::Time now) {
  std::unique_ptr<BatchTask> t = MakePriorityTask(rows, level, id);
  ASSERT_THAT(q.Admit(&t, now), IsOk());
}

// `n` one-row tasks of `level`, ids from `first_id`.
void AdmitRows(BatchQueue& q, int n, int level, int first_id, absl::Time now) {
  for (int i = 0; i < n; ++i) Admit(q, 1, level, first_id + i, now);
}

std::optional<Batch> NextBatch(BatchQueue& q, absl::Time now) {
  return q.Poll(now, /*draining=*/false).batch;
}

std::vector<int> Ids(const Batch& b) {
  std::vector<int> ids;
  for (const auto& t : b.tasks) ids.push_back(static_cast<const FakeTask*>(t.get())->id());
  return ids;
}

// Rows of each batch Poll gives at `now` until the queue is empty.
std::vector<int64_t> DrainRows(BatchQueue& q, absl::Time now) {
  std::vector<int64_t> rows;
  while (std::optional<Batch> b = NextBatch(q, now)) rows.push_back(b->rows);
  return rows;
}

TEST(PriorityIsolationTest, LowerBatchIsCappedOnlyWhileAHigherLevelIsActive) {
  BatcherOptions o = TwoLevels();
  o.priority_lower_batch_cost = 4 * kMs;
  o.priority_active_window = 100 * kMs;
  BatchQueue q(o);
  AdmitRows(q, 8, 2, 200, kT0);
  EXPECT_THAT(DrainRows(q, kT0), ElementsAre(8)) << "no level 1 seen yet: no cap";

  const absl::Time high_at = kT0 + kMs;
  Admit(q, 1, 1, 100, high_at);
  EXPECT_THAT(DrainRows(q, high_at), ElementsAre(1));
  AdmitRows(q, 8, 2, 210, high_at + kMs);
  EXPECT_THAT(DrainRows(q, high_at + kMs), ElementsAre(4, 4)) << "4 rows cost 4 ms";
  // Still within the window at its last instant.
  const absl::Time last_in_window = high_at + 100 * kMs - absl::Nanoseconds(1);
  AdmitRows(q, 8, 2, 220, last_in_window);
  EXPECT_THAT(DrainRows(q, last_in_window), ElementsAre(4, 4));
  // The window has passed: lower batches are whole again.
  AdmitRows(q, 8, 2, 230, high_at + 100 * kMs);
  EXPECT_THAT(DrainRows(q, high_at + 100 * kMs), ElementsAre(8));
}

TEST(PriorityIsolationTest, CappedBatchClosesAtOnceAsPriorityCap) {
  BatcherOptions o = TwoLevels();
  o.max_queue_delay = absl::Seconds(1);  // a partial batch would wait
  o.priority_lower_batch_cost = 2 * kMs;
  o.priority_active_window = absl::Seconds(10);
  BatchQueue q(o);
  Admit(q, 1, 1, 100, kT0);
  Admit(q, 1, 1, 101, kT0);
  ASSERT_EQ(NextBatch(q, kT0 + absl::Seconds(1))->rows, 2);
  AdmitRows(q, 3, 2, 200, kT0 + absl::Seconds(1));
  std::optional<Batch> b = NextBatch(q, kT0 + absl::Seconds(1));
  ASSERT_TRUE(b.has_value()) << "capped at 2 rows: closed, not waiting the delay";
  EXPECT_EQ(b->rows, 2);
  EXPECT_EQ(CloseReasonName(b->reason), "priority_cap");
}

TEST(PriorityIsolationTest, CapIsTheLargestAllowedSizeWhoseDeviceCostFits) {
  BatcherOptions o = TwoLevels();
  o.priority_lower_batch_cost = 5 * kMs;  // 4 rows cost 4 ms, 8 cost 8 ms
  BatchQueue q(o);
  Admit(q, 1, 1, 100, kT0);
  ASSERT_TRUE(NextBatch(q, kT0).has_value());
  AdmitRows(q, 8, 2, 200, kT0);
  EXPECT_THAT(DrainRows(q, kT0), ElementsAre(4, 4));
  // The curve learns that a batch of 8 costs 4.5 ms: 8 fits now.
  for (int i = 0; i < 40; ++i) q.ObserveBatch(8, absl::Microseconds(4500));
  ASSERT_LE(q.EstimatedDeviceCost(8), 5 * kMs);
  AdmitRows(q, 8, 2, 210, kT0);
  EXPECT_THAT(DrainRows(q, kT0), ElementsAre(8));
}

TEST(PriorityIsolationTest, CapBelowTheSmallestCostStillRunsTheSmallestSize) {
  BatcherOptions o = TwoLevels();
  o.allowed_batch_sizes = {2, 4, 8};
  o.priority_lower_batch_cost = absl::Microseconds(500);  // below c(2) = 2 ms
  BatchQueue q(o);
  Admit(q, 1, 1, 100, kT0);
  ASSERT_TRUE(NextBatch(q, kT0).has_value());
  AdmitRows(q, 5, 2, 200, kT0);
  EXPECT_THAT(DrainRows(q, kT0), ElementsAre(2, 2, 1));
}

TEST(PriorityIsolationTest, CapWithoutAllowedSizesIsAnyRowCountOnTheCurve) {
  BatcherOptions o = TwoLevels();
  o.allowed_batch_sizes.clear();
  o.batch_costs = {{1, kMs}, {8, 8 * kMs}};  // linear: m rows cost m ms
  o.priority_lower_batch_cost = absl::Microseconds(5500);
  BatchQueue q(o);
  Admit(q, 1, 1, 100, kT0);
  ASSERT_TRUE(NextBatch(q, kT0).has_value());
  AdmitRows(q, 8, 2, 200, kT0);
  EXPECT_THAT(DrainRows(q, kT0), ElementsAre(5, 3));
}

TEST(PriorityIsolationTest, CapFollowsEachLevelsOwnHigherLevels) {
  // Three levels: level 2 traffic caps level 3's batches, but level 2's own
  // batches are capped only while level 1 is active.
  BatcherOptions o = TwoLevels();
  o.priority_levels = 3;
  o.priority_lower_batch_cost = 2 * kMs;
  BatchQueue q(o);
  Admit(q, 1, 2, 100, kT0);
  ASSERT_TRUE(NextBatch(q, kT0).has_value());
  AdmitRows(q, 4, 2, 200, kT0);
  EXPECT_THAT(DrainRows(q, kT0), ElementsAre(4));
  AdmitRows(q, 4, 3, 300, kT0);
  EXPECT_THAT(DrainRows(q, kT0), ElementsAre(2, 2));
}

// Costs for the fill ratio: 1 row 2 ms, 2 rows 2.5 ms, 4 rows 3 ms, 8 rows
// 4 ms: lower rows are cheap to add until the batch doubles past 4.
BatcherOptions FillCosts(double ratio) {
  BatcherOptions o = TwoLevels();
  o.batch_costs = {{1, 2 * kMs}, {2, absl::Microseconds(2500)}, {4, 3 * kMs}, {8, 4 * kMs}};
  o.priority_fill_cost_ratio = ratio;
  return o;
}

TEST(PriorityIsolationTest, FillRatioBoundsTheLowerRowsInAHigherBatch) {
  // R 1.5: one level-1 row costs 2 ms, so the batch may cost 3 ms: 4 rows.
  BatchQueue q(FillCosts(1.5));
  AdmitRows(q, 8, 2, 200, kT0);
  Admit(q, 1, 1, 100, kT0);
  std::optional<Batch> b = NextBatch(q, kT0);
  ASSERT_TRUE(b.has_value());
  EXPECT_THAT(Ids(*b), ElementsAre(100, 200, 201, 202));
  EXPECT_EQ(CloseReasonName(b->reason), "priority_cap");
  // R 2: 4 ms, the whole batch of 8.
  BatchQueue wide(FillCosts(2));
  AdmitRows(wide, 8, 2, 200, kT0);
  Admit(wide, 1, 1, 100, kT0);
  EXPECT_EQ(NextBatch(wide, kT0)->rows, 8);
}

TEST(PriorityIsolationTest, FillRatioCountsAllRowsOfTheHeadsLevel) {
  // Two level-1 rows (2.5 ms) allow 3.75 ms: 4 rows; the higher rows
  // themselves are never held back by it.
  BatchQueue q(FillCosts(1));
  AdmitRows(q, 8, 1, 100, kT0);
  AdmitRows(q, 4, 2, 200, kT0);
  EXPECT_EQ(NextBatch(q, kT0)->rows, 8);
  BatchQueue two(FillCosts(1.5));
  AdmitRows(two, 4, 2, 200, kT0);
  AdmitRows(two, 2, 1, 100, kT0);
  EXPECT_THAT(Ids(*NextBatch(two, kT0)), ElementsAre(100, 101, 200, 201));
}

TEST(PriorityIsolationTest, FlagsOffKeepTheBatchesOfBefore) {
  // The same traffic as the tests above: a lower batch while level 1 is
  // active is whole, and a level-1 batch is filled to max_batch_size.
  BatchQueue q(FillCosts(0));
  EXPECT_EQ(q.adaptive(), nullptr) << "no cost curve kept under kFixed with isolation off";
  Admit(q, 1, 1, 100, kT0);
  ASSERT_TRUE(NextBatch(q, kT0).has_value());
  AdmitRows(q, 8, 2, 200, kT0);
  EXPECT_THAT(DrainRows(q, kT0), ElementsAre(8));
  AdmitRows(q, 8, 2, 210, kT0);
  Admit(q, 1, 1, 101, kT0);
  EXPECT_THAT(Ids(*NextBatch(q, kT0)), ElementsAre(101, 210, 211, 212, 213, 214, 215, 216));
}

TEST(PriorityIsolationTest, OnlyBatchesIsolationStopsCountAsPriorityCap) {
  // Cap 4 rows (4 ms) while level 1 is active; ratio 1.5: a batch of two
  // level-1 rows (2 ms) takes no lower row (3 rows pad to 4: 4 ms > 3 ms).
  BatcherOptions o = TwoLevels();
  o.max_queue_delay = absl::Seconds(1);  // nothing closes for the delay here
  o.priority_lower_batch_cost = 4 * kMs;
  o.priority_fill_cost_ratio = 1.5;
  o.priority_active_window = 100 * kMs;
  BatchQueue q(o);
  AdmitRows(q, 6, 2, 200, kT0);
  AdmitRows(q, 2, 1, 100, kT0);
  std::optional<Batch> b = NextBatch(q, kT0);
  ASSERT_TRUE(b.has_value()) << "the fill ratio stops it";
  EXPECT_THAT(Ids(*b), ElementsAre(100, 101));
  EXPECT_EQ(CloseReasonName(b->reason), "priority_cap");
  b = NextBatch(q, kT0);
  ASSERT_TRUE(b.has_value()) << "the lower-batch cap stops it";
  EXPECT_EQ(b->rows, 4);
  EXPECT_EQ(CloseReasonName(b->reason), "priority_cap");
  // Level 1 with max_batch_size rows, and level 2 after the window: full.
  AdmitRows(q, 8, 1, 110, kT0);
  b = NextBatch(q, kT0);
  ASSERT_TRUE(b.has_value());
  EXPECT_THAT(Ids(*b), ElementsAre(110, 111, 112, 113, 114, 115, 116, 117));
  EXPECT_EQ(CloseReasonName(b->reason), "full");
  const absl::Time later = kT0 + 100 * kMs;
  AdmitRows(q, 8, 2, 210, later);
  b = NextBatch(q, later);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->rows, 8) << "2 left from before and 6 new";
  EXPECT_EQ(CloseReasonName(b->reason), "full");
}

// --- The latency target's admission estimate under isolation -------------
//
// FillCosts' curve (1 row 2 ms, 2 rows 2.5 ms, 4 rows 3 ms, 8 rows 4 ms) and
// a 10 ms target: batches of up to 8 rows (2 x 4 ms fit 10 ms). With the
// lower-batch cap at 2.5 ms, level 2 runs in batches of 2 while level 1 is
// active, each 2.5 ms: four of them take as long as the target.
BatcherOptions TargetWithCap() {
  BatcherOptions o = FillCosts(0);
  o.latency_target = 10 * kMs;
  o.priority_lower_batch_cost = absl::Microseconds(2500);
  return o;
}

TEST(PriorityIsolationTest, LowerLevelEstimateCountsItsCappedBatches) {
  BatchQueue q(TargetWithCap());
  Admit(q, 1, 1, 100, kT0);  // level 1 is active from here
  ASSERT_TRUE(NextBatch(q, kT0).has_value());
  AdmitRows(q, 8, 2, 200, kT0);  // the eighth: 4 x 2.5 ms, just in time
  // Uncapped, 8 rows ahead are one batch (4 ms) and its own 2 ms: 6 ms.
  // Capped, four batches of 2 ahead: 10 ms + 2 ms.
  std::unique_ptr<BatchTask> late = MakePriorityTask(1, 2, 208);
  EXPECT_THAT(q.Admit(&late, kT0),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("estimated to finish in 12ms"),
                             HasSubstr("8 rows queued ahead at priority <= 2 in 4 batch(es) "
                                       "before its own of 1 rows"),
                             HasSubstr("its level's batches of up to 2 rows at 2.5ms"))));
  EXPECT_NE(late, nullptr);
  // The batches the estimate counted are the ones that run.
  EXPECT_THAT(DrainRows(q, kT0), ElementsAre(2, 2, 2, 2));
  // Once level 1 is no longer active the batches are whole again, and so is
  // the estimate: 4 ms + 2 ms.
  const absl::Time quiet = kT0 + absl::Seconds(1);
  AdmitRows(q, 8, 2, 210, quiet);
  std::unique_ptr<BatchTask> fits = MakePriorityTask(1, 2, 218);
  EXPECT_THAT(q.Admit(&fits, quiet), IsOk());
  EXPECT_THAT(DrainRows(q, quiet), ElementsAre(8, 1));
}

// A task runs whole (Pick never splits one, whatever the cap): an 8-row
// level-2 request behind one capped level-2 row is one batch of 1 (2 ms)
// and its own of 8 (4 ms): 6 ms, admitted. Counted as pieces of the cap it
// would be 1 + 4 batches (12 ms) and refused, though it runs in time.
TEST(PriorityIsolationTest, AMultiRowRequestIsEstimatedAsTheWholeBatchItRunsIn) {
  BatchQueue q(TargetWithCap());
  Admit(q, 1, 1, 100, kT0);  // level 1 is active from here
  ASSERT_TRUE(NextBatch(q, kT0).has_value());
  AdmitRows(q, 1, 2, 200, kT0);
  std::unique_ptr<BatchTask> whole = MakePriorityTask(8, 2, 300);
  EXPECT_THAT(q.Admit(&whole, kT0), IsOk());
  EXPECT_THAT(DrainRows(q, kT0), ElementsAre(1, 8));
}

TEST(PriorityIsolationTest, EstimateCountsHigherLevelRowsAheadAtTheirOwnBatchSize) {
  // Level 1's rows ahead run in a whole batch (4 ms; its batches are never
  // capped), only level 2's own in batches of 2.
  BatchQueue q(TargetWithCap());
  AdmitRows(q, 8, 1, 100, kT0);
  // 4 ms + 2 ms, 2.5 ms, 2.5 + 2 ms, 2.5 + 2.5 ms: all within 10 ms.
  AdmitRows(q, 4, 2, 200, kT0);
  std::unique_ptr<BatchTask> late = MakePriorityTask(1, 2, 204);
  EXPECT_THAT(q.Admit(&late, kT0),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("estimated to finish in 11ms"),
                             HasSubstr("12 rows queued ahead at priority <= 2 in 3 batch(es)"))));
  EXPECT_THAT(DrainRows(q, kT0), ElementsAre(8, 2, 2));
}

TEST(PriorityIsolationTest, EstimateLeavesOutOfAHigherBatchTheRowsTheFillRatioKeepsOut) {
  // A 6 ms target (batches of up to 4 rows, 3 ms), the device busy 2 ms,
  // two level-1 rows queued (2.5 ms). Ratio 1: two level-2 rows may not ride
  // with them (4 rows, 3 ms > 2.5 ms) and need a batch of their own.
  BatcherOptions o = FillCosts(1);
  o.latency_target = 6 * kMs;
  BatchQueue q(o);
  AdmitRows(q, 2, 1, 100, kT0);
  q.SetDeviceFreeAt(kT0 + 2 * kMs);
  std::unique_ptr<BatchTask> late = MakePriorityTask(2, 2, 200);
  EXPECT_THAT(q.Admit(&late, kT0),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("estimated to finish in 7ms"),
                             HasSubstr("1 batch(es) before its own of 2 rows"))));
  // Ratio 2 lets them ride (3 ms <= 5 ms): one batch of 4, 2 ms + 3 ms.
  o.priority_fill_cost_ratio = 2;
  BatchQueue wide(o);
  AdmitRows(wide, 2, 1, 100, kT0);
  wide.SetDeviceFreeAt(kT0 + 2 * kMs);
  std::unique_ptr<BatchTask> rides = MakePriorityTask(2, 2, 200);
  EXPECT_THAT(wide.Admit(&rides, kT0), IsOk());
  EXPECT_THAT(Ids(*NextBatch(wide, kT0)), ElementsAre(100, 101, 200));
}

TEST(PriorityIsolationTest, StarvationBoundHoldsWithIsolationOn) {
  // One level-1 request every ms, each taking the executor; level 2 still
  // heads one batch in every lower_priority_share_every (4), capped.
  BatcherOptions o = TwoLevels();
  o.priority_lower_batch_cost = 2 * kMs;  // cap 2 rows
  o.priority_fill_cost_ratio = 1;          // no level-2 row rides with level 1
  o.lower_priority_share_every = 4;
  BatchQueue q(o);
  AdmitRows(q, 10, 2, 200, kT0);
  std::vector<std::vector<int>> batches;
  for (int i = 0; i < 8; ++i) {
    const absl::Time t = kT0 + (i + 1) * kMs;
    Admit(q, 1, 1, 100 + i, t);
    std::optional<Batch> b = NextBatch(q, t);
    ASSERT_TRUE(b.has_value());
    batches.push_back(Ids(*b));
  }
  // The fourth batch is level 2's (the oldest heads it; the waiting level-1
  // row joins it), capped at 2 rows.
  EXPECT_THAT(batches, ElementsAre(ElementsAre(100), ElementsAre(101), ElementsAre(102),
                                   ElementsAre(200, 103), ElementsAre(104), ElementsAre(105),
                                   ElementsAre(106), ElementsAre(201, 107)));
}

TEST(PriorityIsolationTest, BadValuesAreRefusedNamingTheFlagAndValue) {
  BatcherOptions o = TwoLevels();
  o.priority_lower_batch_cost = -kMs;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("priority_lower_batch_cost must be >= 0 "
                                               "(0: off), got -1ms")));
  for (double bad : {0.5, -1.0, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    o = TwoLevels();
    o.priority_fill_cost_ratio = bad;
    EXPECT_THAT(o.Validate(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("priority_fill_cost_ratio must be 0 (off) or a finite "
                                         "number >= 1, got "),
                               HasSubstr(absl::StrCat(bad)))))
        << bad;
  }
  o = TwoLevels();
  o.priority_active_window = absl::ZeroDuration();
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("priority_active_window must be > 0, got 0")));
  o = TwoLevels();
  o.priority_fill_cost_ratio = 1;
  o.priority_lower_batch_cost = 5 * kMs;
  EXPECT_THAT(o.Validate(), IsOk());
}

// --- The H200 case, simulated ----------------------------------------------
//
// ResNet-50 on an H200 (gpu-host measurements): a batch costs 2.1 ms at 1
// row, 5.2 ms at 32 and 34 ms at 256, linear between. The server as run
// there: adaptive batching, max_batch_size 256, the allowed sizes of the
// bench command, max_queue_delay 2 ms, two executors sharing one device
// that runs one forward at a time. Level 2: a closed loop of 256 clients
// (each sends again as soon as it is answered), as bench/priority.py's
// saturating metalserve-bench; level 1: Poisson arrivals at 10 % of level
// 2's throughput alone, so 90 % of the arrivals are level 2's.

absl::Duration ResNet50H200(int64_t padded_rows) {
  const double m = static_cast<double>(padded_rows);
  const double ms = m <= 32 ? 2.1 + (m - 1) * (5.2 - 2.1) / 31 : 5.2 + (m - 32) * (34 - 5.2) / 224;
  return absl::Microseconds(static_cast<int64_t>(ms * 1000));
}

BatcherOptions H200Options(double ratio, absl::Duration lower_cost) {
  BatcherOptions o;
  o.policy = BatchingPolicy::kAdaptive;
  o.max_batch_size = 256;
  o.allowed_batch_sizes = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256};
  o.max_queue_delay = 2 * kMs;
  o.max_queue_size = 8192;
  o.num_executors = 2;
  o.priority_levels = 2;
  o.batch_costs = {{1, ResNet50H200(1)}, {32, ResNet50H200(32)}, {256, ResNet50H200(256)}};
  o.priority_fill_cost_ratio = ratio;
  o.priority_lower_batch_cost = lower_cost;
  return o;
}

struct SimResult {
  double high_p99_ms = 0;
  double high_p50_ms = 0;
  double high_per_s = 0;
  double low_per_s = 0;
};

// Discrete events on simulated time, as the Batcher drives the queue: an
// idle executor polls at every arrival and completion and at the wake time
// Poll gives; a batch goes to the device (FIFO behind the batch running)
// and holds its executor until it is done; the queue is told the device's
// expected free time and each batch's device time and occupancy.
class H200Sim {
 public:
  H200Sim(BatcherOptions options, int low_clients, double high_per_s)
      : options_(options), queue_(std::move(options)), low_clients_(low_clients),
        high_per_s_(high_per_s), executors_(static_cast<size_t>(options_.num_executors)) {}

  SimResult Run(absl::Duration warmup, absl::Duration measured) {
    const absl::Time end = kT0 + warmup + measured;
    measure_from_ = kT0 + warmup;
    next_high_ = high_per_s_ > 0 ? kT0 + NextGap() : absl::InfiniteFuture();
    for (int c = 0; c < low_clients_; ++c) Submit(2, c, kT0);
    absl::Time now = kT0;
    while (now < end) {
      Complete(now);
      while (next_high_ <= now) {
        Submit(1, next_id_++, next_high_);
        next_high_ += NextGap();
      }
      PollIdle(now);
      now = NextEvent(now);
    }
    return Summarise(measured);
  }

 private:
  struct Executor {
    std::optional<Batch> batch;
    absl::Time handed_at, done_at = absl::InfiniteFuture();
    absl::Duration estimate;
  };

  absl::Duration NextGap() {
    const double u = (static_cast<double>(rng_()) + 0.5) / 4294967296.0;
    return absl::Seconds(-std::log(u) / high_per_s_);
  }

  void Submit(int level, int id, absl::Time now) {
    std::unique_ptr<BatchTask> t = MakePriorityTask(1, level, id);
    ASSERT_THAT(queue_.Admit(&t, now), IsOk());
  }

  void Complete(absl::Time now) {
    for (Executor& e : executors_) {
      if (!e.batch.has_value() || e.done_at > now) continue;
      const absl::Duration device = ResNet50H200(e.batch->padded_rows);
      queue_.ObserveBatch(e.batch->padded_rows, device);
      queue_.ObserveOccupancy(e.batch->padded_rows, e.done_at - e.handed_at);
      queue_.SetDeviceFreeAt(load_.Done(e.done_at, e.estimate));
      for (const auto& t : e.batch->tasks) {
        if (t->priority_level == 2) {
          if (e.done_at >= measure_from_) ++low_done_;
          Submit(2, static_cast<const FakeTask*>(t.get())->id(), e.done_at);
        } else if (t->enqueue_time >= measure_from_) {
          high_ms_.push_back(absl::ToDoubleMilliseconds(e.done_at - t->enqueue_time));
        }
      }
      e.batch.reset();
      e.done_at = absl::InfiniteFuture();
    }
  }

  void PollIdle(absl::Time now) {
    wake_at_ = absl::InfiniteFuture();
    for (Executor& e : executors_) {
      if (e.batch.has_value()) continue;
      BatchQueue::PollResult r = queue_.Poll(now, /*draining=*/false);
      if (!r.batch.has_value()) {
        wake_at_ = r.wake_at;
        return;
      }
      const int64_t padded = r.batch->padded_rows;
      e.estimate = queue_.EstimatedDeviceCost(padded);
      queue_.SetDeviceFreeAt(load_.Started(now, e.estimate));
      e.handed_at = now;
      device_free_ = std::max(device_free_, now) + ResNet50H200(padded);
      e.done_at = device_free_;
      e.batch = std::move(r.batch);
    }
  }

  absl::Time NextEvent(absl::Time now) const {
    absl::Time next = std::min(next_high_, wake_at_);
    for (const Executor& e : executors_) next = std::min(next, e.done_at);
    return std::max(next, now + absl::Nanoseconds(1));
  }

  SimResult Summarise(absl::Duration measured) {
    SimResult r;
    std::sort(high_ms_.begin(), high_ms_.end());
    if (!high_ms_.empty()) {
      r.high_p99_ms = high_ms_[static_cast<size_t>(0.99 * (high_ms_.size() - 1))];
      r.high_p50_ms = high_ms_[high_ms_.size() / 2];
    }
    r.high_per_s = high_ms_.size() / absl::ToDoubleSeconds(measured);
    r.low_per_s = low_done_ / absl::ToDoubleSeconds(measured);
    return r;
  }

  const BatcherOptions options_;
  BatchQueue queue_;
  const int low_clients_;
  const double high_per_s_;
  std::vector<Executor> executors_;
  DeviceLoad load_;
  std::mt19937 rng_{19};
  absl::Time measure_from_, next_high_, wake_at_ = absl::InfiniteFuture();
  absl::Time device_free_ = absl::InfinitePast();
  int next_id_ = 1000000;
  int64_t low_done_ = 0;
  std::vector<double> high_ms_;
};

SimResult Simulate(double ratio, absl::Duration lower_cost, int low_clients, double high_per_s) {
  H200Sim sim(H200Options(ratio, lower_cost), low_clients, high_per_s);
  return sim.Run(/*warmup=*/absl::Milliseconds(500), /*measured=*/absl::Seconds(5));
}

void Report(const char* name, const SimResult& r, double idle_p99) {
  std::cout << name << ": level 1 p50 " << r.high_p50_ms << " ms, p99 " << r.high_p99_ms
            << " ms (" << r.high_p99_ms / idle_p99 << "x idle), " << r.high_per_s
            << "/s; level 2 " << r.low_per_s << "/s\n";
}

TEST(PriorityIsolationTest, H200SimulationLevelOneP99StaysWithinTwiceItsIdleP99) {
  const double saturated = Simulate(0, absl::ZeroDuration(), 256, 0).low_per_s;
  const double high_rate = 0.1 * saturated;
  const SimResult idle = Simulate(0, absl::ZeroDuration(), 0, high_rate);
  const SimResult off = Simulate(0, absl::ZeroDuration(), 256, high_rate);
  const SimResult tight = Simulate(1.5, 5 * kMs, 256, high_rate);
  const SimResult loose = Simulate(2, 8 * kMs, 256, high_rate);
  std::cout << "level 2 alone " << saturated << "/s; level 1 at " << high_rate << "/s\n";
  Report("idle", idle, idle.high_p99_ms);
  Report("off", off, idle.high_p99_ms);
  Report("ratio 1.5, cost 5ms", tight, idle.high_p99_ms);
  Report("ratio 2, cost 8ms", loose, idle.high_p99_ms);

  ASSERT_GT(idle.high_p99_ms, 0);
  // Off: level 1 waits behind whole 256-row batches (the GPU host's ~68 ms).
  EXPECT_GT(off.high_p99_ms, 5 * idle.high_p99_ms);
  // The goal of issue 19 item 3, with ratio 1.5 and 5 ms.
  EXPECT_LE(tight.high_p99_ms, 2 * idle.high_p99_ms);
  // The looser setting trades latency for throughput: between the two.
  EXPECT_LT(loose.high_p99_ms, off.high_p99_ms / 2);
  EXPECT_GT(loose.low_per_s, tight.low_per_s);
  // What it costs level 2: at least half its throughput stays.
  EXPECT_GT(tight.low_per_s, 0.5 * off.low_per_s);
  // Every level-1 request was answered at the rate it came.
  EXPECT_NEAR(tight.high_per_s, high_rate, 0.1 * high_rate);
}

}  // namespace
}  // namespace metalserve
