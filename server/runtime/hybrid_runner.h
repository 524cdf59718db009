// Hybrid serving (--devices=cuda,cpu or mps,cpu): one model resident on
// several devices, each batch sent to the device expected to finish it first.
// Torch-free (its own target, metalserve::hybrid_runner): it composes Runners
// made by the caller, one per device, each with its own device thread.
//
// The rule (DevicePicker, pure and clock-free):
//
//   finish(d, b) = outstanding(d) + cost(d, b)
//   chosen       = argmin_d finish(d, b)   (ties: the earlier device listed)
//
// cost(d, b) is the device's forward time for a batch of b rows: measured at
// warm-up for each warm-up batch size (ModelInfo::warmup_timings, the least
// of the timed forwards at each size, on the CPU at the intra-op thread
// count chosen there; host copies included), linear between measured
// sizes, proportional above the largest, the smallest size's below it; every
// batch that runs refines the entry of its size (new = 0.8 old + 0.2
// observed), so a device that slows down under load (the CPU sharing cores
// with the server's threads) is seen as slower. outstanding(d) is the sum of
// the predicted costs of the batches handed to d and not yet finished: a
// device runs its batches one after another on its one thread, so that is
// when it could start a new one. It overestimates a batch that is part-way
// through (no clock: a running batch counts in full), which errs towards the
// other device.
//
// Re-checking a passed-over device: a device's figure for a size is refined
// only by batches it runs, so one that starts a little slower on paper (its
// warm-up forward included first-run work) would never be chosen for that
// size and never corrected. When a device has been passed over for
// kRecheckEvery batches of a measured size in a row, is idle, and its
// predicted cost is at most kRecheckMaxRatio times the chosen device's
// finish, it gets that batch: at most one batch in kRecheckEvery of a size
// pays up to kRecheckMaxRatio its best time, and a stale figure is
// corrected (kRefine of the way per observation). A device predicted far
// slower (the CPU for a large batch) is never re-checked.
//
// Why: the write-up this product grew out of found the CPU faster than MPS
// for small models and batch 1, and the accelerator far faster for large
// batches. With both resident, a lone request goes to whichever is faster
// at batch 1, and under load the accelerator takes the large batches while a
// batch that would wait behind them goes to the CPU when the CPU would still
// finish it first. Each batch needs an executor: give the batcher at least
// as many executors (--executors, --device_concurrency) as devices.
//
// Agreement: HybridRunner::Create runs every runner on the same seeded
// inputs at each warm-up size and refuses (FAILED_PRECONDITION, naming both
// devices, the batch size and the deviation) when a floating output differs
// by more than `tolerance` of the first device's output scale, or any other
// output differs at all.
//
// Thread-safety: DevicePicker is not thread-safe (HybridRunner locks it);
// HybridRunner's methods are thread-safe as Runner's are; Run/RunBatch may
// be called from several executor threads at once, and then run at once on
// different devices. Ownership: HybridRunner owns its runners.
#ifndef METALSERVE_SERVER_RUNTIME_HYBRID_RUNNER_H_
#define METALSERVE_SERVER_RUNTIME_HYBRID_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/runtime/runner.h"

namespace metalserve {

class DevicePicker {
 public:
  struct Device {
    std::string name;
    std::vector<WarmupTiming> costs;  // forward per batch size; not empty
  };
  // InvalidArgument when there are fewer than two devices or one has no
  // costs.
  static absl::StatusOr<DevicePicker> Create(std::vector<Device> devices);

  static constexpr int64_t kRecheckEvery = 50;
  static constexpr double kRecheckMaxRatio = 2.0;

  // The device index for a batch of `rows` rows (the rule above, re-checks
  // included).
  int Pick(int64_t rows) const;
  // A batch of `rows` handed to device `d`: its predicted cost joins
  // outstanding(d). Returns that prediction, to give back to Finished.
  absl::Duration Started(int d, int64_t rows);
  // That batch ended after `took` (its forward; an error's time too).
  void Finished(int d, int64_t rows, absl::Duration predicted, absl::Duration took);

  absl::Duration Cost(int d, int64_t rows) const;
  absl::Duration Outstanding(int d) const { return outstanding_[d]; }
  int size() const { return static_cast<int>(devices_.size()); }
  const std::string& name(int d) const { return devices_[d].name; }

 private:
  explicit DevicePicker(std::vector<Device> devices);
  std::vector<Device> devices_;            // costs sorted by batch size
  std::vector<absl::Duration> outstanding_;
  // Per device, per entry of costs: batches of exactly that size started on
  // another device since this one last ran one.
  std::vector<std::vector<int64_t>> passed_over_;
};

class HybridRunner : public Runner {
 public:
  // Makes the runner of one device (e.g. CreateTorchRunner with
  // RuntimeOptions::device set).
  using Maker = std::function<absl::StatusOr<std::unique_ptr<Runner>>(const std::string& device)>;

  // Loads the model on each of `devices` (two or more, distinct), checks
  // that they agree (above) at `batch_sizes`, and builds the picker from
  // their warm-up timings. Errors: the first failing load's, naming its
  // device; FAILED_PRECONDITION for disagreeing outputs or signatures.
  static absl::StatusOr<std::unique_ptr<HybridRunner>> Create(
      const std::vector<std::string>& devices, const Maker& make,
      const std::vector<int64_t>& batch_sizes, double tolerance, Clock* clock);

  // Logs the batches each device ran.
  ~HybridRunner() override;

  const ModelInfo& info() const override { return info_; }
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& inputs) override;
  absl::StatusOr<std::vector<Tensor>> RunBatch(const std::vector<BatchedInput>& inputs) override;
  // The chosen device's runner's stages.
  absl::StatusOr<std::vector<Tensor>> RunBatchStaged(const std::vector<BatchedInput>& inputs,
                                                     ComputeStages* stages) override;
  // The first device's figures (the accelerator's, listed first);
  // MemoryPerDevice gives each device's.
  MemoryStats Memory() override { return runners_.front()->Memory(); }
  // Each runner's device, in the order listed.
  std::vector<std::string> Devices() const override;
  std::vector<MemoryStats> MemoryPerDevice() override;
  // Reports each successful batch with the device the picker chose.
  bool set_on_device_batch(DeviceBatchFn fn) override;
  // Every device's cache policy.
  void BetweenBatches(bool idle) override;

  // Batches each device has run (for logs and tests).
  std::vector<int64_t> BatchesPerDevice() const;

 private:
  HybridRunner(std::vector<std::unique_ptr<Runner>> runners, DevicePicker picker, Clock* clock);
  template <typename F>
  auto OnChosen(int64_t rows, F&& run) -> decltype(run(static_cast<Runner*>(nullptr)));

  std::vector<std::unique_ptr<Runner>> runners_;
  ModelInfo info_;
  Clock* clock_;
  // Set before the first batch and cleared after the last (its owner joins
  // the executors first: ModelServable's destructor); read only between.
  DeviceBatchFn on_device_batch_;
  mutable absl::Mutex mu_;
  DevicePicker picker_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> batches_ ABSL_GUARDED_BY(mu_);
  // Per device, when its last batch ended (busy time without overlap).
  std::vector<absl::Time> last_end_ ABSL_GUARDED_BY(mu_);
};

// Compares two runs' outputs: OK, or a message naming the first output that
// differs (floating: relative to `want`'s largest magnitude, beyond
// `tolerance`; others: any byte).
absl::Status CompareOutputs(const std::vector<Tensor>& want, const std::vector<Tensor>& got,
                            double tolerance);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_HYBRID_RUNNER_H_
