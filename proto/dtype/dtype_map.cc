#include "proto/dtype/dtype_map.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metalserve {
namespace {

struct Row {
  DType dtype;
  v1::DataType native;
  absl::string_view kserve;
  inference::DataType kserve_config;
};
constexpr Row kRows[] = {
    {DType::kFloat32, v1::DATA_TYPE_FLOAT32, "FP32", inference::TYPE_FP32},
    {DType::kFloat16, v1::DATA_TYPE_FLOAT16, "FP16", inference::TYPE_FP16},
    {DType::kBFloat16, v1::DATA_TYPE_BFLOAT16, "BF16", inference::TYPE_BF16},
    {DType::kFloat64, v1::DATA_TYPE_FLOAT64, "FP64", inference::TYPE_FP64},
    {DType::kInt64, v1::DATA_TYPE_INT64, "INT64", inference::TYPE_INT64},
    {DType::kInt32, v1::DATA_TYPE_INT32, "INT32", inference::TYPE_INT32},
    {DType::kUInt8, v1::DATA_TYPE_UINT8, "UINT8", inference::TYPE_UINT8},
    {DType::kInt8, v1::DATA_TYPE_INT8, "INT8", inference::TYPE_INT8},
    {DType::kBool, v1::DATA_TYPE_BOOL, "BOOL", inference::TYPE_BOOL},
};

const Row* Find(DType dtype) {
  for (const Row& r : kRows) {
    if (r.dtype == dtype) return &r;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<DType> DTypeFromProto(v1::DataType dtype) {
  for (const Row& r : kRows) {
    if (r.native == dtype) return r.dtype;
  }
  const std::string& name = v1::DataType_Name(dtype);
  return absl::InvalidArgumentError(absl::StrCat(
      "metalserve.v1.DataType ", name.empty() ? "" : name + " = ",
      static_cast<int>(dtype), " has no dtype"));
}

v1::DataType ProtoDataType(DType dtype) {
  const Row* r = Find(dtype);
  return r == nullptr ? v1::DATA_TYPE_UNSPECIFIED : r->native;
}

absl::StatusOr<DType> DTypeFromKServe(absl::string_view datatype) {
  for (const Row& r : kRows) {
    if (r.kserve == datatype) return r.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "KServe datatype '", datatype, "' is not served; use one of ",
      KServeDatatypeList()));
}

absl::string_view KServeDatatype(DType dtype) {
  const Row* r = Find(dtype);
  return r == nullptr ? absl::string_view() : r->kserve;
}

inference::DataType KServeConfigType(DType dtype) {
  const Row* r = Find(dtype);
  return r == nullptr ? inference::TYPE_INVALID : r->kserve_config;
}

std::string KServeDatatypeList() {
  return absl::StrJoin(kRows, ", ", [](std::string* out, const Row& r) {
    out->append(r.kserve.data(), r.kserve.size());
  });
}

}  // namespace metalserve
