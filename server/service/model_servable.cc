#include "server/service/model_servable.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/service/batch_executor.h"

namespace metalserve {

ModelServable::ModelServable(std::shared_ptr<Runner> runner) : runner_(std::move(runner)) {}

absl::StatusOr<std::unique_ptr<ModelServable>> ModelServable::Create(
    std::shared_ptr<Runner> runner, const Options& options) {
  if (runner == nullptr) return absl::InvalidArgumentError("ModelServable: runner is null");
  Clock* clock = options.clock != nullptr ? options.clock : Clock::RealClock();
  std::unique_ptr<ModelServable> s(new ModelServable(std::move(runner)));
  Runner* r = s->runner_.get();
  Metrics* metrics = options.metrics;
  s->process_metrics_ = metrics;
  if (metrics != nullptr) {
    s->metrics_ = metrics->ForModel(r->info().name, r->info().version,
                                    options.batching.max_queue_size);
  }
  ModelMetrics* model_metrics = s->metrics_.get();
  if (model_metrics != nullptr) {
    for (const std::string& device : r->Devices()) model_metrics->AddDevice(device);
    // The device table, while this version is loaded.
    for (const DeviceChoiceInfo::Timing& t : r->info().device_choice.timings) {
      model_metrics->SetDeviceForward(t.device, t.batch_size, t.forward);
    }
  }
  BatcherOptions batching = options.batching;
  s->device_slots_ = options.device_concurrency;
  // A runner on several devices names them joined with '+': any CUDA one counts.
  if (options.cuda_slots > 0 && absl::StrContains(r->info().device, "cuda")) {
    batching.num_executors = s->device_slots_ = options.cuda_slots;
    LOG(INFO) << r->info().name << " v" << r->info().version << " on " << r->info().device
              << ": " << options.cuda_slots << " executors and device slots (--executors=0)";
  }
  // An accelerator's forward runs on its device thread while the receiving
  // thread waits; a hybrid runner with a CPU leg may compute a lone call on
  // that thread itself, so it keeps the smaller bound.
  const std::string& on = r->info().device;
  if (options.accelerator_inline_max_cost >= absl::ZeroDuration() &&
      (absl::StrContains(on, "cuda") || absl::StrContains(on, "mps"))) {
    const bool cpu_leg = absl::StrContains(on, "cpu");
    batching.inline_max_cost =
        cpu_leg ? std::min(batching.inline_max_cost, options.accelerator_inline_max_cost)
                : options.accelerator_inline_max_cost;
    // The receiving thread only waits through an accelerator's forward: the
    // calls that arrive meanwhile go to executors, which queue them on the
    // device thread behind it, not to that thread one after another. With
    // one executor, held while the inline call counts as in flight, they
    // would only wait longer: follow-ons stay.
    if (!cpu_leg && batching.num_executors > 1) {
      batching.inline_follow_ons = false;
    }
  }
  s->executor_ = std::make_unique<BatchExecutor>(r, batching, s->device_slots_, model_metrics,
                                                 clock);
  // The memory figures of each of the runner's devices (its idle loop and,
  // under sustained load, its batches report them).
  ModelServable* self = s.get();
  auto report_memory = [r, metrics, self, clock] {
    if (metrics == nullptr) return;
    const int64_t now = absl::ToUnixNanos(clock->TimeNow());
    int64_t due = self->next_memory_report_ns_.load(std::memory_order_relaxed);
    if (now < due || !self->next_memory_report_ns_.compare_exchange_strong(
                         due, now + absl::ToInt64Nanoseconds(kMemoryReportEvery))) {
      return;
    }
    const std::vector<std::string> devices = r->Devices();
    const std::vector<MemoryStats> memory = r->MemoryPerDevice();
    for (size_t i = 0; i < devices.size() && i < memory.size(); ++i) {
      const MemoryStats& m = memory[i];
      metrics->SetMemory({m.allocated_bytes, m.reserved_bytes, m.limit_bytes, m.resident_bytes,
                          devices[i]});
    }
  };
  // Batches per device: a runner on several devices reports each batch's
  // device; otherwise every batch is its one device's.
  bool runner_reports_devices = false;
  if (model_metrics != nullptr) {
    runner_reports_devices = r->set_on_device_batch(
        [model_metrics](const std::string& device, int64_t rows, absl::Duration took) {
          model_metrics->DeviceBatch(device, rows, took);
        });
  }
  const std::string device = r->info().device;
  // Each model run refines the adaptive policy's cost curve. Set before the
  // batcher's threads start; the servable owns both.
  s->executor_->set_on_cost([self, report_memory, model_metrics, runner_reports_devices,
                             device](int64_t rows, absl::Duration cost) {
    self->batcher_->ObserveBatchCost(rows, cost);
    if (model_metrics != nullptr && !runner_reports_devices) {
      model_metrics->DeviceBatch(device, rows, cost);
    }
    report_memory();  // when due
  });
  // The queue depth gauge follows every change of the queue: arrivals,
  // batches, expiries, cancellations and the drain.
  auto on_depth = [model_metrics](int64_t rows) {
    if (model_metrics != nullptr) model_metrics->SetQueueDepth(rows);
  };
  // Cache hygiene and the memory figures, while this model's queue is idle.
  auto on_idle = [r, report_memory] {
    r->BetweenBatches(/*idle=*/true);
    report_memory();
  };
  if (batching.batch_costs.empty()) {  // seed the cost curve from the warm-up
    for (const WarmupTiming& w : r->info().warmup_timings) {
      batching.batch_costs.push_back({w.batch_size, w.forward});
    }
  }
  BatchExecutor* executor = s->executor_.get();
  ASSIGN_OR_RETURN(s->batcher_,
                   Batcher::Create(std::move(batching), clock,
                                   [executor](Batch b) { executor->Process(std::move(b)); },
                                   on_idle, absl::Seconds(1), on_depth,
                                   [r] { return r->DeviceIdle(); }));
  return s;
}

ModelServable::~ModelServable() {
  Drain();
  batcher_.reset();  // no idle call or batch reports memory after this
  executor_.reset();
  // What this version reported of its device is stale once it is freed: the
  // series go after the runner (whose destructor gives its memory back to
  // the device, on the device thread) is released here, so that no report
  // from before the free can follow; models still on the device report
  // again from their idle loops or batches.
  const std::vector<std::string> devices = runner_->Devices();
  runner_->set_on_device_batch(nullptr);  // it records into metrics_, freed with this
  runner_.reset();
  if (process_metrics_ != nullptr) {
    for (const std::string& device : devices) process_metrics_->ForgetDeviceMemory(device);
  }
}

void ModelServable::Drain() {
  if (batcher_ != nullptr) batcher_->Shutdown();
}

}  // namespace metalserve
