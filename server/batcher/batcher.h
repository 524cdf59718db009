// Batcher: a bounded, deadline- and cancel-aware request queue with executor
// threads that form batches when they are free and hand them to a processor.
//
// Behaviour (the policy itself is BatchQueue's; see batch_queue.h):
//  * Submit() admits a task or refuses it at once: UNAVAILABLE when the queue
//    (max_queue_size rows) is full or the batcher is shutting down,
//    INVALID_ARGUMENT when the task alone exceeds max_batch_size.
//  * Each of num_executors threads, when free, polls the queue: tasks whose
//    deadline passed are aborted with DEADLINE_EXCEEDED and cancelled ones
//    with CANCELLED, without running; a batch that is due is handed to the
//    processor on that thread; otherwise the thread waits until a task
//    arrives, the oldest task's delay expires or a deadline passes.
//  * With more than one executor, batch N+1 is formed and its input prepared
//    while batch N computes (pipelining); the processor bounds concurrent
//    device work itself. With rows_per_slot set, a free executor forms a
//    batch only while the batches in the processor are fewer than
//    BatcherOptions::InFlightLimit of the rows waiting and running; held
//    back, it still aborts expired and cancelled tasks.
//  * Under the adaptive policy the batcher tells the queue when the batches
//    it handed out are expected to be done (from the device-time curve), the
//    processor reports how long each occupied the device
//    (ObserveBatchCost), and the batcher times how long each occupied its
//    executor end to end (the processor's whole call: gathering, forward,
//    answering); both refine the cost curve.
//  * Unbatched calls on the submitting thread (BatcherOptions::
//    inline_max_cost): with max_batch_size 1, Submit runs a task that may
//    run on its submitter (BatchTask::may_run_on_submitter) itself, before
//    it returns, when nothing is queued, no batch is in the processor, the
//    device_idle probe says the device is free, and the measured cost of a
//    call is at most inline_max_cost; it is then polled, accounted and
//    processed exactly as an executor would (the same Poll, cost curve and
//    occupancy). Why: the hand-off to an executor costs two thread switches
//    per call, more than a small model's forward. Why only short work: the
//    submitter is gRPC's polling thread, which runs the callbacks of one
//    poll one after another, so a long run there delays every call that
//    poll read (measured: a flooded 138 ms model took a light one's p99 from
//    under 0.6 s to 6.8 s) and holds back the unread-answer guard's
//    cancellations (docs/performance.md). A call that arrives while another
//    runs on its submitter is not handed to an executor (no wake-up): that
//    submitter takes it when its own is done, and so on while each stays
//    cheap, the device idle and the thread's time in Submit plus the next
//    call's estimated cost within kSubmitterHold x inline_max_cost; what is
//    left then wakes an executor. With inline_follow_ons off (a model on an
//    accelerator with its own bound) the submitter takes none, and a call
//    arriving meanwhile wakes an executor at once.
//  * A batched model's lone call on its submitter: under the adaptive
//    policy the same holds for a one-row call when the arrivals are sparse
//    (the next expected no sooner than kLoneRowQuietRuns of its runs away)
//    and that Poll closes it at once (kNoGain: nothing else expected soon);
//    no follow-ons (what arrives meanwhile is a batch for an executor). When
//    the policy would rather wait for more rows, the call stays queued and
//    an executor is woken as for any call. Why: a batched server answered
//    one client 4-8 % slower than the unbatched one (identity, p50
//    0.255-0.280 against 0.247-0.259 ms; README, policies pinned): the
//    thread hand-off.
//  * Executors are woken only for work: a new task, a stop, or a batch coming
//    back while tasks wait (an executor held back by the in-flight limit may
//    go). A batch that comes back to an empty queue wakes nobody.
//  * Latency bound for an admitted task: max_queue_delay plus the time until
//    an executor is free, plus the batch's compute time.
//
// Tuning: max_batch_size to the throughput knee of the device; allowed batch
// sizes to a few fixed shapes (MPS allocates anew for every new shape);
// max_queue_delay to a fraction of the latency budget.
//
// Ownership and thread-safety: Submit() is thread-safe. The batcher owns its
// executor threads; the destructor calls Shutdown(), which stops admitting,
// runs every admitted task (reason kDraining) and joins the threads. The
// processor is called without any batcher lock held.
#ifndef METALSERVE_SERVER_BATCHER_BATCHER_H_
#define METALSERVE_SERVER_BATCHER_BATCHER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/batcher/batch_queue.h"
#include "server/batcher/batch_task.h"
#include "common/clock.h"

