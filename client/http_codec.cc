#include "client/http_codec.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/half_float.h"
#include "nlohmann/json.hpp"

namespace metalserve::client {
namespace {

using Json = nlohmann::json;

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Appends every element of `raw` as a JSON value of `datatype`.
absl::Status AppendData(absl::string_view datatype, absl::string_view raw, Json& data) {
  auto each = [&](size_t size, auto&& value) {
    for (size_t i = 0; i + size <= raw.size(); i += size) data.push_back(value(raw.data() + i));
  };
  if (datatype == "FP32") each(4, [](const char* p) { return Load<float>(p); });
  else if (datatype == "FP64") each(8, [](const char* p) { return Load<double>(p); });
  else if (datatype == "INT64") each(8, [](const char* p) { return Load<int64_t>(p); });
  else if (datatype == "INT32") each(4, [](const char* p) { return Load<int32_t>(p); });
  else if (datatype == "INT16") each(2, [](const char* p) { return Load<int16_t>(p); });
  else if (datatype == "INT8") each(1, [](const char* p) { return Load<int8_t>(p); });
  else if (datatype == "UINT8") each(1, [](const char* p) { return Load<uint8_t>(p); });
  else if (datatype == "BOOL") each(1, [](const char* p) { return *p != 0; });
  else if (datatype == "FP16") each(2, [](const char* p) {
    return HalfToFloat(Load<uint16_t>(p));
  });
  else if (datatype == "BF16") each(2, [](const char* p) {
    return BFloat16ToFloat(Load<uint16_t>(p));
  });
  else {
    return absl::InvalidArgumentError(absl::StrCat(
        "datatype '", datatype, "' cannot be sent as JSON data; use --http_format=binary"));
  }
  return absl::OkStatus();
}

Json ParametersJson(const google::protobuf::Map<std::string, inference::InferParameter>& p) {
  Json out = Json::object();
  for (const auto& [key, value] : p) {
    switch (value.parameter_choice_case()) {
      case inference::InferParameter::kBoolParam: out[key] = value.bool_param(); break;
      case inference::InferParameter::kInt64Param: out[key] = value.int64_param(); break;
      case inference::InferParameter::kStringParam: out[key] = value.string_param(); break;
      default: break;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<HttpInferBody> EncodeInferBody(const inference::ModelInferRequest& request,
                                              HttpTensorFormat format) {
  const bool binary = format == HttpTensorFormat::kBinary;
  Json header = Json::object();
  Json inputs = Json::array();
  std::string tail;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& in = request.inputs(i);
    const std::string& raw =
        i < request.raw_input_contents_size() ? request.raw_input_contents(i) : "";
    Json t = {{"name", in.name()}, {"datatype", in.datatype()},
              {"shape", Json(std::vector<int64_t>(in.shape().begin(), in.shape().end()))}};
    if (binary) {
      t["parameters"] = {{"binary_data_size", raw.size()}};
      tail += raw;
    } else {
      Json data = Json::array();
      if (absl::Status s = AppendData(in.datatype(), raw, data); !s.ok()) return s;
      t["data"] = std::move(data);
    }
    inputs.push_back(std::move(t));
  }
  header["inputs"] = std::move(inputs);
  Json params = ParametersJson(request.parameters());
  if (binary) params["binary_data_output"] = true;
  if (!params.empty()) header["parameters"] = std::move(params);
  HttpInferBody out;
  out.body = header.dump();
  if (binary) {
    out.header_length = static_cast<int64_t>(out.body.size());
    out.body += tail;
  }
  return out;
}

grpc::StatusCode CodeOfHttpStatus(long http_status) {
  switch (http_status) {
    case 200: return grpc::StatusCode::OK;
    case 400: return grpc::StatusCode::INVALID_ARGUMENT;
    case 404: return grpc::StatusCode::NOT_FOUND;
    case 413: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 503: return grpc::StatusCode::UNAVAILABLE;
    case 504: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case 500: return grpc::StatusCode::INTERNAL;
    default: return grpc::StatusCode::UNKNOWN;
  }
}

CallResult DecodeInferAnswer(long http_status, absl::string_view body,
                             int64_t header_length) {
  CallResult r;
  r.code = CodeOfHttpStatus(http_status);
  if (header_length >= 0 && static_cast<size_t>(header_length) <= body.size()) {
    body = body.substr(0, static_cast<size_t>(header_length));
  }
  const Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (r.code != grpc::StatusCode::OK) {
    std::string text = j.is_object() && j.contains("error") && j["error"].is_string()
                           ? j["error"].get<std::string>()
                           : std::string(body.substr(0, 200));
    r.message = absl::StrCat("HTTP ", http_status, ": ", text);
    return r;
  }
  if (!j.is_object()) {
    r.code = grpc::StatusCode::INTERNAL;
    r.message = "HTTP 200 with a body that is not a JSON object";
    return r;
  }
  const auto version = j.find("model_version");
  if (version != j.end() && version->is_string()) r.model_version = version->get<std::string>();
  const auto params = j.find("parameters");
  if (params == j.end() || !params->is_object()) return r;
  auto figure = [&params](const char* key) -> int64_t {
    const auto it = params->find(key);
    return it != params->end() && it->is_number_integer() ? it->get<int64_t>() : 0;
  };
  r.queue_us = figure("queue_time_us");
  r.compute_us = figure("compute_time_us");
  r.batch_rows = figure("batch_rows");
  return r;
}

absl::StatusOr<inference::ModelMetadataResponse> ParseModelMetadata(
    absl::string_view json) {
  const Json j = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("inputs") || !j["inputs"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model metadata is not a JSON object with \"inputs\": ", json.substr(0, 200)));
  }
  inference::ModelMetadataResponse out;
  out.set_name(j.value("name", ""));
  if (j.contains("versions") && j["versions"].is_array()) {
    for (const Json& v : j["versions"]) {
      if (v.is_string()) out.add_versions(v.get<std::string>());
    }
  }
  for (const char* side : {"inputs", "outputs"}) {
    if (!j.contains(side) || !j[side].is_array()) continue;
    for (const Json& t : j[side]) {
      if (!t.is_object()) continue;
      auto* m = side[0] == 'i' ? out.add_inputs() : out.add_outputs();
      m->set_name(t.value("name", ""));
      m->set_datatype(t.value("datatype", ""));
      if (t.contains("shape") && t["shape"].is_array()) {
        for (const Json& d : t["shape"]) {
          if (d.is_number_integer()) m->add_shape(d.get<int64_t>());
        }
      }
    }
  }
  return out;
}

}  // namespace metalserve::client
