#include "server/service/rest_codec.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "common/half_float.h"
#include "proto/dtype/dtype_map.h"
#include "server/service/kserve_codec.h"
#include "server/service/status_util.h"

namespace metalserve {

using inference::ModelInferRequest;
using Json = nlohmann::json;

namespace {

// Deepest nesting of a `data` array: far above any model's rank, low enough
// that flattening cannot exhaust the stack.
constexpr int kMaxDataDepth = 32;

template <typename T>
void AppendRaw(T v, std::string* out) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Appends one JSON value as `dtype`; an error message (empty when fine).
template <typename T>
std::string AppendInteger(const Json& v, std::string* out) {
  if (!v.is_number_integer()) return "is not an integer";
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return "is out of range for the datatype";
    }
    AppendRaw(static_cast<T>(u), out);
    return "";
  }
  const int64_t i = v.get<int64_t>();
  if (i < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      (i > 0 && static_cast<uint64_t>(i) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
    return "is out of range for the datatype";
  }
  AppendRaw(static_cast<T>(i), out);
  return "";
}

std::string AppendValue(const Json& v, DType dtype, std::string* out) {
  switch (dtype) {
    case DType::kBool:
      if (!v.is_boolean()) return "is not a boolean (true or false)";
      AppendRaw(static_cast<uint8_t>(v.get<bool>() ? 1 : 0), out);
      return "";
    case DType::kInt64: return AppendInteger<int64_t>(v, out);
    case DType::kInt32: return AppendInteger<int32_t>(v, out);
    case DType::kInt8: return AppendInteger<int8_t>(v, out);
    case DType::kUInt8: return AppendInteger<uint8_t>(v, out);
    default: break;
  }
  if (!v.is_number()) return "is not a number";
  const double d = v.get<double>();
  switch (dtype) {
    case DType::kFloat64: AppendRaw(d, out); break;
    case DType::kFloat32: AppendRaw(static_cast<float>(d), out); break;
    case DType::kFloat16: AppendRaw(FloatToHalf(static_cast<float>(d)), out); break;
    case DType::kBFloat16: AppendRaw(FloatToBFloat16(static_cast<float>(d)), out); break;
    default: return "has no datatype to convert to";
  }
  return "";
}

struct DataWalk {
  DType dtype;
  std::string field;  // "inputs[0] ('x').data"
  std::string* out;
  int64_t count = 0;
};

// Appends every value of `data` (nested arrays flattened row-major).
absl::Status Flatten(const Json& data, int depth, DataWalk* w) {
  if (depth > kMaxDataDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        w->field, " is nested deeper than ", kMaxDataDepth, " levels"));
  }
  for (const Json& v : data) {
    if (v.is_array()) {
      if (absl::Status s = Flatten(v, depth + 1, w); !s.ok()) return s;
      continue;
    }
    const std::string why = AppendValue(v, w->dtype, w->out);
    if (!why.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          w->field, "[", w->count, "] = ", ClientText(v.dump()), " ", why, " (datatype ",
          KServeDatatype(w->dtype), ")"));
    }
    ++w->count;
  }
  return absl::OkStatus();
}

absl::Status Invalid(absl::string_view field, absl::string_view what, const Json& v) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be ", what, ", got ", ClientText(v.dump())));
}

// A parameters object's boolean `key`, or `fallback`.
absl::StatusOr<bool> BoolParam(const Json& obj, absl::string_view field,
                               const char* key, bool fallback) {
  auto p = obj.find("parameters");
  if (p == obj.end()) return fallback;
  if (!p->is_object()) return Invalid(absl::StrCat(field, ".parameters"), "an object", *p);
  auto v = p->find(key);
  if (v == p->end()) return fallback;
  if (!v->is_boolean()) return Invalid(absl::StrCat(field, ".parameters.", key), "true or false", *v);
  return v->get<bool>();
}

// The request's `parameters` as the KServe message's (Triton's priority and
// timeout among them, read by the same code as gRPC's): integers as int64
// (uint64 beyond its range), other numbers as double, booleans, strings.
absl::Status CopyParameters(const Json& root, ModelInferRequest* request) {
  auto p = root.find("parameters");
  if (p == root.end()) return absl::OkStatus();
  if (!p->is_object()) return Invalid("parameters", "an object", *p);
  for (const auto& [key, v] : p->items()) {
    inference::InferParameter& out = (*request->mutable_parameters())[key];
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) {
      out.set_uint64_param(v.get<uint64_t>());
    } else if (v.is_number_integer()) {
      out.set_int64_param(v.get<int64_t>());
    } else if (v.is_number_float()) {
      out.set_double_param(v.get<double>());
    } else if (v.is_boolean()) {
      out.set_bool_param(v.get<bool>());
    } else if (v.is_string()) {
      out.set_string_param(v.get<std::string>());
    } else {
      return Invalid(absl::StrCat("parameters.", ClientText(key)),
                     "a number, string or boolean", v);
    }
  }
  return absl::OkStatus();
}

