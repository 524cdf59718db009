// Writes a native PredictResponse's wire format straight into one gRPC
// slice, without building the message. Building it cost every answered
// Predict about eight allocations (the output Tensor message, its name,
// shape and data, the model's strings) and their frees, then a size pass and
// a write pass, for bytes that are plain to write: the server's own
// instruction count per [1,4] request fell by the figure in
// docs/performance.md (issue 20). The bytes are exactly what
// PredictResponse::SerializeToString gives for the same fields (fields in
// number order, proto3 defaults left out, shapes packed), which the test
// checks field by field.
//
// Thread-safety: a free function, safe from any thread.
#ifndef METALSERVE_SERVER_SERVICE_PREDICT_RESPONSE_H_
#define METALSERVE_SERVER_SERVICE_PREDICT_RESPONSE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"
#include "grpcpp/support/byte_buffer.h"

namespace metalserve {

// A PredictResponse's fields other than its outputs.
struct PredictResponseFields {
  absl::string_view model_name;
  absl::string_view model_version;
  absl::string_view device;
  int64_t queue_time_us = 0;
  int64_t compute_time_us = 0;
  int64_t batch_rows = 0;
};

// Replaces `out` with the serialised response; INTERNAL when it would pass
// protobuf's 2 GiB limit (the message could not be parsed by any client).
absl::Status WritePredictResponse(const PredictResponseFields& fields,
                                  const std::vector<Tensor>& outputs, grpc::ByteBuffer* out);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_PREDICT_RESPONSE_H_
