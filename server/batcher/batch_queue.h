// BatchQueue: the batch formation policy, free of threads and clocks.
//
// Holds admitted tasks in arrival order, bounded in rows. Poll(now) answers
// what is due at `now`: tasks whose deadline passed or whose caller left
// (to be aborted), and at most one batch when one should close:
//
//  * The batch is headed by the oldest task of the highest priority level
//    waiting (1 = highest) and built from that task's key: the head first,
//    then the other tasks of that key by level and arrival while their rows
//    fit in max_batch_size. A higher-priority request therefore never waits
//    behind the forming of a lower-priority batch: it heads the next batch,
//    and lower-level rows of its shape fill the room it leaves.
//  * Starvation bound (the guaranteed share): when a batch is formed while an
//    older task of a lower level waits, the lower level has been passed
//    over; after lower_priority_share_every - 1 such batches in a row, the
//    next batch is headed by the oldest waiting task whatever its level. So
//    while lower levels wait they head at least one batch in every
//    lower_priority_share_every.
//  * The delay counts from the oldest task picked for the batch.
//  * While the favoured batch is still forming (not due), the batch of the
//    oldest task runs instead if that one is due (full or past its delay),
//    so the device does not sit idle; batches are not pre-empted, so a
//    higher-priority request can still wait for a running batch.
//  * It closes at once when full (max_batch_size reached, or the next task of
//    that key does not fit); when max_queue_delay has passed since the oldest
//    task was admitted; immediately when max_queue_delay is zero; and
//    immediately while draining.
//  * With policy kAdaptive, it also closes before the delay expires as soon
//    as waiting is not expected to pay (reason kNoGain): the rule, its
//    formula and why are in adaptive_policy.h. max_queue_delay stays the
//    bound. A batch headed by a task above the lowest level closes as soon
//    as an executor is free (kNoGain; lower-level rows of its shape fill its
//    room): the rule waits for throughput, which is the lowest level's
//    concern; a higher level's request waited for the busy executor to come
//    back (up to a whole batch's occupancy) before this.
//  * With a latency_target: see BatcherOptions::latency_target. The estimate
//    of a request's completion at admission: the work ahead of it is the
//    rows queued at its level or higher (lower levels' rows are not ahead of
//    it: they only fill room), then its own rows, last at its level. These
//    are packed into batches the way Pick forms them, level by level from
//    level 1: a batch headed by level h takes at most CapFor(h) rows
//    (MaxRows, the latency target's size, and while the lower-batch cap
//    applies to h at most that cap), first level h's rows, then those of
//    the levels below down to the request's while the fill ratio lets them
//    join. So each level's rows are counted at the size its batches will
//    have: a higher level's at its own (level 1's never capped), the
//    request's capped while a level above it is active. Each batch at the
//    cost curve's figure (executor occupancy, per-batch overhead included);
//    the work in flight (SetDeviceFreeAt) and the batches before its own
//    are shared among num_executors executors, then its own batch runs; and
//    never less than the device's forwards of all of them one after
//    another. Not modelled: the tasks' keys and row granularity (rows are
//    packed one by one), the starvation bound, and rows arriving or queued
//    behind it that will join its batch (except where its batch would be
//    cut back from padding: below).
//  * Priority isolation (both off by default; measured on the GPU host,
//    ResNet-50 batch 256 at 34 ms: without them level 1's p99 under
//    saturation was 68-92 ms, because a level-1 arrival waits behind a whole
//    lower-level batch already running or formed, and a batch headed by
//    level 1 was filled to 256 rows with level-2 rows and cost 34 ms itself).
//    Let c(m) be the device time of a batch of m rows after padding, from
//    the cost curve (AdaptivePolicy::DeviceCostOf: measured at warm-up per
//    allowed size, refined from every batch; with no figures c = 0 and both
//    rules let everything through), and H the level of the task heading
//    the batch. Device time, not the executor's occupancy (which also holds
//    the wait for a device slot behind another batch, so it would count the
//    queueing these rules are meant to bound): the device is where batches
//    queue behind one another, and another executor forms the higher batch
//    meanwhile.
//     - Lower-batch cap (priority_lower_batch_cost = D > 0): while a level
//       above H is active (one of its requests was admitted less than
//       priority_active_window ago), the batch takes at most
//         cap = the largest allowed size m (every size up to max_batch_size
//               when none are listed) with c(m) <= D,
//       or the smallest allowed size (1) when none fits. A higher-level
//       arrival then waits behind at most ~D of lower-level device time per
//       batch ahead of it (one running, one formed with two executors)
//       instead of a whole max_batch_size batch. Outside the window lower
//       levels run at max_batch_size again, so the cap costs throughput
//       only while a higher level is sending.
//     - Fill ratio (priority_fill_cost_ratio = R >= 1): a task of a level
//       below H joins the batch only while
//         c(rows picked so far + its rows) <= R x c(rows of level <= H picked),
//       so lower rows ride in the higher level's room without making its
//       batch cost more than R times what the higher rows alone cost (before
//       this a single level-1 row was filled to a 34 ms batch of 256).
//    Both close the batch at once where they stop it: it can take no more of
//    what waits. The reason is kPriorityCap ("priority_cap" in
//    metalserve_batches_total{reason}, so isolation shows in the metric)
//    when the batch stops below the size it would have without them (a
//    batch that reaches max_batch_size, or MaxRows under a latency target,
//    is kFull as before). Under a latency target the admission estimate
//    counts both (above). Simulated for the H200 (tests/batcher/
//    priority_isolation_test.cc: 256 level-2 clients in a closed loop,
//    level 1 Poisson at 10 % of level 2's throughput alone, two executors,
//    one device): level 1's p99 75.0 ms off (10.6x its idle 7.1 ms), 11.6 ms
//    (1.63x) with R 1.5 / D 5 ms at 0.59x level 2's throughput, 17.5 ms
//    (2.46x) with R 2 / D 8 ms at 0.86x. With two executors a level-1
//    arrival can still wait behind two capped batches (one running, one
//    formed) and its own, R x c(its rows): ~2 D + R c(1) in the worst case.
//    The starvation bound is unchanged (it counts batches; capped ones are
//    smaller).
//  * Cut back from padding (policy kAdaptive with allowed_batch_sizes and
//    trim_padded_batches, the default). Once a batch of R rows closes, it
//    may keep only a prefix of its tasks (whole tasks, head first: the
//    newest and the lower levels' fill go first), K rows, leaving the rest,
//    R - K rows, queued in order for a later batch. With c(m) the device
//    time of m rows padded (the cost curve), the split is worth
//      T(K) = c(K) + (R - K) x b(R - K, top),
//    the prefix's run plus the rest's share of the batch it will ride in:
//    b(r, top) is the lowest device time per row of a batch of r to top
//    rows (at an allowed size in that range, or at top), where
//    top = r + the rows expected to arrive while the prefix runs (c(K) /
//    the expected gap x rows per request; none while draining or when
//    nothing is expected; at most MaxRows()). The batch is cut to the K
//    with the lowest T(K) (the larger on a tie) when T(K) < kTrimGain x
//    c(R). So at saturation the rest rides in a full batch at its per-row
//    cost, and at the end of a burst it is counted running alone (100 rows
//    at the H200's costs: cut to 64 under load, 9.3 + 36 x 0.133 = 14.1 ms
//    against 17.5 ms padded to 128; kept whole with nothing arriving,
//    9.3 + 9.3 = 18.6 ms). Every kWholeEvery-th cut runs whole instead, so
//    the figure of the size cutting avoids is measured again. Why: padding
//    runs zero rows on the device. Measured on the H200 (ResNet-50 fp32,
//    sizes 1,8,32,64,128,256, bench/pipeline_h200.sh): 30-38 % of the rows
//    the device ran were padding at 64 and 256 clients (fixed 5 ms at 64:
//    22 %) while it was 89-97 % busy; cut back (by the first version of
//    the rule, which compared c(K) / K with c(R) / R and left the rest's
//    cost out), 12-26 % and 1.04-1.25x the throughput. With no cost figures
//    (c = 0) nothing is cut. The latency target's admission estimate
//    models the cut of the request's own batch: the cut leaves the newest
//    rows out first, so a request whose batch would be cut is estimated
//    behind the kept prefix (one more batch ahead) in a batch of the rows
//    the rest is expected to reach (counting its own batch padded whole
//    had it finish too early when it rides in the next), no larger than its
//    level's batches may grow. Not modelled: cuts of the batches ahead of
//    it (counted padded; a cut there makes that batch cheaper but can push
//    rows into the request's batch), the cut taking a lower level's fill
//    before the request (the rows ahead are counted as the request's
//    level), and every kWholeEvery-th cut's running whole.
//  * Otherwise Poll says when to look again: the oldest task's delay expiry,
//    the earliest deadline or when the adaptive policy reconsiders, whichever
//    is first.
//
// The batcher calls Poll only when an executor is free, so a batch is formed
// when it can run, never earlier.
//
// Thread-safety: none; the owner (Batcher) serialises access.
#ifndef METALSERVE_SERVER_BATCHER_BATCH_QUEUE_H_
#define METALSERVE_SERVER_BATCHER_BATCH_QUEUE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/batcher/adaptive_policy.h"
#include "server/batcher/batch_task.h"

