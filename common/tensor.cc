#include "common/tensor.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metalserve {

int64_t ItemSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kFloat64: return 8;
    case DType::kInt64: return 8;
    case DType::kInt32: return 4;
    case DType::kUInt8: return 1;
    case DType::kInt8: return 1;
    case DType::kBool: return 1;
    case DType::kInvalid: return 0;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat64: return "float64";
    case DType::kInt64: return "int64";
    case DType::kInt32: return "int32";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kBool: return "bool";
    case DType::kInvalid: return "invalid";
  }
  return "invalid";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "float32" || n == "fp32" || n == "float") return DType::kFloat32;
  if (n == "float16" || n == "fp16" || n == "half") return DType::kFloat16;
  if (n == "bfloat16" || n == "bf16") return DType::kBFloat16;
  if (n == "float64" || n == "fp64" || n == "double") return DType::kFloat64;
  if (n == "int64") return DType::kInt64;
  if (n == "int32") return DType::kInt32;
  if (n == "uint8") return DType::kUInt8;
  if (n == "int8") return DType::kInt8;
  if (n == "bool") return DType::kBool;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'"));
}

absl::StatusOr<int64_t> NumElements(const std::vector<int64_t>& shape,
                                    absl::string_view what) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "[", i, "] = ", d, " is negative (", what, " ",
          ShapeToString(shape), ")"));
    }
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " ", ShapeToString(shape), ": element count overflows int64"));
    }
    n *= d;
  }
  return n;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

int64_t Tensor::RowBytes() const {
  int64_t n = ItemSize(dtype);
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

Tensor ZerosOf(const TensorSpec& spec, int64_t rows) {
  Tensor t;
  t.name = spec.name;
  t.dtype = spec.dtype;
  t.shape = spec.shape;
  if (!t.shape.empty()) t.shape[0] = rows;
  int64_t n = ItemSize(spec.dtype);
  for (int64_t& d : t.shape) {
    d = std::max<int64_t>(d, 1);
    n *= d;
  }
  t.data.assign(static_cast<size_t>(n), '\0');
  return t;
}

}  // namespace metalserve
