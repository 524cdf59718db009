#include "server/model_config/model_config.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "metalserve/v1/model_config.pb.h"
#include "common/status_macros.h"
#include "server/model_config/model_config_internal.h"

namespace metalserve {
namespace {

// Every name ParseDType (common/tensor.cc) accepts; docs/signature.md
// lists the same.
constexpr const char* kAcceptedDtypes =
    "float32 (fp32, float), float16 (fp16, half), bfloat16 (bf16), "
    "float64 (fp64, double), int64, int32, uint8, int8, bool";

absl::StatusOr<TensorSpec> ToSpec(const v1::TensorConfig& t, const std::string& field,
                                  absl::string_view prefix) {
  auto SignatureError = [prefix](absl::string_view what) {
    return internal::ConfigError(prefix, what);
  };
  if (t.name().empty() || t.dtype().empty()) {
    return SignatureError(absl::StrCat(
        field, " needs \"name\", \"dtype\" and \"shape\" (a list); \"name\" and "
        "\"dtype\" must not be empty"));
  }
  TensorSpec spec;
  spec.name = t.name();
  absl::StatusOr<DType> parsed = ParseDType(t.dtype());
  if (!parsed.ok()) {
    return SignatureError(absl::StrCat(field, ".dtype: ", parsed.status().message(),
                                       "; accepted: ", kAcceptedDtypes));
  }
  spec.dtype = *parsed;
  spec.shape.assign(t.shape().begin(), t.shape().end());
  if (spec.shape.empty() || spec.shape[0] != -1) {
    return SignatureError(absl::StrCat(field, ".shape ", ShapeToString(spec.shape), " ('",
                                       spec.name, "') must start with the batch dimension -1"));
  }
  return spec;
}

absl::StatusOr<std::vector<TensorSpec>> ToSpecs(
    const google::protobuf::RepeatedPtrField<v1::TensorConfig>& list, const std::string& key,
    absl::string_view prefix) {
  if (list.empty()) {
    return internal::ConfigError(prefix, absl::StrCat("'", key, "' must be a non-empty list"));
  }
  std::vector<TensorSpec> specs;
  for (const v1::TensorConfig& t : list) {
    ASSIGN_OR_RETURN(TensorSpec spec,
                     ToSpec(t, absl::StrCat(key, "[", specs.size(), "]"), prefix));
    specs.push_back(std::move(spec));
  }
  return specs;
}

void ToConfig(const std::vector<TensorSpec>& specs,
              google::protobuf::RepeatedPtrField<v1::TensorConfig>* out) {
  for (const TensorSpec& spec : specs) {
    v1::TensorConfig* t = out->Add();
    t->set_name(spec.name);
    t->set_dtype(std::string(DTypeName(spec.dtype)));
    for (int64_t d : spec.shape) t->add_shape(static_cast<int32_t>(d));
  }
}

}  // namespace

namespace internal {

absl::Status ConfigError(absl::string_view prefix, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(prefix, what));
}

absl::StatusOr<v1::ModelConfig> ParseConfigJson(absl::string_view json,
                                                absl::string_view prefix) {
  v1::ModelConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &config, options);
  if (!parsed.ok()) {
    // Protobuf names the key: "(inputs[0]) dtyp: Cannot find field.",
    // "(version): invalid value 1 for type TYPE_STRING".
    return ConfigError(prefix, std::string(parsed.message()));
  }
  return config;
}

absl::StatusOr<ModelSignature> ToSignature(const v1::ModelConfig& config,
                                           absl::string_view prefix) {
  ModelSignature sig;
  sig.name = config.name();
  sig.version = config.version();
  ASSIGN_OR_RETURN(sig.inputs, ToSpecs(config.inputs(), "inputs", prefix));
  ASSIGN_OR_RETURN(sig.outputs, ToSpecs(config.outputs(), "outputs", prefix));
  return sig;
}

std::string FirstSettingKey(const v1::ModelConfig& c) {
  if (c.has_max_batch_size()) return "max_batch_size";
  if (c.has_max_queue_delay_us()) return "max_queue_delay_us";
  if (!c.allowed_batch_sizes().empty()) return "allowed_batch_sizes";
  if (c.has_max_queue_size()) return "max_queue_size";
  if (c.has_precision()) return "precision";
  if (c.has_channels_last()) return "channels_last";
  if (c.has_optimize()) return "optimize";
  if (c.has_device()) return "device";
  if (c.devices_size() > 0) return "devices";
  if (c.has_latency_target_us()) return "latency_target_us";
  if (c.has_default_priority()) return "default_priority";
  if (c.has_rows_per_slot()) return "rows_per_slot";
  if (c.has_version_policy()) return "version_policy";
  return "";
}

}  // namespace internal

absl::StatusOr<ModelSignature> ParseModelSignature(absl::string_view json) {
  constexpr absl::string_view kPrefix = "signature JSON: ";
  ASSIGN_OR_RETURN(v1::ModelConfig config, internal::ParseConfigJson(json, kPrefix));
  if (const std::string key = internal::FirstSettingKey(config); !key.empty()) {
    // The one-model path takes its settings from flags; silently ignoring a
    // setting here would serve with a value the file seems to change.
    const std::string instead =
        key == "version_policy" ? "--model serves its one file"
        : key == "max_queue_delay_us" ? "with --model pass the flag --max_queue_delay"
        : key == "latency_target_us"  ? "with --model pass the flag --latency_target"
                                      : absl::StrCat("with --model pass the flag --", key);
    return internal::ConfigError(
        kPrefix, absl::StrCat("'", key, "' is a model repository setting (DIR/<model>/"
                              "config.json, docs/repository.md); ", instead));
  }
  return internal::ToSignature(config, kPrefix);
}

absl::StatusOr<ModelSignature> ReadModelSignature(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read model signature ", path));
  }
  std::stringstream buf;
  buf << in.rdbuf();
  absl::StatusOr<ModelSignature> sig = ParseModelSignature(buf.str());
  if (!sig.ok()) {
    return absl::Status(sig.status().code(),
                        absl::StrCat(path, ": ", sig.status().message()));
  }
  return sig;
}

absl::StatusOr<std::string> SignatureToJson(const ModelSignature& sig) {
  v1::ModelConfig config;
  config.set_name(sig.name);
  config.set_version(sig.version.empty() ? "1" : sig.version);
  ToConfig(sig.inputs, config.mutable_inputs());
  ToConfig(sig.outputs, config.mutable_outputs());
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto printed = google::protobuf::util::MessageToJsonString(config, &json, options);
  if (!printed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("signature JSON: cannot print: ", printed.ToString()));
  }
  return json;
}

SignatureCodec ModelConfigSignatureCodec() {
  SignatureCodec codec;
  codec.read = ReadModelSignature;
  codec.to_json = SignatureToJson;
  return codec;
}

}  // namespace metalserve
