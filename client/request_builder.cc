#include "client/request_builder.h"

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "common/tensor.h"
#include "proto/dtype/dtype_map.h"

namespace metalserve::client {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return metalserve::ShapeToString(shape);
}

// Random element bytes of `dtype`, little-endian; floats in [0, 1).
void FillRandom(v1::DataType dtype, int64_t elements, std::mt19937_64& rng,
                std::string* out) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const int64_t size = DataTypeSize(dtype);
  out->resize(static_cast<size_t>(elements * size));
  char* p = out->data();
  for (int64_t i = 0; i < elements; ++i, p += size) {
    switch (dtype) {
      case v1::DATA_TYPE_FLOAT32: {
        const float v = unit(rng);
        std::memcpy(p, &v, 4);
        break;
      }
      case v1::DATA_TYPE_FLOAT64: {
        const double v = unit(rng);
        std::memcpy(p, &v, 8);
        break;
      }
      case v1::DATA_TYPE_FLOAT16: {
        // Exponent 14 (values in [0.5, 1)) with a random mantissa: always
        // finite and normal.
        const uint16_t v = static_cast<uint16_t>(0x3800u | (rng() & 0x3FFu));
        std::memcpy(p, &v, 2);
        break;
      }
      case v1::DATA_TYPE_BFLOAT16: {
        const float f = unit(rng);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        const uint16_t v = static_cast<uint16_t>(bits >> 16);
        std::memcpy(p, &v, 2);
        break;
      }
      case v1::DATA_TYPE_INT64: {
        const int64_t v = static_cast<int64_t>(rng() % 100);
        std::memcpy(p, &v, 8);
        break;
      }
      case v1::DATA_TYPE_INT32: {
        const int32_t v = static_cast<int32_t>(rng() % 100);
        std::memcpy(p, &v, 4);
        break;
      }
      case v1::DATA_TYPE_BOOL:
        *p = static_cast<char>(rng() & 1);
        break;
      default:  // uint8, int8
        *p = static_cast<char>(rng() & 0xFF);
        break;
    }
  }
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open input file '", path, "'"));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int64_t DataTypeSize(v1::DataType dtype) {
  return metalserve::ItemSize(
      metalserve::DTypeFromProto(dtype).value_or(metalserve::DType::kInvalid));
}

absl::StatusOr<v1::DataType> ParseDataType(absl::string_view text) {
  ASSIGN_OR_RETURN(const metalserve::DType d, metalserve::ParseDType(text));
  return metalserve::ProtoDataType(d);
}

absl::StatusOr<std::vector<int64_t>> ParseShape(absl::string_view text) {
  std::vector<int64_t> shape;
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return shape;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t d;
    if (!absl::SimpleAtoi(part, &d) || d < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad dimension '", part, "' in shape '", text,
          "' (want positive integers, e.g. 3,224,224)"));
    }
    shape.push_back(d);
  }
  return shape;
}

absl::StatusOr<InputSource> ParseInputSource(absl::string_view text) {
  InputSource s;
  if (text == "zeros") return s;
  if (text == "random") {
    s.kind = InputKind::kRandom;
    return s;
  }
  if (absl::ConsumePrefix(&text, "@") && !text.empty()) {
    s.kind = InputKind::kFile;
    s.path = std::string(text);
    return s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--input='", text, "': want zeros, random or @path"));
}

absl::StatusOr<std::vector<InputSpec>> ResolveInputs(
    const v1::GetModelMetadataResponse* metadata,
    const InputOverrides& overrides, int64_t batch) {
  if (batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch ", batch, " < 1"));
  }
  std::vector<InputSpec> specs;
  if (metadata != nullptr) {
    for (const v1::TensorSpec& t : metadata->inputs()) {
      InputSpec s{t.name(), t.dtype(), {t.shape().begin(), t.shape().end()}};
      specs.push_back(std::move(s));
    }
  }
  if (specs.empty()) {
    if (!overrides.name || !overrides.dtype || !overrides.shape) {
      return absl::InvalidArgumentError(
          "no model metadata: give --input_name, --dtype and --shape");
    }
    specs.push_back({});
  }
  InputSpec& first = specs.front();
  if (overrides.name) first.name = *overrides.name;
  if (overrides.dtype) first.dtype = *overrides.dtype;
  if (overrides.shape) {
    first.shape = {-1};
    first.shape.insert(first.shape.end(), overrides.shape->begin(),
                       overrides.shape->end());
  }
  for (InputSpec& s : specs) {
    if (DataTypeSize(s.dtype) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", s.name, "' has no usable dtype (", s.dtype, "); give --dtype"));
    }
    if (s.shape.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", s.name, "' has no batch dimension"));
    }
    s.shape[0] = batch;
    for (size_t i = 1; i < s.shape.size(); ++i) {
      if (s.shape[i] < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", s.name, "' shape ", ShapeString(s.shape),
            " has a variable dimension ", i, "; fix it with --shape"));
      }
    }
  }
  return specs;
}

absl::StatusOr<v1::PredictRequest> BuildPredictRequest(
    const std::vector<InputSpec>& inputs, const InputSource& source,
    absl::string_view model_name) {
  v1::PredictRequest req;
  req.set_model_name(std::string(model_name));
  if (source.kind == InputKind::kFile && inputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--input=@file needs a single-input model; this one has ",
        inputs.size(), " inputs"));
  }
  std::mt19937_64 rng(source.seed);
  for (const InputSpec& spec : inputs) {
    ASSIGN_OR_RETURN(const int64_t elements, metalserve::NumElements(spec.shape));
    const int64_t bytes = elements * DataTypeSize(spec.dtype);
    v1::Tensor* t = req.add_inputs();
    t->set_name(spec.name);
    t->set_dtype(spec.dtype);
    for (int64_t d : spec.shape) t->add_shape(d);
    switch (source.kind) {
      case InputKind::kZeros:
        t->mutable_data()->assign(static_cast<size_t>(bytes), '\0');
        break;
      case InputKind::kRandom:
        FillRandom(spec.dtype, elements, rng, t->mutable_data());
        break;
      case InputKind::kFile: {
        ASSIGN_OR_RETURN(std::string data, ReadFile(source.path));
        const int64_t rows = spec.shape[0];
        const int64_t row_bytes = bytes / rows;
        if (static_cast<int64_t>(data.size()) == bytes) {
          *t->mutable_data() = std::move(data);
        } else if (static_cast<int64_t>(data.size()) == row_bytes) {
          std::string* out = t->mutable_data();
          out->reserve(static_cast<size_t>(bytes));
          for (int64_t r = 0; r < rows; ++r) out->append(data);
        } else {
          return absl::InvalidArgumentError(absl::StrCat(
              "input file '", source.path, "' has ", data.size(),
              " bytes; want ", row_bytes, " (one row of ",
              ShapeString(spec.shape), ") or ", bytes, " (", rows, " rows)"));
        }
        break;
      }
    }
  }
  return req;
}

}  // namespace metalserve::client