// Name, datatype and shape of one input.
absl::Status DecodeInputHeader(const Json& in, const std::string& f,
                               ModelInferRequest::InferInputTensor* t) {
  if (!in.is_object()) return Invalid(f, "an object", in);
  auto name = in.find("name");
  if (name == in.end() || !name->is_string()) {
    return Invalid(f + ".name", "a string", name == in.end() ? Json() : *name);
  }
  t->set_name(name->get<std::string>());
  auto datatype = in.find("datatype");
  if (datatype == in.end() || !datatype->is_string()) {
    return Invalid(f + ".datatype", "a string", datatype == in.end() ? Json() : *datatype);
  }
  t->set_datatype(datatype->get<std::string>());
  auto shape = in.find("shape");
  if (shape == in.end() || !shape->is_array()) {
    return Invalid(f + ".shape", "an array of integers", shape == in.end() ? Json() : *shape);
  }
  for (const Json& d : *shape) {
    if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() >
                                        static_cast<uint64_t>(INT64_MAX))) {
      return Invalid(f + ".shape", "an array of integers", *shape);
    }
    t->add_shape(d.get<int64_t>());
  }
  return absl::OkStatus();
}

// The binary_data_size parameter of one input, or -1 when it has none.
absl::StatusOr<int64_t> BinarySize(const Json& in, const std::string& f) {
  auto p = in.find("parameters");
  if (p == in.end()) return -1;
  if (!p->is_object()) return Invalid(f + ".parameters", "an object", *p);
  auto size = p->find("binary_data_size");
  if (size == p->end()) return -1;
  if (!size->is_number_unsigned()) {
    return Invalid(f + ".parameters.binary_data_size", "a non-negative integer", *size);
  }
  return static_cast<int64_t>(std::min<uint64_t>(size->get<uint64_t>(), INT64_MAX));
}

// The bytes of one input: from `data` or from the binary part at *offset.
absl::Status DecodeInputBytes(const Json& in, const std::string& f,
                              const ModelInferRequest::InferInputTensor& shape, DType dtype,
                              absl::string_view binary, size_t* offset, std::string* out) {
  absl::StatusOr<int64_t> size = BinarySize(in, f);
  if (!size.ok()) return size.status();
  auto data = in.find("data");
  if (*size >= 0) {
    if (data != in.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          f, " has both data and parameters.binary_data_size; give one"));
    }
    if (static_cast<uint64_t>(*size) > binary.size() - *offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          f, ".parameters.binary_data_size = ", *size, " but only ",
          binary.size() - *offset, " bytes of binary data are left in the body"));
    }
    out->assign(binary.data() + *offset, static_cast<size_t>(*size));
    *offset += static_cast<size_t>(*size);
    return absl::OkStatus();
  }
  if (data == in.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(f, " has neither data nor parameters.binary_data_size"));
  }
  if (dtype == DType::kInvalid) return absl::OkStatus();  // refused by the codec
  if (!data->is_array()) return Invalid(f + ".data", "an array", *data);
  DataWalk walk{dtype, f + ".data", out};
  if (absl::Status s = Flatten(*data, 0, &walk); !s.ok()) return s;
  const auto& dims = shape.shape();
  absl::StatusOr<int64_t> want = NumElements(std::vector<int64_t>(dims.begin(), dims.end()));
  if (want.ok() && *want != walk.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        f, ".data has ", walk.count, " values; shape ",
        ShapeToString(std::vector<int64_t>(dims.begin(), dims.end())), " needs ", *want));
  }
  return absl::OkStatus();
}

absl::Status DecodeInputs(const Json& root, absl::string_view binary,
                          ModelInferRequest* request) {
  auto inputs = root.find("inputs");
  if (inputs == root.end() || !inputs->is_array()) {
    return Invalid("inputs", "an array", inputs == root.end() ? Json() : *inputs);
  }
  size_t offset = 0;
  for (size_t i = 0; i < inputs->size(); ++i) {
    const Json& in = (*inputs)[i];
    std::string f = absl::StrCat("inputs[", i, "]");
    auto* t = request->add_inputs();
    if (absl::Status s = DecodeInputHeader(in, f, t); !s.ok()) return s;
    f = absl::StrCat(f, " ('", ClientText(t->name()), "')");
    std::string* bytes = request->add_raw_input_contents();
    if (absl::Status s = DecodeInputBytes(in, f, *t, DTypeFromKServe(t->datatype()).value_or(DType::kInvalid),
                                          binary, &offset, bytes);
        !s.ok()) {
      return s;
    }
  }
  if (offset != binary.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the body has ", binary.size(), " bytes of binary data after the JSON header but "
        "the inputs' binary_data_size add up to ", offset));
  }
  return absl::OkStatus();
}

