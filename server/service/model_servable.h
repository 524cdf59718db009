// ModelServable: one loaded version of one model as the server serves it:
// the runner (the model on its device), the batch queue in front of it, the
// executor that runs its batches and the KServe statistics of its requests.
// The model manager (server/repository/model_manager.h) owns servables and
// hands them out as ServableHandles; every request takes one when it is
// admitted (the services look it up through a ModelLookup, model_lookup.h)
// and its task keeps it until the task is destroyed after its Finish/Abort,
// so nothing a queued or running request uses is freed under it.
//
// Lifetime: servable -> batcher -> queued task -> handle -> servable is a
// cycle that the queue's draining breaks: an unloaded version stops being
// handed out, its queued tasks finish on it, and the last one's handle
// release hands the servable to the manager's release thread, which
// destroys it. Server shutdown calls Drain() on every servable still served.
//
// Thread-safety: thread-safe (the batcher and statistics are). Drain() may be
// called from any thread but an executor's of this servable.
// Destruction: Drain() (answers what is still queued, joins the executors),
// then frees the executor and the runner (a torch runner releases the model
// on its device thread). Never destroy it on one of its executor threads:
// the manager's release thread does it.
#ifndef METALSERVE_SERVER_SERVICE_MODEL_SERVABLE_H_
#define METALSERVE_SERVER_SERVICE_MODEL_SERVABLE_H_

#include <functional>
#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/batcher/batcher.h"
#include "server/metrics/metrics.h"
#include "server/repository/servable.h"
#include "server/runtime/runner.h"
#include "server/service/kserve_statistics.h"

namespace metalserve {

class BatchExecutor;

class ModelServable final : public Servable {
 public:
  struct Options {
    // The batcher of this version (flags with the model's settings applied);
    // its batch_costs, when empty, are seeded from the runner's warm-up.
    BatcherOptions batching;
    // Batches handed to the runner at once (ServerOptions::device_concurrency).
    int device_concurrency = 1;
    // > 0: on a runner with a CUDA device (alone or among a hybrid runner's
    // devices), batching.num_executors and
    // device_concurrency both become this (metalserve's --executors=0, the
    // slot count following the device; see ServerOptions::cuda_slots).
    // 0: the two as given on every device.
    int cuda_slots = 0;
    // >= 0: on a runner with an accelerator device (CUDA or MPS),
    // batching.inline_max_cost becomes this: its forward runs on the
    // device's thread while the thread that received the call only waits,
    // so a call as long as a forward may skip the hand-off to an executor
    // (ServerOptions::accelerator_inline_max_cost). A hybrid runner with a
    // CPU leg (which may compute a lone call on that thread) gets the
    // smaller of the two. Without a CPU leg and with several executors, a
    // call run inline there takes no follow-ons
    // (BatcherOptions::inline_follow_ons). < 0: batching.inline_max_cost on
    // every device.
    absl::Duration accelerator_inline_max_cost = absl::Seconds(-1);
    // May be null. Not owned; must outlive the servable. The servable's
    // series (Metrics::ForModel) are created here, labelled with the
    // runner's model name and version, and removed when it is destroyed.
    Metrics* metrics = nullptr;
    // Null: the real clock. Not owned.
    Clock* clock = nullptr;
  };

  // InvalidArgument for a null runner or invalid batching options. The
  // runner is shared so that InferenceServer's one-runner Start can hand in
  // a runner it does not own (a no-op deleter).
  static absl::StatusOr<std::unique_ptr<ModelServable>> Create(std::shared_ptr<Runner> runner,
                                                               const Options& options);
  ~ModelServable() override;
  ModelServable(const ModelServable&) = delete;
  ModelServable& operator=(const ModelServable&) = delete;

  const ModelInfo& info() const { return runner_->info(); }
  // Batches handed to the runner at once, as resolved for its device.
  int device_slots() const { return device_slots_; }
  Batcher& batcher() { return *batcher_; }
  const Batcher& batcher() const { return *batcher_; }
  KServeStatistics& kserve_statistics() { return stats_; }
  Runner& runner() { return *runner_; }
  // This version's series (metrics.h's ModelMetrics): requests that found
  // this version record their end here. Null without metrics.
  ModelMetrics* metrics() const { return metrics_.get(); }

  // Stops admitting (Submit answers UNAVAILABLE), runs every queued request
  // and joins the executors. Idempotent.
  void Drain();

 private:
  explicit ModelServable(std::shared_ptr<Runner> runner);

  // Declared first, destroyed last: the executor and batcher record into it
  // until they are gone; its destruction removes the version's series.
  std::unique_ptr<ModelMetrics> metrics_;
  // The process's metrics (not owned; null without): the device's memory
  // series are dropped when this version goes (Metrics::ForgetDeviceMemory).
  Metrics* process_metrics_ = nullptr;
  // The memory figures are reported at most once per kMemoryReportEvery
  // (nanoseconds since the epoch of the next one due), by whichever comes
  // first: a batch (under sustained load the queue is never empty and the
  // idle loop never runs) or the idle loop (which, at light load, runs after
  // every batch: reading /proc/self/statm each time cost a file open per
  // request).
  static constexpr absl::Duration kMemoryReportEvery = absl::Seconds(1);
  std::atomic<int64_t> next_memory_report_ns_{0};
  std::shared_ptr<Runner> runner_;
  KServeStatistics stats_;
  int device_slots_ = 1;
  std::unique_ptr<BatchExecutor> executor_;  // uses runner_
  std::unique_ptr<Batcher> batcher_;         // feeds executor_; destroyed first
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_MODEL_SERVABLE_H_
