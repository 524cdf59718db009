// BatchExecutor: runs a batch formed by the Batcher on the Runner.
//
// For each batch it hands the runner the tasks' rows as pieces (with zero
// rows up to the padded size; the runner copies them once into device-ready
// memory), runs the model, and slices every output back into each task's
// own rows. Failure handling:
//  * RESOURCE_EXHAUSTED (device out of memory): the runtime has emptied its
//    cache; the batch is retried split in halves, recursively. A single
//    request that still does not fit alone gets RESOURCE_EXHAUSTED.
//  * INTERNAL (the model threw): with several requests, the batch is re-run
//    in halves so the request that makes the model throw fails alone and
//    the others succeed.
//  * Anything else fails every task of the batch with that status.
// The retries are logged at most once a second (see retry_log_).
//
// Device concurrency: at most `device_concurrency` batches are on the runner
// at once, so that with several executor threads the next batch is assembled
// while the current one computes (pipelining) without oversubscribing the
// device. A batch holds its slot through its retries.
//
// Late cancellation: a batch can wait for a device slot for a whole compute
// time. Once it has its slot, tasks whose caller has gone (CANCELLED) or
// whose deadline has passed (DEADLINE_EXCEEDED) are answered without running,
// and the rest run as a smaller batch.
//
// Thread-safety: Process() is thread-safe. Does not own the runner or the
// observer.
#ifndef METALSERVE_SERVER_SERVICE_BATCH_EXECUTOR_H_
#define METALSERVE_SERVER_SERVICE_BATCH_EXECUTOR_H_

#include <functional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/batcher/batch_queue.h"
#include "server/batcher/batch_task.h"
#include "common/clock.h"
#include "server/metrics/metrics.h"
#include "server/runtime/runner.h"
#include "server/service/infer_task.h"
#include "server/service/log_limiter.h"

namespace metalserve {

class BatchExecutor {
 public:
  // `metrics` (the model version's series) may be null.
  BatchExecutor(Runner* runner, const BatcherOptions& batching,
                int device_concurrency, ModelMetrics* metrics, Clock* clock);

  // Told, after every successful model run, its padded rows and how long it
  // occupied the device: the time from its start, or from the end of the
  // previous run if that was later (the device runs one batch at a time).
  // The batcher's adaptive cost curve hangs here. Set before the first batch.
  using CostFn = std::function<void(int64_t padded_rows, absl::Duration cost)>;
  void set_on_cost(CostFn on_cost) { on_cost_ = std::move(on_cost); }

  // Runs `batch`; every task in it is an InferTask and is answered.
  void Process(Batch batch);

  // The batch as row pieces per input: every task's rows in order, padded
  // with zero rows up to `padded_rows`. No bytes are copied.
  static std::vector<BatchedInput> Pieces(const std::vector<InferTask*>& tasks,
                                          int64_t padded_rows);

 private:
  // Runs `tasks` as one batch and answers each; on OOM or a model error with
  // several tasks, runs the halves instead.
  void RunGroup(const std::vector<InferTask*>& tasks);
  // Answers the tasks that must not run any more; returns the others.
  std::vector<InferTask*> DropDead(const std::vector<InferTask*>& tasks);
  void AcquireDeviceSlot();
  void ReleaseDeviceSlot();

  Runner* const runner_;
  const BatcherOptions batching_;
  ModelMetrics* const metrics_;
  Clock* const clock_;

  // The device time of a run that ended at `end`, having started at `start`.
  absl::Duration DeviceTime(absl::Time start, absl::Time end) ABSL_LOCKS_EXCLUDED(device_mu_);

  CostFn on_cost_;
  absl::Mutex device_mu_;
  int device_slots_ ABSL_GUARDED_BY(device_mu_);
  absl::Time last_run_end_ ABSL_GUARDED_BY(device_mu_) = absl::InfinitePast();
  // One "retrying in halves" WARNING a second at most: a poisoned stream of
  // requests logged one line per half (12,336 lines in 15 s, issue 17).
  LogLimiter retry_log_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_BATCH_EXECUTOR_H_
