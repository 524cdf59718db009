#include "server/service/null_runner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace metalserve {
namespace {

absl::Status CheckSpec(const TensorSpec& spec, absl::string_view field, bool output) {
  if (spec.dtype == DType::kInvalid) {
    return absl::InvalidArgumentError(
        absl::StrCat("null runner: ", field, " '", spec.name, "' has no dtype"));
  }
  if (spec.shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "null runner: ", field, " '", spec.name, "' has shape [] (no batch dimension)"));
  }
  for (size_t d = 1; output && d < spec.shape.size(); ++d) {
    if (spec.shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "null runner: ", field, " '", spec.name, "' has shape ",
          ShapeToString(spec.shape), "; every dimension after the batch one must be fixed"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NullRunner>> NullRunner::Create(ModelSignature signature) {
  return Create(std::move(signature), Options{});
}

NullRunner::NullRunner(ModelInfo info, Options options)
    : info_(std::move(info)),
      device_time_(options.device_time),
      device_(options.device_time > absl::ZeroDuration()
                  ? DeviceThread::Create(kSimulatedDevice,
                                         DeviceThread::ForDevice(kSimulatedDevice,
                                                                 FairQueue::Order::kFair,
                                                                 options.spin))
                  : nullptr) {}

absl::Status NullRunner::Device() const {
  if (device_ == nullptr) return absl::OkStatus();
  const absl::Duration d = device_time_;
  return device_->RunSync(absl::StrCat(info_.name, ":", info_.version),
                          [d] { absl::SleepFor(d); });
}

absl::StatusOr<std::unique_ptr<NullRunner>> NullRunner::Create(ModelSignature signature,
                                                               Options options) {
  if (signature.inputs.empty() || signature.outputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "null runner: the signature needs at least one input and one output; it has ",
        signature.inputs.size(), " and ", signature.outputs.size()));
  }
  for (const TensorSpec& s : signature.inputs) RETURN_IF_ERROR(CheckSpec(s, "input", false));
  for (const TensorSpec& s : signature.outputs) RETURN_IF_ERROR(CheckSpec(s, "output", true));
  ModelInfo info;
  info.name = signature.name.empty() ? "null" : signature.name;
  info.version = signature.version.empty() ? "1" : signature.version;
  info.device = options.device_time > absl::ZeroDuration() ? kSimulatedDevice : "none";
  info.torch_version = "none (null runner)";
  info.precision = "none";
  info.optimization = "none";
  info.optimization_reason = "null runner: no model work";
  info.inputs = std::move(signature.inputs);
  info.outputs = std::move(signature.outputs);
  for (TensorSpec& s : info.inputs) s.shape[0] = -1;
  for (TensorSpec& s : info.outputs) s.shape[0] = -1;
  return std::unique_ptr<NullRunner>(new NullRunner(std::move(info), options));
}

absl::StatusOr<std::vector<Tensor>> NullRunner::Zeros(int64_t rows) const {
  std::vector<Tensor> out;
  out.reserve(info_.outputs.size());
  for (const TensorSpec& spec : info_.outputs) out.push_back(ZerosOf(spec, rows));
  return out;
}

absl::StatusOr<std::vector<Tensor>> NullRunner::Run(const std::vector<Tensor>& inputs) {
  if (inputs.empty() || inputs[0].shape.empty()) {
    return absl::InvalidArgumentError("null runner: a batch needs its inputs");
  }
  RETURN_IF_ERROR(Device());
  return Zeros(inputs[0].shape[0]);
}

absl::StatusOr<std::vector<Tensor>> NullRunner::RunBatch(
    const std::vector<BatchedInput>& inputs) {
  if (inputs.empty() || inputs[0].shape.empty()) {
    return absl::InvalidArgumentError("null runner: a batch needs its inputs");
  }
  RETURN_IF_ERROR(Device());
  return Zeros(inputs[0].shape[0]);
}

}  // namespace metalserve
