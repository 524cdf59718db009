// The model signature sidecar (model.pt -> model.json) read and written with
// Protobuf's JSON mapping over metalserve.v1.ModelConfig
// (proto/metalserve/v1/model_config.proto). Format and every key:
// docs/signature.md. This target is the only one that turns sidecar JSON into
// a ModelSignature; the runtime never sees protobuf headers (a pip LibTorch
// ships its own), so main hands ModelConfigSignatureCodec() to it through
// RuntimeOptions::signature_codec.
//
// Thread-safety: free functions over values; no shared state.
#ifndef METALSERVE_SERVER_MODEL_CONFIG_MODEL_CONFIG_H_
#define METALSERVE_SERVER_MODEL_CONFIG_MODEL_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/runtime/model_signature.h"

namespace metalserve {

// InvalidArgument, naming the key, for malformed JSON, a key the format does
// not have, a value of the wrong type, a missing/empty inputs or outputs list,
// a tensor without a name or dtype, an unknown dtype, a shape whose first
// dimension is not -1, or a per-model setting (max_batch_size, ...,
// version_policy), which only a repository's config.json may carry
// (repository_config.h).
absl::StatusOr<ModelSignature> ParseModelSignature(absl::string_view json);
// NotFound when the file cannot be read; otherwise as ParseModelSignature,
// with the path in the message.
absl::StatusOr<ModelSignature> ReadModelSignature(const std::string& path);
// The signature as JSON that ParseModelSignature reads back (Protobuf's JSON
// printer, indented; an empty version is written as "1"). InvalidArgument
// only when a name is not valid UTF-8.
absl::StatusOr<std::string> SignatureToJson(const ModelSignature& sig);

// ReadModelSignature and SignatureToJson, for RuntimeOptions::signature_codec.
SignatureCodec ModelConfigSignatureCodec();

}  // namespace metalserve

#endif  // METALSERVE_SERVER_MODEL_CONFIG_MODEL_CONFIG_H_