namespace metalserve {

// How a partial batch is closed before max_queue_delay: kFixed never (it
// waits the whole delay), kAdaptive when waiting no longer pays.
enum class BatchingPolicy { kFixed, kAdaptive };
absl::string_view BatchingPolicyName(BatchingPolicy policy);

struct BatcherOptions {
  // Default kFixed here (metalserve's --batching flag defaults to adaptive).
  BatchingPolicy policy = BatchingPolicy::kFixed;
  // Measured cost of a batch per size (the runtime's warm-up), seeding the
  // adaptive policy's cost curve; refined from every batch. May be empty.
  std::vector<BatchCostPoint> batch_costs;
  // Most rows in one model batch. Default 32.
  int64_t max_batch_size = 32;
  // Longest time the oldest waiting task waits for others to join its batch.
  // Zero: a free executor takes whatever waits. Default 2 ms.
  absl::Duration max_queue_delay = absl::Milliseconds(2);
  // Batch sizes the model runs at, ascending. A batch is padded up to the
  // next allowed size. Empty: no padding. When set, the largest must equal
  // max_batch_size.
  std::vector<int64_t> allowed_batch_sizes;
  // Under kAdaptive with allowed_batch_sizes: cut a closed batch back when
  // padding it costs more device time than running it in two (see "Cut
  // back from padding" above). Default on.
  bool trim_padded_batches = true;
  // Most rows waiting in the queue; beyond it new tasks are refused with
  // UNAVAILABLE. Default 1024.
  int64_t max_queue_size = 1024;
  // Executor threads forming and processing batches. Default 1.
  int num_executors = 1;
  // Batches in flight follow the load (see InFlightLimit): with more than
  // two executors, a further batch is formed only while the rows in the
  // server (waiting, and in the batches being run) give each batch then in
  // flight at least this many. 0: off, every free executor forms a batch.
  // >= 0.
  //
  // Why: under a closed-loop load of P requests, B batches in flight hold
  // at most P / B rows each. Measured on the H200 (ResNet-50 fp32, adaptive,
  // 2026-12-03, bench/results/h200-2026-12-03-executors-delay5-log.txt):
  // four executors and device slots served 1.27-1.29x two at 256 clients
  // (batches of ~52 rows overlapping their host work with the device) but
  // 0.76-0.96x at 64 clients, where four batches split 64 requests into
  // batches of 13-16 rows (two: 23), whatever the delay bound (2 or 5 ms).
  int64_t rows_per_slot = 0;
  // Priority levels, 1 = highest. Default 1 (no priorities).
  int priority_levels = 1;
  // Level of a request that asks for none; 0: the lowest (priority_levels).
  int default_priority = 0;
  // Per level (index 0 = level 1; missing entries are 0): most rows of that
  // level waiting, beyond which its requests are refused with UNAVAILABLE;
  // 0: only max_queue_size bounds it.
  std::vector<int64_t> priority_queue_rows;
  // Per level (index 0 = level 1; missing entries are 0): how long a request
  // of that level may wait when its caller set no earlier deadline; 0: no
  // limit of its own.
  std::vector<absl::Duration> priority_timeouts;
  // End-to-end latency target; 0: none. When set (needs batch_costs or
  // measured batches; see the file comment): batches are capped at the
  // largest size whose cost fits half the target, a partial batch closes by
  // its oldest row's arrival + target - 2 x its cost (its own run and one
  // batch possibly ahead of it), and a request whose estimated completion is
  // after its deadline or arrival + target is refused at once with
  // DEADLINE_EXCEEDED giving the estimate. A target below the measured
  // batch-1 cost is INVALID_ARGUMENT naming that cost.
  absl::Duration latency_target = absl::ZeroDuration();
  // The starvation bound (see above). Default 4: lower levels head at least
  // a quarter of the batches while they wait. >= 2.
  int lower_priority_share_every = 4;
  // Priority isolation (off by default; see "Priority isolation" above).
  // priority_lower_batch_cost: while a higher level is active, a batch
  // headed by a lower level is capped at the largest allowed size whose
  // device time on the cost curve is at most this. 0: off. >= 0.
  absl::Duration priority_lower_batch_cost = absl::ZeroDuration();
  // priority_fill_cost_ratio: lower-level rows join a batch headed by a
  // higher level only while its device time stays at most this many times
  // that of the rows of the head's level (or above) alone. 0: off;
  // otherwise >= 1 (finite).
  double priority_fill_cost_ratio = 0;
  // How long after a level's last admission it counts as active (for
  // priority_lower_batch_cost). Default 1 s. > 0.
  absl::Duration priority_active_window = absl::Seconds(1);
  // Most rows one request may have. A request with more than max_batch_size
  // rows (and at most this many) is split into pieces of max_batch_size rows
  // that run in as many batches as needed (BatchTask::Split); above it the
  // request is refused with INVALID_ARGUMENT. 0: max_queue_size. At most
  // max_queue_size.
  int64_t max_request_rows = 0;
  // Unbatched calls on the submitting thread (Batcher::Submit): with
  // max_batch_size 1 (or a batched model under kAdaptive, for a one-row call
  // its Poll closes at once), a call submitted while nothing of this model is queued
  // or running, and its device idle (Batcher's device_idle probe), runs on
  // the thread that submits it (gRPC's, for a gRPC call) instead of being
  // handed to an executor, when its estimated cost (EstimatedCost(1): the
  // larger of device time and executor occupancy, once kSubmitterWarmBatches
  // batches have been measured) is at most this. 0: off (the default here;
  // metalserve's --inline_max_cost sets it). Needs the cost curve (kAdaptive,
  // a latency target or priority isolation). >= 0.
  absl::Duration inline_max_cost = absl::ZeroDuration();
  // Whether a submitter that ran its own call takes the calls that arrived
  // meanwhile (follow-ons, Batcher::kSubmitterHold), and so whether such a
  // call waits for that submitter instead of waking an executor; unbatched
  // models only (max_batch_size 1). Off for a model on an accelerator given
  // its own bound and several executors (ModelServable): there the
  // submitter only waits through each forward, so taking the next calls one
  // after another serialises their host work, which executors would overlap
  // with the device (the likely cause of the inline bound's loss at c=4 on
  // an H100; the change itself not yet measured there, docs/performance.md).
  bool inline_follow_ons = true;

