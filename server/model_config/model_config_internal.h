// Shared by model_config.cc and repository_config.cc: the JSON parse over
// metalserve.v1.ModelConfig and the signature taken from it. Not part of the
// target's public face (it includes generated protobuf headers).
#ifndef METALSERVE_SERVER_MODEL_CONFIG_MODEL_CONFIG_INTERNAL_H_
#define METALSERVE_SERVER_MODEL_CONFIG_MODEL_CONFIG_INTERNAL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "metalserve/v1/model_config.pb.h"
#include "server/runtime/model_signature.h"

namespace metalserve::internal {

// InvalidArgument "<prefix><what>".
absl::Status ConfigError(absl::string_view prefix, absl::string_view what);
// Protobuf's JSON parse, unknown keys refused; its message names the key.
absl::StatusOr<v1::ModelConfig> ParseConfigJson(absl::string_view json,
                                                absl::string_view prefix);
// name, version, inputs and outputs, each tensor checked.
absl::StatusOr<ModelSignature> ToSignature(const v1::ModelConfig& config,
                                           absl::string_view prefix);
// The JSON key of the first per-model setting `config` sets; "" when none.
std::string FirstSettingKey(const v1::ModelConfig& config);

}  // namespace metalserve::internal

#endif  // METALSERVE_SERVER_MODEL_CONFIG_MODEL_CONFIG_INTERNAL_H_
