// The one place where absl::Status becomes grpc::Status, and the one helper
// that bounds client-supplied text inside status messages.
//
// Why bounded: the status message travels in the grpc-message trailer, and a
// client's HTTP/2 stack refuses trailers above its metadata limit (8 KiB by
// default). A handler that echoed a 16 KB model name back made the client
// see RESOURCE_EXHAUSTED instead of NOT_FOUND, and broke other calls on the
// same connection. Every handler that names a client value in a message
// passes it through ClientText(); ToGrpcStatus() caps the whole message as a
// backstop.
//
// Thread-safety: pure functions.
#ifndef METALSERVE_SERVER_SERVICE_STATUS_UTIL_H_
#define METALSERVE_SERVER_SERVICE_STATUS_UTIL_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace metalserve {

// Longest client-supplied string quoted unchanged in a status message.
inline constexpr size_t kMaxClientTextBytes = 256;
// Longest status message sent to a client (before gRPC percent-encodes it,
// which at most triples it): well under the default 8 KiB metadata limit.
inline constexpr size_t kMaxStatusMessageBytes = 2048;

// `text` unchanged when it has at most `limit` bytes; otherwise its first
// bytes (cut back to a UTF-8 character boundary) followed by
// "...(truncated, N bytes)" with N the original length.
std::string Truncated(absl::string_view text, size_t limit);

// Client-supplied text (model name, tensor names, datatype strings, ...) as
// quoted in a status message: Truncated(text, kMaxClientTextBytes).
std::string ClientText(absl::string_view text);

// The gRPC status of `status`, its message bounded by kMaxStatusMessageBytes.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::StatusCode FromGrpcCode(grpc::StatusCode code);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_STATUS_UTIL_H_