  absl::Status Validate() const;
  // The level a request asking for `priority` (0: none) gets, or
  // INVALID_ARGUMENT naming the range.
  absl::StatusOr<int> LevelOf(int priority) const;
  // max_request_rows, or max_queue_size when 0.
  int64_t MaxRequestRows() const {
    return max_request_rows > 0 ? max_request_rows : max_queue_size;
  }
  // Rows a batch of `rows` is padded to.
  int64_t PaddedRows(int64_t rows) const;
  // Most batches in flight (handed to the processor) while `rows_in_server`
  // rows wait or run: num_executors when rows_per_slot is 0, otherwise
  // ceil(rows_in_server / rows_per_slot) clamped to [min(2, num_executors),
  // num_executors] (two keep batch N+1's host work overlapping batch N's
  // compute at any load, as they did before the limit existed).
  int InFlightLimit(int64_t rows_in_server) const;
};

class BatchQueue {
 public:
  // A task cancelled within this long before its deadline counts as expired
  // (its client gave up at its own deadline, which precedes the server's by
  // the call's transit time).
  static constexpr absl::Duration kDeadlineSkew = absl::Milliseconds(50);
  // A closed batch is cut back only when the split's device time is below
  // this share of the whole padded batch's (see "Cut back from padding"):
  // below a 10 % gain the rows left behind are not worth their extra wait.
  static constexpr double kTrimGain = 0.9;
  // Every this many cuts, one batch runs whole instead.
  static constexpr int64_t kWholeEvery = 16;

