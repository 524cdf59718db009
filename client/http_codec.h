// The KServe v2 REST (Open Inference Protocol over HTTP) forms metalserve-bench
// sends and reads: an infer body as JSON tensors or with Triton's binary
// tensor extension, the answer's server-side figures, an HTTP status as the
// gRPC code of the same meaning, and the model metadata reply.
//
// Thread-safety: free functions over values; no shared state.
#ifndef METALSERVE_CLIENT_HTTP_CODEC_H_
#define METALSERVE_CLIENT_HTTP_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/call_transport.h"
#include "inference/grpc_service.pb.h"

namespace metalserve::client {

enum class HttpTensorFormat { kJson, kBinary };

// A POST body for /v2/models/{name}/infer.
struct HttpInferBody {
  std::string body;
  // The JSON header's length (Inference-Header-Content-Length) with the
  // binary extension; -1 for a JSON body.
  int64_t header_length = -1;
};

// `request` (raw_input_contents, one per input) as a REST infer body. JSON:
// every input's `data` as a flat row-major array of numbers (FP16/BF16 as
// their float values, BOOL as true/false). Binary: each input's
// `parameters.binary_data_size` and its bytes after the JSON header, and
// `binary_data_output` asked for, as tritonclient.http does. The request's
// parameters (e.g. priority) are carried over. InvalidArgument for a
// datatype JSON cannot carry here, naming it.
absl::StatusOr<HttpInferBody> EncodeInferBody(const inference::ModelInferRequest& request,
                                              HttpTensorFormat format);

// The gRPC code of an HTTP status: 200 OK, 400 INVALID_ARGUMENT, 404
// NOT_FOUND, 413 RESOURCE_EXHAUSTED, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED,
// 500 INTERNAL, anything else UNKNOWN.
grpc::StatusCode CodeOfHttpStatus(long http_status);

// One infer answer: OK with the figures of `parameters` ("queue_time_us",
// "compute_time_us", "batch_rows") and "model_version"; otherwise the code of the status and the
// body's "error" text (the start of the body when it has none), prefixed with
// the HTTP status. `header_length` is the answer's
// Inference-Header-Content-Length (-1 when absent: all of `body` is JSON).
CallResult DecodeInferAnswer(long http_status, absl::string_view body,
                             int64_t header_length);

// GET /v2/models/{name}'s body as the KServe message. InvalidArgument naming
// the parser's complaint for a body that is not such a reply.
absl::StatusOr<inference::ModelMetadataResponse> ParseModelMetadata(
    absl::string_view json);

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_HTTP_CODEC_H_
