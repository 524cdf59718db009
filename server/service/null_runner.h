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
// Thread-safety: immutable after Create(); Run/RunBatch from any thread.
#ifndef METALSERVE_SERVER_SERVICE_NULL_RUNNER_H_
#define METALSERVE_SERVER_SERVICE_NULL_RUNNER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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
  static absl::StatusOr<std::unique_ptr<NullRunner>> Create(ModelSignature signature);

  const ModelInfo& info() const override { return info_; }
  // Zero-filled outputs with inputs[0].shape[0] rows.
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& inputs) override;
  // Zero-filled outputs with inputs[0].shape[0] (padded) rows; the pieces
  // are never read or copied.
  absl::StatusOr<std::vector<Tensor>> RunBatch(
      const std::vector<BatchedInput>& inputs) override;
  MemoryStats Memory() override { return MemoryStats{}; }
  void BetweenBatches(bool /*idle*/) override {}
  bool DeviceIdle() const override { return true; }  // no device

 private:
  explicit NullRunner(ModelInfo info) : info_(std::move(info)) {}
  absl::StatusOr<std::vector<Tensor>> Zeros(int64_t rows) const;

  const ModelInfo info_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_NULL_RUNNER_H_