namespace metalserve {

class Batcher {
 public:
  // Runs one batch; must answer every task in it exactly once.
  using ProcessFn = std::function<void(Batch batch)>;
  // Called by an executor with nothing to do: when it becomes idle and then
  // every `idle_tick` while it stays idle (the runtime's idle-time cache
  // hygiene hangs here). Never called with a lock held.
  using IdleFn = std::function<void()>;
  // Told the rows waiting in the queue after every change: admission, batch
  // formation, expiry, cancellation and drain (the queue-depth gauge hangs
  // here, so it never keeps a value the queue left behind). Calls are
  // serialised and the last one carries the current depth. Called without
  // the queue's lock, from Submit's caller or an executor; must be quick and
  // must not call back into the batcher.
  using DepthFn = std::function<void(int64_t queued_rows)>;
  // Whether the processor's device is free now, so that a call run on its
  // submitter waits for no other work (see inline_max_cost). Called without
  // the batcher's lock; must be quick. Null: never free (nothing runs on a
  // submitter).
  using DeviceIdleFn = std::function<bool()>;
  // Batches the executors must have measured before a call may run on its
  // submitter (its occupancy then comes from measurement, not the warm-up's
  // device time alone).
  static constexpr int64_t kSubmitterWarmBatches = 8;
  // A submitter that ran its own call takes calls from the queue after it
  // (follow-ons), one at a time while each stays cheap and the device idle:
  // the calls that arrived on gRPC's other threads meanwhile, which would
  // otherwise wake an executor (two thread switches each). It starts one
  // only while the time since its own call was admitted plus the next
  // call's estimated cost stays within kSubmitterHold x inline_max_cost
  // (500 us with the default bound): a bound on how long one gRPC thread
  // is held, in time, not in calls. (Four calls at most, before: identity
  // [1,4] at concurrency 8 then went to an executor for 17-20 % of its
  // calls; docs/performance.md.)
  static constexpr int kSubmitterHold = 5;
  // And never more than this many follow-ons: a backstop for a bound that
  // does not end (--inline_max_cost=inf) or a wall clock stepped back.
  static constexpr int kMaxFollowOns = 64;
  // A batched model's lone call runs on its submitter only while the next
  // call is expected no sooner than this many of its runs away (the arrival
  // estimate's gap against EstimatedCost(1)): at light load. Without it the
  // rule's own "close at once" let it run there under load too, and each
  // cheap inline run kept the next one cheap: identity at 64 and 256
  // clients fell to batches of 1.3-1.6 rows and 70-78 % of the throughput
  // (best rounds 30,394 / 30,700 req/s against 33,032 / 39,308).
  static constexpr int kLoneRowQuietRuns = 4;
  // ... and only while the recent batches held one row each (their running
  // mean, weight 1/8 for the newest, below this): under load arrivals come
  // in bursts, so the mean gap alone read the lull between two bursts as
  // light load, and at 256 clients 44 % of the batches (the first call
  // after each lull) ran on gRPC's thread. Light load is both: calls far
  // apart and nothing joining them.
  static constexpr double kLoneRowMaxRecentRows = 1.5;

  static absl::StatusOr<std::unique_ptr<Batcher>> Create(
      BatcherOptions options, Clock* clock, ProcessFn process,
      IdleFn on_idle = nullptr, absl::Duration idle_tick = absl::Seconds(1),
      DepthFn on_depth = nullptr, DeviceIdleFn device_idle = nullptr);
  ~Batcher();

  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Takes ownership of `*task` on success. On failure `*task` is left with
  // the caller, who answers it with the returned status. A task that may run
  // on its submitter may have been run and answered before Submit returns
  // (see inline_max_cost above).
  absl::Status Submit(std::unique_ptr<BatchTask>* task);
  // Tasks run on their submitter's thread so far.
  int64_t ran_on_submitters() const { return ran_on_submitters_.load(std::memory_order_relaxed); }

