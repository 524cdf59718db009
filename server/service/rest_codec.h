// The Open Inference Protocol's REST infer body <-> the KServe gRPC messages
// the gRPC path already decodes and validates (kserve_codec.h), so that the
// REST and gRPC front ends share every rule and every error message past
// the body's own syntax.
//
// Request body: JSON, optionally followed by Triton's binary tensor
// extension (the JSON part's length in the Inference-Header-Content-Length
// header; inputs with parameters.binary_data_size take their bytes from the
// rest of the body, in the order of `inputs`). Inputs without binary data
// carry `data`: a flat row-major array or arrays nested to the shape, of
// numbers (booleans for BOOL), converted to the datatype's little-endian
// bytes (FP16 and BF16 from JSON numbers too). Outputs are answered as JSON
// `data` arrays, or as binary data when the output's parameters.binary_data
// or the request's parameters.binary_data_output is true.
//
// Free functions with no state: thread-safe. Nothing keeps a pointer past
// the call.
#ifndef METALSERVE_SERVER_SERVICE_REST_CODEC_H_
#define METALSERVE_SERVER_SERVICE_REST_CODEC_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_service.pb.h"
#include "common/tensor.h"
#include "server/service/response_fields.h"

namespace metalserve {

// The header that gives the JSON part's length in a binary-extension body.
inline constexpr char kInferenceHeaderContentLength[] =
    "Inference-Header-Content-Length";

// A decoded REST infer request: the equivalent gRPC message (inputs as
// raw_input_contents, outputs by name) and how each output is to be sent.
struct RestInferRequest {
  inference::ModelInferRequest request;
  // Parallel to request.outputs(): true to send that output as binary data.
  std::vector<bool> output_binary;
  // For outputs the request does not name: the request's binary_data_output.
  bool default_binary = false;
};

// Decodes `body` for the model `model_name`/`model_version` of the URL.
// `header_length`: the Inference-Header-Content-Length value (nullopt when
// the header is absent: the whole body is JSON). INVALID_ARGUMENT naming the
// field and value for malformed JSON, a header length beyond the body, a
// field of the wrong type, a `data` array whose values do not fit the
// datatype or whose count differs from the shape, binary data sizes that do
// not add up to the binary part, or an input with both or neither of data
// and binary_data_size. An unknown datatype (BYTES included) is left for
// DecodeKServeInputs to refuse with the gRPC path's message.
absl::StatusOr<RestInferRequest> DecodeRestInferRequest(
    absl::string_view body, std::optional<size_t> header_length,
    absl::string_view model_name, absl::string_view model_version);

// An encoded response body; `json_length` is its JSON part (the
// Inference-Header-Content-Length to send when binary data follows).
struct RestBody {
  std::string body;
  size_t json_length = 0;
  bool has_binary = false;
};

// Encodes `fields` (model name and version, the id when not empty, and the
// times and rows as the "parameters" object, as ModelInfer answers them) and
// the outputs picked by `selected` (indices into `outputs`) into a response
// body; `binary[i]` says how to send selected[i]. `fields.device` is not
// sent (KServe's answer has no such field).
RestBody EncodeRestInferResponse(const ResponseFields& fields,
                                 const std::vector<Tensor>& outputs,
                                 const std::vector<size_t>& selected,
                                 const std::vector<bool>& binary);

// {"error": message}.
std::string RestErrorBody(absl::string_view message);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_REST_CODEC_H_