  // Whether `task` may still run at `now`. The deadline is checked first:
  // gRPC also marks a call whose deadline passed as cancelled, and its caller
  // should hear DEADLINE_EXCEEDED; a cancellation within kDeadlineSkew of the
  // deadline is the deadline's. Used by the queue and again by the executor
  // just before a formed batch runs.
  enum class Liveness { kLive, kExpired, kCancelled };
  static Liveness LivenessOf(const BatchTask& task, absl::Time now);

  explicit BatchQueue(BatcherOptions options);

  // Admits `*task` at `now` (taking ownership) or refuses it, leaving it with
  // the caller: INVALID_ARGUMENT when it has more than max_request_rows rows
  // (or more than max_batch_size and cannot be split), UNAVAILABLE when the
  // queue has no room for all its rows. A task of more than max_batch_size
  // rows is admitted as its pieces (BatchTask::Split), all at once.
  absl::Status Admit(std::unique_ptr<BatchTask>* task, absl::Time now);

  struct PollResult {
    std::vector<std::unique_ptr<BatchTask>> expired;    // deadline passed
    std::vector<std::unique_ptr<BatchTask>> cancelled;  // caller gone
    std::optional<Batch> batch;
    // When Poll should next be called if nothing else happens.
    absl::Time wake_at = absl::InfiniteFuture();
  };
  PollResult Poll(absl::Time now, bool draining);
  // Poll for an executor that may not form a batch now (the in-flight
  // limit): only the expired and cancelled tasks, and wake_at at the
  // earliest deadline still waiting.
  PollResult PollDeadOnly(absl::Time now);
  // Rows in the batches handed to the processor and not back yet: the
  // batcher adds a batch's rows when it hands the batch over and takes them
  // back when it returns. With the queue's own rows they set the in-flight
  // limit (BatcherOptions::InFlightLimit), which the batcher applies and the
  // latency target's estimate shares the work ahead by.
  void AddRowsInFlight(int64_t rows) { rows_in_flight_ += rows; }
  // Executors the in-flight limit lets run now, with `extra` more rows queued.
  int ExecutorsInUse(int64_t extra = 0) const {
    return options_.InFlightLimit(queued_rows_ + rows_in_flight_ + extra);
  }

