// Helpers for the inference handlers that take the request body as raw
// bytes (grpc::ByteBuffer) instead of a parsed message. gRPC 1.51's callback
// API parses the request before the handler runs and answers a parse
// failure UNIMPLEMENTED with an empty message, which the server never sees
// to count; it also parses a request in full even when the queue has no
// room for it. With raw handlers the service checks the queue first, then
// parses, and answers both itself.
//
// Thread-safety: free functions, safe from any thread.
#ifndef METALSERVE_SERVER_SERVICE_RAW_CALL_H_
#define METALSERVE_SERVER_SERVICE_RAW_CALL_H_

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/batcher/batcher.h"

namespace metalserve {

// UNAVAILABLE "queue is full" when `batcher` has no room for even one more
// row (the answer Submit would give), so that a request can be refused
// before its body is parsed and its tensors decoded. OK otherwise; Submit
// still has the last word.
absl::Status CheckQueueRoom(const Batcher& batcher);

// Parses `body` into `out` and empties `body`, so that a queued request
// holds its bytes once (parsed), not twice; INVALID_ARGUMENT naming the
// message type and the body's size when it is not a valid serialisation.
// gRPC hands the handler a const body it never reads again: the handler
// passes it here with const_cast.
absl::Status ParseRequestBody(grpc::ByteBuffer* body, google::protobuf::Message* out);

// The index gRPC's generated code gives `method` of `service` (a full name,
// "metalserve.v1.Inference"): its place in the .proto file, read from the
// generated descriptor. Dies when either is unknown (a programming error).
int MethodIndex(absl::string_view service, absl::string_view method);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_RAW_CALL_H_
