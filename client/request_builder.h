// Builds the PredictRequest a load run sends, from the model's metadata or
// from explicit overrides.
//
// Input shapes: the batch (first) dimension is always replaced by the run's
// --batch. `InputOverrides::shape` is the per-row shape (batch excluded).
// Input data: zeros, seeded random values of the dtype, or the raw bytes of
// a file (one row, repeated for every row, or exactly batch rows).
//
// Thread-safety: free functions over values; no shared state.
#ifndef METALSERVE_CLIENT_REQUEST_BUILDER_H_
#define METALSERVE_CLIENT_REQUEST_BUILDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "metalserve/v1/inference.pb.h"

namespace metalserve::client {

// One input tensor to send, batch dimension included.
struct InputSpec {
  std::string name;
  v1::DataType dtype = v1::DATA_TYPE_UNSPECIFIED;
  std::vector<int64_t> shape;
};

// Values given on the command line; unset fields come from metadata.
struct InputOverrides {
  std::optional<std::string> name;
  std::optional<v1::DataType> dtype;
  // Per-row shape, batch dimension excluded.
  std::optional<std::vector<int64_t>> shape;
};

enum class InputKind { kZeros, kRandom, kFile };

struct InputSource {
  InputKind kind = InputKind::kZeros;
  std::string path;    // kFile only
  uint64_t seed = 1;   // kRandom only
};

// Parses "zeros", "random" or "@path".
absl::StatusOr<InputSource> ParseInputSource(absl::string_view text);
// Parses "float32", "fp16", "int64", ... into the proto enum.
absl::StatusOr<v1::DataType> ParseDataType(absl::string_view text);
// Parses "3,224,224" (a per-row shape; "" is a scalar row).
absl::StatusOr<std::vector<int64_t>> ParseShape(absl::string_view text);
// Bytes per element of `dtype`; 0 for UNSPECIFIED.
int64_t DataTypeSize(v1::DataType dtype);

// The inputs to send. `metadata` may be null when the overrides name, type
// and shape a single input; otherwise every metadata input is sent, with
// the overrides applied to the first. InvalidArgument when a non-batch
// dimension is variable and no --shape fixes it, or batch < 1.
absl::StatusOr<std::vector<InputSpec>> ResolveInputs(
    const v1::GetModelMetadataResponse* metadata,
    const InputOverrides& overrides, int64_t batch);

// Fills a request for `inputs` from `source`. kFile needs exactly one input.
absl::StatusOr<v1::PredictRequest> BuildPredictRequest(
    const std::vector<InputSpec>& inputs, const InputSource& source,
    absl::string_view model_name);

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_REQUEST_BUILDER_H_
