// InflateRequestBody: compressed bodies inflated under a limit (zlib).
#include "server/service/inflate_body.h"

#include <zlib.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpc/compression.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::StatusIs;
using ::testing::HasSubstr;

// `data` compressed as gRPC does: zlib framing (deflate) or gzip framing.
std::string Compress(const std::string& data, bool gzip) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + (gzip ? 16 : 0), 8,
                         Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string Contents(const grpc::ByteBuffer& body) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(body.Dump(&slices).ok());
  std::string s;
  for (const grpc::Slice& slice : slices) s.append(slice.begin(), slice.end());
  return s;
}

TEST(InflateBodyTest, InflatesGzipAndDeflateBodiesWithinTheLimit) {
  const std::string data(1 << 20, 'x');
  for (bool gzip : {true, false}) {
    grpc::ByteBuffer body =
        CompressedBody(Compress(data, gzip), gzip ? GRPC_COMPRESS_GZIP : GRPC_COMPRESS_DEFLATE);
    EXPECT_EQ(CompressionOf(&body), gzip ? GRPC_COMPRESS_GZIP : GRPC_COMPRESS_DEFLATE);
    ASSERT_TRUE(InflateRequestBody(&body, 1 << 20).ok());
    EXPECT_EQ(CompressionOf(&body), GRPC_COMPRESS_NONE);
    EXPECT_EQ(Contents(body), data);
  }
}

TEST(InflateBodyTest, RefusesABodyThatInflatesPastTheLimitNamingIt) {
  grpc::ByteBuffer body = CompressedBody(Compress(std::string(8 << 20, '\0'), true),
                                         GRPC_COMPRESS_GZIP);
  EXPECT_THAT(InflateRequestBody(&body, 1 << 20),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("request inflates to more than max_message_bytes "
                                 "(1048576 bytes; gzip")));
  EXPECT_EQ(body.Length(), 0u);
}

TEST(InflateBodyTest, RefusesBytesThatDoNotInflateNamingTheAlgorithm) {
  grpc::ByteBuffer body = CompressedBody("not gzip at all", GRPC_COMPRESS_GZIP);
  EXPECT_THAT(InflateRequestBody(&body, 1 << 20),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("compressed request body (15 bytes, gzip) does not inflate")));
  const std::string whole = Compress("abc", false);
  grpc::ByteBuffer cut = CompressedBody(whole.substr(0, whole.size() - 2), GRPC_COMPRESS_DEFLATE);
  EXPECT_THAT(InflateRequestBody(&cut, 1 << 20),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("deflate")));
}

TEST(InflateBodyTest, LeavesAnUncompressedBodyAlone) {
  grpc::Slice slice(std::string("plain"));
  grpc::ByteBuffer body(&slice, 1);
  ASSERT_TRUE(InflateRequestBody(&body, 1).ok());  // the limit is gRPC's for these
  EXPECT_EQ(Contents(body), "plain");
}

}  // namespace
}  // namespace metalserve
