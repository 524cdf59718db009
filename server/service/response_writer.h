// Writes the inference responses' wire format (a native PredictResponse, a
// KServe ModelInferResponse) straight into one gRPC slice, without building
// the message. Building it cost every answered call about eight allocations
// (Predict: the output Tensor message, its name, shape and data, the model's
// strings; ModelInfer more, for its three parameters map entries) and their
// frees, then a size pass and a write pass, for bytes that are plain to
// write (issue 20; the before/after figures are in docs/performance.md).
//
// The bytes are exactly what protobuf's deterministic serialisation gives
// for the same fields (fields in number order, proto3 defaults left out,
// shapes packed, map entries in key order), which the tests check byte for
// byte; any order of map entries parses the same, so clients see no change.
//
// Thread-safety: free functions, safe from any thread.
#ifndef METALSERVE_SERVER_SERVICE_RESPONSE_WRITER_H_
#define METALSERVE_SERVER_SERVICE_RESPONSE_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/runtime/runner.h"
#include "server/service/infer_task.h"
#include "server/service/response_fields.h"

namespace metalserve {

// The fields both services answer with: the serving model's name, version
// and device, and the batch's times and rows (the caller adds KServe's id).
ResponseFields ServedResponseFields(const ModelInfo& info, const RunStats& stats);

// Replaces `out` with the serialised metalserve.v1.PredictResponse; INTERNAL
// when it would pass protobuf's 2 GiB limit (no client could parse it).
absl::Status WritePredictResponse(const ResponseFields& fields,
                                  const std::vector<Tensor>& outputs, grpc::ByteBuffer* out);

// Replaces `out` with the serialised inference.ModelInferResponse: the
// outputs named by `selected` (indexes into `outputs`, in that order), each
// as an outputs[] entry (name, KServe datatype, shape) and its bytes in
// raw_output_contents; INTERNAL past 2 GiB.
absl::Status WriteModelInferResponse(const ResponseFields& fields,
                                     const std::vector<Tensor>& outputs,
                                     const std::vector<size_t>& selected,
                                     grpc::ByteBuffer* out);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_RESPONSE_WRITER_H_
