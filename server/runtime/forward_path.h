// Internal to the runtime target (includes LibTorch): THE forward path, the
// one way a model is run on its device. Serving (Run, RunBatch), warm-up,
// graph verification and the signature probe all call it, so what was
// verified and warmed up is exactly what serves:
//
//   host tensors -> device (CUDA: pinned host memory, non-blocking copy on
//   the thread's pooled stream) -> floating inputs cast to the compute
//   precision -> 4-D inputs in channels-last when asked -> forward under
//   InferenceMode -> outputs bound to the signature (signature_binding.h) ->
//   cast to the signature's dtype and made contiguous on the device (on MPS
//   float64 and bfloat16 on the host), copied to the host, contiguous.
//
// Every call is reported to RuntimeOptions::forward_observer with its
// purpose, before the forward.
//
// Ownership: shares the TorchDevice; does not own modules (callers pass
// them). Thread-safety: const methods only; call them on the device thread.
// Destruction: nothing to release beyond its share of the device.
#ifndef METALSERVE_SERVER_RUNTIME_FORWARD_PATH_H_
#define METALSERVE_SERVER_RUNTIME_FORWARD_PATH_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/script.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/runtime/torch_device.h"
#include "server/runtime/torch_runner.h"

namespace metalserve::torch_internal {

absl::StatusOr<at::ScalarType> ToScalarType(DType d);
// "fp32", "fp16" or "bf16"; INVALID_ARGUMENT naming anything else.
absl::StatusOr<at::ScalarType> ParsePrecision(const std::string& p);
// The model's own words: TorchScript wraps a raised exception in a traceback
// whose last line is "builtins.RuntimeError: <message>".
std::string ModelMessage(const std::string& what);

// A model's entry point other than a TorchScript module's forward (an
// AOTInductor package, aoti_package.h): device tensors in, the model's result
// out (a tensor, or a tuple of them in the signature's output order).
using TensorForward = std::function<c10::IValue(std::vector<c10::IValue>)>;

class ForwardPath {
 public:
  ForwardPath(std::shared_ptr<TorchDevice> device, bool channels_last,
              ForwardObserver observer)
      : device_(std::move(device)),
        channels_last_(channels_last),
        observer_(std::move(observer)) {}

  // The bound signature: inputs (with their torch dtypes) before the probe
  // forward, outputs after it.
  void SetInputs(std::vector<TensorSpec> inputs, std::vector<at::ScalarType> types) {
    inputs_ = std::move(inputs);
    input_types_ = std::move(types);
  }
  void SetOutputs(std::vector<TensorSpec> outputs) { outputs_ = std::move(outputs); }
  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<at::ScalarType>& input_types() const { return input_types_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }
  const TorchDevice& device() const { return *device_; }

  // Inputs to the device and forward; the model's result as it gives it.
  // RESOURCE_EXHAUSTED for a device out-of-memory ("device D out of memory:
  // ..."); INTERNAL carrying the model's message for anything it throws.
  absl::StatusOr<c10::IValue> ForwardRaw(torch::jit::Module& module,
                                         const std::vector<at::Tensor>& host,
                                         at::ScalarType compute,
                                         ForwardPurpose purpose) const;
  // ForwardRaw, then the outputs bound to the signature and on the host in
  // its dtypes. INTERNAL when the result does not match the signature.
  absl::StatusOr<std::vector<at::Tensor>> Forward(torch::jit::Module& module,
                                                  const std::vector<at::Tensor>& host,
                                                  at::ScalarType compute,
                                                  ForwardPurpose purpose) const;
  // The same path around any entry point (a compiled package).
  absl::StatusOr<std::vector<at::Tensor>> Forward(const TensorForward& forward,
                                                  const std::vector<at::Tensor>& host,
                                                  at::ScalarType compute,
                                                  ForwardPurpose purpose) const;

 private:
  std::vector<c10::IValue> ToDevice(const std::vector<at::Tensor>& host,
                                    at::ScalarType compute) const;
  absl::StatusOr<std::vector<at::Tensor>> FromDevice(const c10::IValue& out) const;

  const std::shared_ptr<TorchDevice> device_;
  const bool channels_last_;
  const ForwardObserver observer_;
  std::vector<TensorSpec> inputs_;
  std::vector<at::ScalarType> input_types_;
  std::vector<TensorSpec> outputs_;
};

}  // namespace metalserve::torch_internal

#endif  // METALSERVE_SERVER_RUNTIME_FORWARD_PATH_H_