  // Stops admitting, drains every admitted task through the processor and
  // joins the executors. Idempotent.
  void Shutdown();

  // The adaptive policy's cost curve learns that a batch of `padded_rows`
  // occupied the device for `cost` (the processor measures it: the model's
  // run, not the requests' answering, which batching does not amortise).
  // Thread-safe; a no-op under the fixed policy.
  void ObserveBatchCost(int64_t padded_rows, absl::Duration cost) ABSL_LOCKS_EXCLUDED(mu_);

  // Rows waiting in the queue (not yet in a batch).
  int64_t queued_rows() const { return queued_rows_.load(std::memory_order_relaxed); }
  const BatcherOptions& options() const { return options_; }

 private:
  Batcher(BatcherOptions options, Clock* clock, ProcessFn process,
          IdleFn on_idle, absl::Duration idle_tick, DepthFn on_depth,
          DeviceIdleFn device_idle);
  void ExecutorLoop();
  // Whether a task just admitted (the queue's only one) may run on its
  // submitter now; see inline_max_cost.
  bool MayRunOnSubmitter() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the load is light enough for a batched model's lone call to run
  // on its submitter (kLoneRowQuietRuns, kLoneRowMaxRecentRows).
  bool QuietForALoneRow(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a submitter done with its call may take a queued one (above).
  bool MayFollowOn() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The measured cost of a one-row call is known and at most inline_max_cost.
  bool CheapEnoughToRunHere() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Polls and runs one batch on the calling (submitting) thread.
  void RunOnSubmitter(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs what a Poll at `now` returned: aborts the dead, hands the batch (if
  // any) to the processor with the cost curve's bookkeeping. Called with mu_
  // held; releases it while the processor runs; returns with it held. With
  // `wake_executors`, wakes waiting executors when the batch is back and
  // the queue is not empty.
  void RunPolled(BatchQueue::PollResult r, absl::Time now, bool wake_executors)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The adaptive policy's view of the executors: a batch of `padded_rows`
  // handed to the processor at `now`, and one handed over at `start` that
  // came back at `end` (its occupancy). BatchStarted returns the batch's
  // estimated cost, for BatchDone.
  absl::Duration BatchStarted(int64_t padded_rows, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BatchDone(int64_t padded_rows, absl::Duration cost, absl::Time start, absl::Time end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells on_depth_ the current depth. Call without mu_ held.
  void ReportDepth() ABSL_LOCKS_EXCLUDED(mu_, depth_mu_);

  const BatcherOptions options_;  // queue_ holds the same; this needs no lock
  Clock* const clock_;
  const ProcessFn process_;
  const IdleFn on_idle_;
  const absl::Duration idle_tick_;
  const DepthFn on_depth_;
  const DeviceIdleFn device_idle_;
  std::atomic<int64_t> ran_on_submitters_{0};
  // Batches the processor returned (their occupancy measured).
  int64_t batches_done_ ABSL_GUARDED_BY(mu_) = 0;
  // Running mean of the rows of the batches run (kLoneRowMaxRecentRows).
  double recent_batch_rows_ ABSL_GUARDED_BY(mu_) = 1.0;
  // recent_batch_rows_ < kLoneRowMaxRecentRows, read before the lock: under
  // load a batched model's Submit skips the device probe (the device
  // thread's mutex) for a call that could not run on its submitter anyway.
  std::atomic<bool> recent_batches_single_{true};
  // Serialises on_depth_ calls, each of which reads queued_rows_ under it:
  // whichever call comes last reports the latest depth.
  absl::Mutex depth_mu_;

  absl::Mutex mu_;
  BatchQueue queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Bumped on every admission or stop, so waiting executors re-poll.
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> queued_rows_{0};
  DeviceLoad device_load_ ABSL_GUARDED_BY(mu_);  // batches in the processor
  // Batches handed to the processor and not back yet (their rows are the
  // queue's rows in flight), against BatchQueue::ExecutorsInUse.
  int batches_in_processor_ ABSL_GUARDED_BY(mu_) = 0;
  // Submitters running calls (their own and follow-ons) now.
  int submitters_running_ ABSL_GUARDED_BY(mu_) = 0;

  std::vector<std::thread> executors_;
  absl::Mutex shutdown_mu_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_BATCHER_BATCHER_H_
