// Conversions between the native metalserve.v1 messages the load generator
// is built around and the Open Inference Protocol (KServe v2) ones, so that
// metalserve-bench can drive any KServe v2 server.
//
// Thread-safety: free functions over values; no shared state.
#ifndef METALSERVE_CLIENT_KSERVE_CODEC_H_
#define METALSERVE_CLIENT_KSERVE_CODEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_service.pb.h"
#include "metalserve/v1/inference.pb.h"

namespace metalserve::client {

// "FP32", "BF16", ... for a native dtype; empty for UNSPECIFIED. The table
// is proto/dtype/dtype_map.h, shared with the server.
absl::string_view KServeDatatypeOf(v1::DataType dtype);

// A KServe model metadata reply as the native one (names, dtypes, shapes).
// InvalidArgument naming the tensor when a datatype has no native type.
absl::StatusOr<v1::GetModelMetadataResponse> MetadataFromKServe(
    const inference::ModelMetadataResponse& metadata);

// The same tensors as a ModelInferRequest with raw_input_contents; a
// priority other than 0 as parameters["priority"] (int64).
inference::ModelInferRequest ToModelInferRequest(const v1::PredictRequest& request);

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_KSERVE_CODEC_H_