absl::Status DecodeOutputs(const Json& root, RestInferRequest* out) {
  auto outputs = root.find("outputs");
  if (outputs == root.end()) return absl::OkStatus();
  if (!outputs->is_array()) return Invalid("outputs", "an array", *outputs);
  for (size_t i = 0; i < outputs->size(); ++i) {
    const Json& o = (*outputs)[i];
    const std::string f = absl::StrCat("outputs[", i, "]");
    if (!o.is_object()) return Invalid(f, "an object", o);
    auto name = o.find("name");
    if (name == o.end() || !name->is_string()) {
      return Invalid(f + ".name", "a string", name == o.end() ? Json() : *name);
    }
    out->request.add_outputs()->set_name(name->get<std::string>());
    absl::StatusOr<bool> binary = BoolParam(o, f, "binary_data", out->default_binary);
    if (!binary.ok()) return binary.status();
    out->output_binary.push_back(*binary);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RestInferRequest> DecodeRestInferRequest(
    absl::string_view body, std::optional<size_t> header_length,
    absl::string_view model_name, absl::string_view model_version) {
  const size_t json_length = header_length.value_or(body.size());
  if (json_length > body.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kInferenceHeaderContentLength, " = ", json_length, " is beyond the body's ",
        body.size(), " bytes"));
  }
  Json root = Json::parse(body.substr(0, json_length), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request body is not valid JSON (", json_length, " bytes)"));
  }
  if (!root.is_object()) return Invalid("the request body", "a JSON object", root);
  RestInferRequest out;
  out.request.set_model_name(std::string(model_name));
  out.request.set_model_version(std::string(model_version));
  if (auto id = root.find("id"); id != root.end()) {
    if (!id->is_string()) return Invalid("id", "a string", *id);
    out.request.set_id(id->get<std::string>());
  }
  absl::StatusOr<bool> binary = BoolParam(root, "", "binary_data_output", false);
  if (!binary.ok()) return binary.status();
  out.default_binary = *binary;
  if (absl::Status s = CopyParameters(root, &out.request); !s.ok()) return s;
  if (absl::Status s = DecodeInputs(root, body.substr(json_length), &out.request); !s.ok()) {
    return s;
  }
  if (absl::Status s = DecodeOutputs(root, &out); !s.ok()) return s;
  return out;
}

namespace {

template <typename T>
Json ValuesAs(const std::string& bytes) {
  Json a = Json::array();
  const size_t n = bytes.size() / sizeof(T);
  a.get_ref<Json::array_t&>().reserve(n);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
      a.push_back(static_cast<int>(v));
    } else {
      a.push_back(v);
    }
  }
  return a;
}

Json Halves(const std::string& bytes, bool bf16) {
  Json a = Json::array();
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + i, 2);
    a.push_back(bf16 ? BFloat16ToFloat(h) : HalfToFloat(h));
  }
  return a;
}

Json DataOf(const Tensor& t) {
  switch (t.dtype) {
    case DType::kFloat32: return ValuesAs<float>(t.data);
    case DType::kFloat64: return ValuesAs<double>(t.data);
    case DType::kFloat16: return Halves(t.data, false);
    case DType::kBFloat16: return Halves(t.data, true);
    case DType::kInt64: return ValuesAs<int64_t>(t.data);
    case DType::kInt32: return ValuesAs<int32_t>(t.data);
    case DType::kUInt8: return ValuesAs<uint8_t>(t.data);
    case DType::kInt8: return ValuesAs<int8_t>(t.data);
    case DType::kBool: {
      Json a = Json::array();
      for (char c : t.data) a.push_back(c != 0);
      return a;
    }
    case DType::kInvalid: break;
  }
  return Json::array();
}

}  // namespace

RestBody EncodeRestInferResponse(const ResponseFields& fields,
                                 const std::vector<Tensor>& outputs,
                                 const std::vector<size_t>& selected,
                                 const std::vector<bool>& binary) {
  // The same fields, and the same three int64 parameters, as a ModelInfer
  // answer (WriteModelInferResponse).
  Json root = {{"model_name", fields.model_name},
               {"model_version", fields.model_version},
               {"parameters", {{"batch_rows", fields.batch_rows},
                               {"compute_time_us", fields.compute_time_us},
                               {"queue_time_us", fields.queue_time_us}}}};
  if (!fields.id.empty()) root["id"] = fields.id;
  Json outs = Json::array();
  std::vector<const std::string*> tail;
  for (size_t i = 0; i < selected.size(); ++i) {
    const Tensor& t = outputs[selected[i]];
    Json o = {{"name", t.name}, {"datatype", std::string(KServeDatatype(t.dtype))},
              {"shape", t.shape}};
    if (binary[i]) {
      o["parameters"] = {{"binary_data_size", t.data.size()}};
      tail.push_back(&t.data);
    } else {
      o["data"] = DataOf(t);
    }
    outs.push_back(std::move(o));
  }
  root["outputs"] = std::move(outs);
  RestBody out;
  out.body = root.dump(-1, ' ', false, Json::error_handler_t::replace);
  out.json_length = out.body.size();
  out.has_binary = !tail.empty();
  for (const std::string* bytes : tail) out.body.append(*bytes);
  return out;
}

std::string RestErrorBody(absl::string_view message) {
  return Json{{"error", std::string(message)}}.dump(-1, ' ', false,
                                                    Json::error_handler_t::replace);
}

}  // namespace metalserve
