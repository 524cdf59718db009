#include "server/service/inflate_body.h"

#include <zlib.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "grpc/byte_buffer.h"
#include "grpc/compression.h"
#include "grpc/slice.h"
#include "grpcpp/support/slice.h"

namespace grpc::internal {
// The peer gRPC's ByteBuffer names as a friend (byte_buffer.h), defined
// here to read the compression algorithm of the core buffer.
class GrpcByteBufferPeer {
 public:
  explicit GrpcByteBufferPeer(ByteBuffer* bb) : bb_(bb) {}
  grpc_byte_buffer* c_buffer() { return bb_->c_buffer(); }
  void set_buffer(grpc_byte_buffer* b) { bb_->set_buffer(b); }  // takes ownership

 private:
  ByteBuffer* bb_;
};
}  // namespace grpc::internal

namespace metalserve {
namespace {

constexpr size_t kChunk = 256 << 10;

// Inflates `in` (zlib or gzip framing, per `window_bits`) into `out`,
// stopping once the output passes `max_bytes`.
absl::Status Inflate(const std::vector<grpc::Slice>& in, int window_bits, int64_t max_bytes,
                     const char* algorithm, std::vector<grpc::Slice>* out) {
  z_stream z{};
  if (inflateInit2(&z, window_bits) != Z_OK) return absl::InternalError("inflateInit2 failed");
  int64_t total = 0, in_bytes = 0;
  int rc = Z_OK;
  std::vector<char> chunk(kChunk);
  for (size_t i = 0; i < in.size() && rc == Z_OK; ++i) {
    z.next_in = const_cast<Bytef*>(in[i].begin());
    z.avail_in = static_cast<uInt>(in[i].size());
    in_bytes += static_cast<int64_t>(in[i].size());
    // Until this slice is used up and zlib has no output left to give.
    do {
      z.next_out = reinterpret_cast<Bytef*>(chunk.data());
      z.avail_out = static_cast<uInt>(chunk.size());
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc == Z_BUF_ERROR && z.avail_in == 0) rc = Z_OK;  // needs the next slice
      if (rc != Z_OK && rc != Z_STREAM_END) break;
      const size_t n = chunk.size() - z.avail_out;
      total += static_cast<int64_t>(n);
      if (total > max_bytes) {
        inflateEnd(&z);
        return absl::ResourceExhaustedError(absl::StrCat(
            "request inflates to more than max_message_bytes (", max_bytes, " bytes; ",
            algorithm, ", ", in_bytes, "+ compressed bytes read); refused while inflating"));
      }
      if (n > 0) out->emplace_back(chunk.data(), n);
    } while (rc == Z_OK && (z.avail_in > 0 || z.avail_out == 0));
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compressed request body (", in_bytes, " bytes, ", algorithm,
        ") does not inflate: ", z.msg != nullptr ? z.msg : "truncated"));
  }
  return absl::OkStatus();
}

}  // namespace

int CompressionOf(grpc::ByteBuffer* body) {
  grpc_byte_buffer* c = grpc::internal::GrpcByteBufferPeer(body).c_buffer();
  if (c == nullptr || c->type != GRPC_BB_RAW) return GRPC_COMPRESS_NONE;
  return c->data.raw.compression;
}

grpc::ByteBuffer CompressedBody(const std::string& compressed, int algorithm) {
  grpc_slice slice = grpc_slice_from_copied_buffer(compressed.data(), compressed.size());
  grpc_byte_buffer* c = grpc_raw_compressed_byte_buffer_create(
      &slice, 1, static_cast<grpc_compression_algorithm>(algorithm));
  grpc_slice_unref(slice);
  grpc::ByteBuffer body;
  grpc::internal::GrpcByteBufferPeer(&body).set_buffer(c);
  return body;
}

absl::Status InflateRequestBody(grpc::ByteBuffer* body, int64_t max_bytes) {
  const int algorithm = CompressionOf(body);
  if (algorithm == GRPC_COMPRESS_NONE) return absl::OkStatus();
  if (algorithm != GRPC_COMPRESS_GZIP && algorithm != GRPC_COMPRESS_DEFLATE) {
    return absl::InvalidArgumentError(
        absl::StrCat("request compressed with unsupported algorithm ", algorithm));
  }
  const bool gzip = algorithm == GRPC_COMPRESS_GZIP;
  std::vector<grpc::Slice> in;
  if (!body->Dump(&in).ok()) return absl::InternalError("cannot read the request body");
  std::vector<grpc::Slice> out;
  absl::Status s = Inflate(in, gzip ? 15 + 16 : 15, max_bytes, gzip ? "gzip" : "deflate", &out);
  body->Clear();
  if (!s.ok()) return s;
  grpc::ByteBuffer inflated(out.data(), out.size());
  body->Swap(&inflated);
  return absl::OkStatus();
}

}  // namespace metalserve
