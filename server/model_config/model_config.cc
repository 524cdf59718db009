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

namespace metalserve {
namespace {

// Every name ParseDType (common/tensor.cc) accepts; docs/signature.md
// lists the same.
constexpr const char* kAcceptedDtypes =
    "float32 (fp32, float), float16 (fp16, half), bfloat16 (bf16), "
    "float64 (fp64, double), int64, int32, uint8, int8, bool";

absl::Status SignatureError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("signature JSON: ", what));
}

absl::StatusOr<TensorSpec> ToSpec(const v1::TensorConfig& t, const std::string& field) {
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
    const google::protobuf::RepeatedPtrField<v1::TensorConfig>& list, const std::string& key) {
  if (list.empty()) return SignatureError(absl::StrCat("'", key, "' must be a non-empty list"));
  std::vector<TensorSpec> specs;
  for (const v1::TensorConfig& t : list) {
    ASSIGN_OR_RETURN(TensorSpec spec, ToSpec(t, absl::StrCat(key, "[", specs.size(), "]")));
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

absl::StatusOr<ModelSignature> ParseModelSignature(absl::string_view json) {
  v1::ModelConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &config, options);
  if (!parsed.ok()) {
    // Protobuf names the key: "(inputs[0]) dtyp: Cannot find field.",
    // "(version): invalid value 1 for type TYPE_STRING".
    return SignatureError(std::string(parsed.message()));
  }
  ModelSignature sig;
  sig.name = config.name();
  sig.version = config.version();
  ASSIGN_OR_RETURN(sig.inputs, ToSpecs(config.inputs(), "inputs"));
  ASSIGN_OR_RETURN(sig.outputs, ToSpecs(config.outputs(), "outputs"));
  return sig;
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
