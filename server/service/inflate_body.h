// Inflating compressed request bodies under a size limit.
//
// gRPC 1.51 inflates a compressed message in full before it compares it
// with the receive limit, so one small gzip message can take a thousand
// times its size in memory. With --accept_compression the server turns
// gRPC's per-message decompression off (GRPC_ARG_ENABLE_PER_MESSAGE_
// DECOMPRESSION = 0): a handler that takes its body raw (Predict,
// ModelInfer) then receives the compressed bytes, marked with their
// algorithm in the grpc_byte_buffer, and inflates them here, stopping as
// soon as the output passes the limit. gRPC's byte buffer reader does not
// inflate in 1.51, so a method still parsed by gRPC's own parser sees the
// compressed bytes and fails to parse them: compression is refused there,
// never inflated.
//
// Thread-safety: free functions, safe from any thread.
#ifndef METALSERVE_SERVER_SERVICE_INFLATE_BODY_H_
#define METALSERVE_SERVER_SERVICE_INFLATE_BODY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"

namespace metalserve {

// When `body` is gzip- or deflate-compressed, replaces it with its inflated
// bytes. RESOURCE_EXHAUSTED naming the limit when they would pass
// `max_bytes` (inflation stops there: at most max_bytes plus one chunk is
// ever held); INVALID_ARGUMENT naming the algorithm and size when the bytes
// do not inflate. An uncompressed body is left alone (OK).
absl::Status InflateRequestBody(grpc::ByteBuffer* body, int64_t max_bytes);

// The algorithm `body` is compressed with (GRPC_COMPRESS_NONE when none).
int CompressionOf(grpc::ByteBuffer* body);

// A body of `compressed` bytes marked as compressed with `algorithm` (a
// grpc_compression_algorithm), as gRPC hands one to a handler when its
// per-message decompression is off. For tests.
grpc::ByteBuffer CompressedBody(const std::string& compressed, int algorithm);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_INFLATE_BODY_H_