  // Cost curve inputs (ignored when none is kept): when the forwards handed
  // to the device are expected to be done, and the measured device time of
  // one that ran at `padded_rows`.
  void SetDeviceFreeAt(absl::Time t);
  void ObserveBatch(int64_t padded_rows, absl::Duration cost);
  // How long a batch of `padded_rows` occupied its executor, end to end.
  void ObserveOccupancy(int64_t padded_rows, absl::Duration took);
  // Estimated cost of a batch of `rows` (the larger of its device time and
  // its executor occupancy); zero when no cost curve is kept (kFixed without
  // a latency target or priority isolation).
  absl::Duration EstimatedCost(int64_t rows) const;
  // Its device time alone (what SetDeviceFreeAt's estimate is made of).
  absl::Duration EstimatedDeviceCost(int64_t rows) const;
  const AdaptivePolicy* adaptive() const { return adaptive_ ? &*adaptive_ : nullptr; }

  int64_t queued_rows() const { return queued_rows_; }
  // Rows of priority `level` waiting.
  int64_t queued_rows_at(int level) const { return level_rows_.at(level - 1); }
  bool empty() const { return tasks_.empty(); }
  const BatcherOptions& options() const { return options_; }

 private:
  void RemoveDead(absl::Time now, PollResult* result);
  // Largest batch: max_batch_size, or under a latency target the largest
  // size whose cost is at most half the target (at least 1).
  int64_t MaxRows() const;
  // Under a latency target: DEADLINE_EXCEEDED with the estimate when `task`
  // (level set) cannot finish before its deadline or now + target.
  absl::Status CheckCompletionEstimate(const BatchTask& task, absl::Time now) const;
  // The batches a request of `rows` rows at `level`, admitted at `now`, is
  // expected to wait for and run in (the latency_target item of the file
  // comment); needs the cost curve.
  struct BatchPlan {
    int64_t batches_before = 0;     // batches ahead of the request's own
    absl::Duration cost_before;     // their CostOf, summed
    absl::Duration device_before;   // their DeviceCostOf, summed
    int64_t own_rows = 0;           // rows of the request's own batch
  };
  BatchPlan PlanThrough(int level, int64_t rows, absl::Time now) const;
  // Under a latency target: how long until `plan`'s request is done: the
  // work in flight and the batches ahead spread over the executors, but
  // never less than the device's forwards one after another.
  // `executors`: how many share the work ahead (ExecutorsInUse).
  absl::Duration EstimateCompletion(const BatchPlan& plan, int executors, absl::Time now) const;
  // Checks the level's own bound and sets the task's level fields.
  absl::Status AdmitAtLevel(BatchTask* task, absl::Time now);
  // Index in tasks_ of the task that heads the next batch.
  size_t HeadIndex() const;
  // The head and the tasks of its key that join it at `now`, in batch order;
  // `*closed` is set when the batch cannot take more: kFull at its size
  // (max_batch_size, or MaxRows under a latency target), kPriorityCap where
  // the lower-batch cap or the fill ratio stops it below that.
  std::vector<size_t> Pick(size_t head, absl::Time now, int64_t* rows,
                           std::optional<CloseReason>* closed) const;
  // Most rows of a batch headed by a task of `level` at `now`: MaxRows(),
  // or at most LowerBatchCap() while the lower-batch cap applies (it is on
  // and a level above `level` is active).
  int64_t CapFor(int level, absl::Time now) const;
  // Whether a level above `level` had a request admitted within
  // priority_active_window before `now`.
  bool HigherLevelActive(int level, absl::Time now) const;
  // The lower-batch cap: the largest allowed size whose device cost is at
  // most priority_lower_batch_cost (the smallest allowed size when none is).
  int64_t LowerBatchCap() const;
  // Whether a lower-level task of `add` rows may join a batch of `rows` rows
  // of which `own` are of the head's level or above (the fill ratio).
  bool FillFits(int64_t rows, int64_t own, int64_t add) const;
  // Most rows (at least `own`, at most `cap`) that a batch with `own` rows
  // of the head's level or above may reach with lower rows under the fill
  // ratio; `cap` when the ratio is off.
  int64_t FillLimit(int64_t own, int64_t cap) const;
  // A batch headed by tasks_[head]: why it closes now, or nothing (and
  // when to look again in `*wake_at`).
  struct Candidate {
    std::vector<size_t> picked;
    int64_t rows = 0;
  };
  std::optional<CloseReason> Consider(size_t head, absl::Time now, bool draining,
                                      Candidate* c, absl::Time* wake_at) const;
  // Under kAdaptive with allowed sizes: cuts `c`'s tail back (see "Cut back
  // from padding" above).
  void TrimToAllowedSize(Candidate* c, absl::Time now, bool draining);
  // The lowest device time per row of a batch of `rest` to `top` rows.
  double BestRowCost(int64_t rest, int64_t top) const;
  // Whether a closed batch of `rows` may be cut back from padding.
  bool CutsPadding(int64_t rows) const;
  // Keeping `kept` of a closed batch's `rows`: T(K) in seconds, and the rows
  // the rest is expected to ride with (top, at least the rest).
  struct SplitCost {
    double total = 0;
    int64_t rest_batch_rows = 0;
  };
  SplitCost CostOfSplit(int64_t kept, int64_t rows, absl::Time now, bool draining) const;
  // Removes `picked` from tasks_ into a batch; updates the starvation count.
  Batch TakeBatch(const std::vector<size_t>& picked, int64_t rows);

  // Whether a partial batch of `rows` (not full, not draining) closes now.
  std::optional<CloseReason> PartialClose(int64_t rows, absl::Time now,
                                          absl::Time delay_expiry, absl::Time* wake_at) const;

  const BatcherOptions options_;
  std::optional<AdaptivePolicy> adaptive_;
  std::deque<std::unique_ptr<BatchTask>> tasks_;
  int64_t queued_rows_ = 0;
  int64_t rows_in_flight_ = 0;  // AddRowsInFlight
  // The earliest deadline of the tasks waiting (InfiniteFuture: none).
  absl::Time EarliestDeadline() const;
  std::vector<int64_t> level_rows_;  // by level - 1
  // Batches formed in a row while an older lower-level task waited.
  int passed_over_ = 0;
  // Batches cut back so far (for kWholeEvery).
  int64_t cuts_ = 0;
  // By level - 1: when a request of that level was last admitted.
  std::vector<absl::Time> last_admitted_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_BATCHER_BATCH_QUEUE_H_
