#include "client/kserve_codec.h"

#include "absl/strings/str_cat.h"

namespace metalserve::client {
namespace {

struct Pair {
  v1::DataType dtype;
  absl::string_view name;
};
constexpr Pair kPairs[] = {
    {v1::DATA_TYPE_FLOAT32, "FP32"}, {v1::DATA_TYPE_FLOAT16, "FP16"},
    {v1::DATA_TYPE_BFLOAT16, "BF16"}, {v1::DATA_TYPE_FLOAT64, "FP64"},
    {v1::DATA_TYPE_INT64, "INT64"},  {v1::DATA_TYPE_INT32, "INT32"},
    {v1::DATA_TYPE_UINT8, "UINT8"},  {v1::DATA_TYPE_INT8, "INT8"},
    {v1::DATA_TYPE_BOOL, "BOOL"},
};

}  // namespace

absl::string_view KServeDatatypeOf(v1::DataType dtype) {
  for (const Pair& p : kPairs) {
    if (p.dtype == dtype) return p.name;
  }
  return "";
}

v1::DataType DataTypeFromKServe(absl::string_view datatype) {
  for (const Pair& p : kPairs) {
    if (p.name == datatype) return p.dtype;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

absl::StatusOr<v1::GetModelMetadataResponse> MetadataFromKServe(
    const inference::ModelMetadataResponse& metadata) {
  v1::GetModelMetadataResponse out;
  out.set_model_name(metadata.name());
  if (metadata.versions_size() > 0) out.set_model_version(metadata.versions(0));
  for (int i = 0; i < metadata.inputs_size(); ++i) {
    const auto& in = metadata.inputs(i);
    const v1::DataType dtype = DataTypeFromKServe(in.datatype());
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
    spec->set_dtype(DataTypeFromKServe(o.datatype()));
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
  return out;
}

}  // namespace metalserve::client
