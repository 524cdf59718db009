// Binds a model's signature to its TorchScript `forward`, and checks it
// against what a probe forward returns. Internal to the runtime target (it
// includes LibTorch); its users are torch_runner_load.cc (binding, checking)
// and forward_path.cc (outputs of every forward).
//
// Inputs are bound by NAME: forward's schema carries its argument names
// (`module.get_method("forward").function().getSchema()`, without `self`), so
// a signature may list inputs in any order. A one-input signature whose name
// differs from forward's argument is bound by position (the name is the
// API's, not the Python code's). Outputs: a tensor, a tuple or list of
// tensors (bound by position), or a dict of str -> tensor (bound by key: an
// output's name is its key).
//
// Every mismatch is INVALID_ARGUMENT naming the field, the declared and the
// actual value, e.g. "outputs[0].shape[1]: declared 10, model gives 3".
//
// Thread-safety: free functions; call them where the module's device work
// runs.
#ifndef METALSERVE_SERVER_RUNTIME_SIGNATURE_BINDING_H_
#define METALSERVE_SERVER_RUNTIME_SIGNATURE_BINDING_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/script.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace metalserve {

// forward's arguments after `self`.
struct ForwardArgs {
  std::vector<std::string> names;
  size_t required = 0;  // leading arguments without a default value
  std::string ToString() const;  // "(a, b)"
};
absl::StatusOr<ForwardArgs> ReadForwardArgs(const torch::jit::Module& module);

// Reorders `inputs` (as declared) into forward's argument order by name.
absl::Status BindInputsByName(const ForwardArgs& args, std::vector<TensorSpec>* inputs);

// The inputs of a model without a signature file: forward's argument names,
// each with its shape from `shapes` (dims after the batch one) and its dtype
// from `dtypes` (float32 when absent). The error for a missing shape says
// what to pass, naming `signature_path` and docs/signature.md.
absl::StatusOr<std::vector<TensorSpec>> InputsFromHints(
    const ForwardArgs& args, const std::map<std::string, std::vector<int64_t>>& shapes,
    const std::map<std::string, DType>& dtypes, const std::string& signature_path);

// The output tensors of a forward's result, in `outputs` order: positional
// for a tensor, tuple or list; by `outputs[i].name` for a dict.
absl::StatusOr<std::vector<at::Tensor>> OutputTensors(const c10::IValue& result,
                                                      const std::vector<TensorSpec>& outputs);

// Checks a probe forward's result (batch `batch`) against the declared
// outputs: count, names (dict keys), dtype, rank, batch and non-batch dims.
absl::Status CheckOutputs(const c10::IValue& result, const std::vector<TensorSpec>& outputs,
                          int64_t batch);

// The outputs a probe forward's result shows: names "output" (one tensor),
// "output0".. (tuple, list) or the dict's keys; shapes with -1 for the batch.
absl::StatusOr<std::vector<TensorSpec>> OutputsFromProbe(const c10::IValue& result,
                                                         int64_t batch);

// DType of a tensor's scalar type; kInvalid when the project has none.
DType FromScalarType(at::ScalarType t);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_SIGNATURE_BINDING_H_
