// The model's signature, read from the JSON sidecar that models/export.py
// writes beside each TorchScript file, or inferred by the runtime from the
// model's forward schema and a probe forward (then written beside the model).
// The JSON itself is read and written outside the runtime, by
// server/model_config (Protobuf's JSON mapping), and handed in through a
// SignatureCodec. Format (every key: docs/signature.md):
//   {"name": "resnet18", "version": "1",
//    "inputs":  [{"name": "input",  "dtype": "float32", "shape": [-1,3,224,224]}],
//    "outputs": [{"name": "logits", "dtype": "float32", "shape": [-1,1000]}]}
// The first dimension of every shape is the batch dimension (-1); another -1
// is a dimension the signature does not fix. The runtime checks the
// signature against the model at load (torch_runner.h).
//
// Thread-safety: free functions over values; no shared state.
#ifndef METALSERVE_SERVER_RUNTIME_MODEL_SIGNATURE_H_
#define METALSERVE_SERVER_RUNTIME_MODEL_SIGNATURE_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"

namespace metalserve {

struct ModelSignature {
  std::string name;     // "" when the sidecar has none
  std::string version;  // "" when the sidecar has none
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
};

// How the runtime reads a signature file and prints an inferred signature,
// without knowing the JSON library: main passes ModelConfigSignatureCodec()
// (server/model_config/model_config.h). Both functions must be set.
struct SignatureCodec {
  // NotFound when the file cannot be read; InvalidArgument naming the key for
  // anything the format does not accept.
  std::function<absl::StatusOr<ModelSignature>(const std::string& path)> read;
  // The signature as JSON that `read` reads back.
  std::function<absl::StatusOr<std::string>(const ModelSignature&)> to_json;
};

// "model.pt" -> "model.json"; appends ".json" when there is no extension.
std::string DefaultSignaturePath(absl::string_view model_path);

// Input shapes without the batch dimension, by input name, from a comma
// list where a "NAME=" starts each input: "image=3,224,224,mask=224,224".
// InvalidArgument names the item for a missing name, a dimension that is not
// a positive integer, or a name given twice.
absl::StatusOr<std::map<std::string, std::vector<int64_t>>> ParseInputShapes(
    absl::string_view list);
// Input dtypes by name from "image=float32,mask=uint8" (ParseDType names).
absl::StatusOr<std::map<std::string, DType>> ParseInputDtypes(absl::string_view list);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_MODEL_SIGNATURE_H_
