#include "client/kserve_codec.h"

#include "absl/strings/str_cat.h"
#include "proto/dtype/dtype_map.h"

namespace metalserve::client {
namespace {

// The native datatype of a KServe datatype string; UNSPECIFIED for one the
// native API has no type for.
v1::DataType NativeFromKServe(absl::string_view datatype) {
  return ProtoDataType(DTypeFromKServe(datatype).value_or(DType::kInvalid));
}

}  // namespace

absl::string_view KServeDatatypeOf(v1::DataType dtype) {
  return KServeDatatype(DTypeFromProto(dtype).value_or(DType::kInvalid));
}

absl::StatusOr<v1::GetModelMetadataResponse> MetadataFromKServe(
    const inference::ModelMetadataResponse& metadata) {
  v1::GetModelMetadataResponse out;
  out.set_model_name(metadata.name());
  if (metadata.versions_size() > 0) out.set_model_version(metadata.versions(0));
  for (int i = 0; i < metadata.inputs_size(); ++i) {
    const auto& in = metadata.inputs(i);
    const v1::DataType dtype = NativeFromKServe(in.datatype());
    if (dtype == v1::DATA_TYPE_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ModelMetadata inputs[", i, "] ('", in.name(), "') has datatype '",
          in.datatype(), "', which metalserve-bench cannot generate; give --dtype"));
    }
    auto* spec = out.add_inputs();
    spec->set_name(in.name());
    spec->set_dtype(dtype);
    for (int64_t d : in.shape()) spec->add_shape(d);
  }
  for (const auto& o : metadata.outputs()) {
    auto* spec = out.add_outputs();
    spec->set_name(o.name());
    spec->set_dtype(NativeFromKServe(o.datatype()));
    for (int64_t d : o.shape()) spec->add_shape(d);
  }
  return out;
}

inference::ModelInferRequest ToModelInferRequest(const v1::PredictRequest& request) {
  inference::ModelInferRequest out;
  out.set_model_name(request.model_name());
  for (const auto& t : request.inputs()) {
    auto* in = out.add_inputs();
    in->set_name(t.name());
    in->set_datatype(std::string(KServeDatatypeOf(t.dtype())));
    for (int64_t d : t.shape()) in->add_shape(d);
    out.add_raw_input_contents(t.data());
  }
  // The native field's KServe spelling, as Triton reads it.
  if (request.priority() != 0) {
    (*out.mutable_parameters())["priority"].set_int64_param(request.priority());
  }
  return out;
}

}  // namespace metalserve::client
