// Project-owned tensor type shared by the service, batcher and runtime.
//
// A `Tensor` is a dense, row-major, little-endian buffer with a dtype and a
// shape whose first dimension is the batch dimension. It is deliberately
// torch-free and protobuf-free so that every module above the runtime can be
// built and tested without LibTorch.
//
// Thread-safety: plain value types; no internal synchronisation.
#ifndef METALSERVE_SERVER_COMMON_TENSOR_H_
#define METALSERVE_SERVER_COMMON_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metalserve {

enum class DType : int {
  kInvalid = 0,
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat64,
  kInt64,
  kInt32,
  kUInt8,
  kInt8,
  kBool,
};

// Bytes per element; 0 for kInvalid.
int64_t ItemSize(DType dtype);
// Lower-case name, e.g. "float32".
absl::string_view DTypeName(DType dtype);
// Parses "float32", "fp32", "float16", "fp16", "bf16", ... .
absl::StatusOr<DType> ParseDType(absl::string_view name);

// Number of elements of `shape`, or InvalidArgument when a dimension is
// negative or the product overflows int64 (the message names `what`).
absl::StatusOr<int64_t> NumElements(const std::vector<int64_t>& shape,
                                    absl::string_view what = "shape");
std::string ShapeToString(const std::vector<int64_t>& shape);

struct Tensor {
  std::string name;
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;  // batch first
  std::string data;            // product(shape) * ItemSize(dtype) bytes

  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  // Bytes of one row (product of the non-batch dimensions times item size).
  int64_t RowBytes() const;
};

// A named tensor description; -1 marks a variable (batch) dimension.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;
};

// A tensor of zeros for `spec` with `rows` rows; any other variable
// dimension counts 1.
Tensor ZerosOf(const TensorSpec& spec, int64_t rows);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_COMMON_TENSOR_H_
