// The PredictResponse writer (predict_response.h) against protobuf's own
// serialisation of the same fields: byte for byte, for defaults left out,
// negative and ten-byte varints, several outputs, an output with no shape or
// no data, bytes whose length prefix takes several bytes, and a response
// small enough for gRPC to keep inline in its slice; and the bytes parse
// back to the message.
#include "server/service/predict_response.h"

#include <string>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "metalserve/v1/inference.pb.h"
#include "proto/dtype/dtype_map.h"

namespace metalserve {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// What the server sent before the writer: the message, built and serialised.
std::string Reference(const PredictResponseFields& f, const std::vector<Tensor>& outputs) {
  v1::PredictResponse r;
  r.set_model_name(std::string(f.model_name));
  r.set_model_version(std::string(f.model_version));
  r.set_device(std::string(f.device));
  for (const Tensor& o : outputs) {
    v1::Tensor* t = r.add_outputs();
    t->set_name(o.name);
    t->set_dtype(ProtoDataType(o.dtype));
    for (int64_t d : o.shape) t->add_shape(d);
    t->set_data(o.data);
  }
  r.set_queue_time_us(f.queue_time_us);
  r.set_compute_time_us(f.compute_time_us);
  r.set_batch_rows(f.batch_rows);
  std::string bytes;
  EXPECT_TRUE(r.SerializeToString(&bytes));
  return bytes;
}

void ExpectSameAsProtobuf(const PredictResponseFields& f, const std::vector<Tensor>& outputs) {
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(WritePredictResponse(f, outputs, &buffer).ok());
  const std::string written = Flatten(buffer);
  const std::string want = Reference(f, outputs);
  EXPECT_EQ(written, want);
  v1::PredictResponse parsed, expected;
  ASSERT_TRUE(parsed.ParseFromString(written));
  ASSERT_TRUE(expected.ParseFromString(want));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, expected))
      << parsed.DebugString();
}

Tensor Output(std::string name, DType dtype, std::vector<int64_t> shape, std::string data) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return t;
}

TEST(PredictResponseTest, OneOutputAsTheServerAnswersIt) {
  ExpectSameAsProtobuf({.model_name = "identity", .model_version = "1", .device = "cpu",
                        .queue_time_us = 3, .compute_time_us = 17, .batch_rows = 1},
                       {Output("output", DType::kFloat32, {1, 4}, std::string(16, '\x7f'))});
}

TEST(PredictResponseTest, DefaultsAreLeftOutAsProtobufDoes) {
  // Empty strings, zero times and rows, an output with no name, an invalid
  // (0) dtype, no shape and no data: only the empty output message remains.
  ExpectSameAsProtobuf({}, {Output("", DType::kInvalid, {}, "")});
  ExpectSameAsProtobuf({}, {});
  // A tiny response that gRPC keeps inline in the slice.
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(WritePredictResponse({.batch_rows = 1}, {}, &buffer).ok());
  EXPECT_EQ(Flatten(buffer), std::string("\x38\x01", 2));
}

TEST(PredictResponseTest, NegativeAndLargeValuesTakeProtobufsVarints) {
  // -1 dimensions and negative times are ten-byte varints; large values
  // several bytes; every dtype's enum value.
  std::vector<Tensor> outputs;
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64,
                  DType::kInt64, DType::kInt32, DType::kUInt8, DType::kInt8, DType::kBool}) {
    outputs.push_back(Output("o", d, {-1, 0, 127, 128, 16384, int64_t{1} << 40}, "xy"));
  }
  ExpectSameAsProtobuf({.model_name = "m", .model_version = "2026-12-05", .device = "cuda:0",
                        .queue_time_us = -5, .compute_time_us = int64_t{1} << 35,
                        .batch_rows = 256},
                       outputs);
}

TEST(PredictResponseTest, LongFieldsTakeMultiByteLengths) {
  // 127 and 128 bytes straddle the one-byte length prefix; 1 MiB of data
  // takes three bytes of length and the output message's own prefix too.
  ExpectSameAsProtobuf({.model_name = std::string(127, 'n'), .device = std::string(128, 'd')},
                       {Output(std::string(200, 'o'), DType::kUInt8, {1, 1 << 20},
                               std::string(1 << 20, '\x01')),
                        Output("probs", DType::kFloat32, {2, 3}, std::string(24, '\0')),
                        Output("top", DType::kInt64, {2, 1}, std::string(16, '\xff'))});
}

TEST(PredictResponseTest, ReplacesWhatTheBufferHeld) {
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(WritePredictResponse({.model_name = "first"}, {}, &buffer).ok());
  ASSERT_TRUE(WritePredictResponse({.model_name = "m"}, {}, &buffer).ok());
  EXPECT_EQ(Flatten(buffer), std::string("\x0a\x01m", 3));
}

}  // namespace
}  // namespace metalserve
