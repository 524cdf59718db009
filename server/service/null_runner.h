// NullRunner: a Runner that does no model work, for measuring the transport
// floor (docs/performance.md). It answers every batch with zero-filled
// outputs of the shapes and dtypes its signature declares, without reading
// the inputs, so a benchmark against it measures gRPC, the service (parse,
// validate, queue, batch formation, split, serialise) and nothing of a
// model. Selected by `metalserve --model=null:<signature.json>`; never the
// default.
//
// It does not assemble the batch (RunBatch ignores the row pieces), so batch
// assembly and the device copy are absent from its figures by design: the
// difference between a real model's per-request CPU time and this runner's
// is the runtime's share.
//
// A simulated accelerator (Options::device_time > 0, `metalserve
// --null_device_time`): every batch also waits that long, sleeping, on a
// device thread of its own named "simulated-cuda" (so the service treats the
// model as on CUDA: executors, device slots, --accelerator_inline_max_cost,
// --accelerator_spin), while the caller waits for it: the hand-offs and the
// scheduling of a GPU model without a GPU, for benchmarks of the policies on
// a CPU-only host. Not a model of a GPU's timing beyond that wait.
//
// Thread-safety: immutable after Create(); Run/RunBatch from any thread.
#ifndef METALSERVE_SERVER_SERVICE_NULL_RUNNER_H_
#define METALSERVE_SERVER_SERVICE_NULL_RUNNER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/runtime/device_thread.h"
#include "server/runtime/model_signature.h"
#include "server/runtime/runner.h"

namespace metalserve {

// The prefix of --model that selects a NullRunner: "null:<signature.json>".
inline constexpr absl::string_view kNullModelPrefix = "null:";

class NullRunner final : public Runner {
 public:
  // INVALID_ARGUMENT, naming the tensor and its shape, when the signature
  // has no inputs or outputs, a dtype that is not set, a shape without the
  // batch dimension, or an output dimension after the batch one that is not
  // fixed (the runner could not know how many zeros to send). The name
  // defaults to "null", the version to "1".
  struct Options {
    // > 0: each batch waits this long on a simulated accelerator (above).
    absl::Duration device_time = absl::ZeroDuration();
    // The simulated device thread's polling (DeviceThread::Options::spin).
    absl::Duration spin = absl::ZeroDuration();
  };
  static absl::StatusOr<std::unique_ptr<NullRunner>> Create(ModelSignature signature);
  static absl::StatusOr<std::unique_ptr<NullRunner>> Create(ModelSignature signature,
                                                            Options options);
  // The name of the simulated accelerator.
  static constexpr char kSimulatedDevice[] = "simulated-cuda";

  const ModelInfo& info() const override { return info_; }
  // Zero-filled outputs with inputs[0].shape[0] rows.
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& inputs) override;
  // Zero-filled outputs with inputs[0].shape[0] (padded) rows; the pieces
  // are never read or copied.
  absl::StatusOr<std::vector<Tensor>> RunBatch(
      const std::vector<BatchedInput>& inputs) override;
  MemoryStats Memory() override { return MemoryStats{}; }
  void BetweenBatches(bool /*idle*/) override {}
  // No device: always; a simulated one: while its thread is idle.
  bool DeviceIdle() const override { return device_ == nullptr || device_->Idle(); }

 private:
  NullRunner(ModelInfo info, Options options);
  absl::StatusOr<std::vector<Tensor>> Zeros(int64_t rows) const;
  // Waits device_time on the simulated device's thread, when there is one.
  absl::Status Device() const;

  const ModelInfo info_;
  const absl::Duration device_time_;
  const std::shared_ptr<DeviceThread> device_;  // null without a simulated device
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_NULL_RUNNER_H_
