// The model's signature, read from the JSON sidecar that models/export.py
// writes beside each TorchScript file (TorchScript does not carry one
// reliably). Format:
//   {"name": "resnet18", "version": "1",
//    "inputs":  [{"name": "input",  "dtype": "float32", "shape": [-1,3,224,224]}],
//    "outputs": [{"name": "logits", "dtype": "float32", "shape": [-1,1000]}]}
// The first dimension of every shape is the batch dimension (-1).
//
// Thread-safety: free functions over values; no shared state.
#ifndef METALSERVE_SERVER_RUNTIME_MODEL_SIGNATURE_H_
#define METALSERVE_SERVER_RUNTIME_MODEL_SIGNATURE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/common/tensor.h"

namespace metalserve {

struct ModelSignature {
  std::string name;     // "" when the sidecar has none
  std::string version;  // "" when the sidecar has none
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
};

// InvalidArgument for malformed JSON, a missing/empty inputs or outputs list,
// an unknown dtype, or a shape whose first dimension is not -1.
absl::StatusOr<ModelSignature> ParseModelSignature(absl::string_view json);
// NotFound when the file cannot be read; otherwise as ParseModelSignature,
// with the path in the message.
absl::StatusOr<ModelSignature> ReadModelSignature(const std::string& path);
// "model.pt" -> "model.json"; appends ".json" when there is no extension.
std::string DefaultSignaturePath(absl::string_view model_path);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_MODEL_SIGNATURE_H_
