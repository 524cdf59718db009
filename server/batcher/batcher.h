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

  static absl::StatusOr<std::unique_ptr<Batcher>> Create(
      BatcherOptions options, Clock* clock, ProcessFn process,
      IdleFn on_idle = nullptr, absl::Duration idle_tick = absl::Seconds(1),
      DepthFn on_depth = nullptr);
  ~Batcher();

  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Takes ownership of `*task` on success. On failure `*task` is left with
  // the caller, who answers it with the returned status.
  absl::Status Submit(std::unique_ptr<BatchTask>* task);

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
          IdleFn on_idle, absl::Duration idle_tick, DepthFn on_depth);
  void ExecutorLoop();
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

  std::vector<std::thread> executors_;
  absl::Mutex shutdown_mu_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_BATCHER_BATCHER_H_
