// The response writers (response_writer.h) against protobuf's own
// deterministic serialisation of the same fields, byte for byte: defaults
// left out, negative and ten-byte varints, several outputs, an output with
// no shape or no data, lengths that take several bytes, a response small
// enough for gRPC to keep inline in its slice; for ModelInfer also the map
// entries, a zero parameter (a set oneof is written), an empty raw content
// (a repeated element is written) and the selection of outputs. The bytes
// parse back to the message.
#include "server/service/response_writer.h"

#include <string>
#include <vector>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.pb.h"
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

// Protobuf's serialisation with map entries in key order.
std::string Deterministic(const google::protobuf::Message& m) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    EXPECT_TRUE(m.SerializeToCodedStream(&coded));
  }
  return bytes;
}

// What the server sent before the writer: the message, built and serialised.
std::string Reference(const ResponseFields& f, const std::vector<Tensor>& outputs) {
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
  return Deterministic(r);
}

// The writer's bytes are `want`'s, and both parse to the same `Message`.
template <typename Message>
void ExpectSameBytes(const grpc::ByteBuffer& buffer, const std::string& want) {
  const std::string written = Flatten(buffer);
  EXPECT_EQ(written, want);
  Message parsed, expected;
  ASSERT_TRUE(parsed.ParseFromString(written));
  ASSERT_TRUE(expected.ParseFromString(want));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, expected))
      << parsed.DebugString();
}

void ExpectSameAsProtobuf(const ResponseFields& f, const std::vector<Tensor>& outputs) {
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(WritePredictResponse(f, outputs, &buffer).ok());
  ExpectSameBytes<v1::PredictResponse>(buffer, Reference(f, outputs));
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

// What the KServe service sent before the writer (kserve_service.cc).
std::string KServeReference(const ResponseFields& f, const std::vector<Tensor>& outputs,
                            const std::vector<size_t>& selected) {
  inference::ModelInferResponse r;
  r.set_model_name(std::string(f.model_name));
  r.set_model_version(std::string(f.model_version));
  r.set_id(std::string(f.id));
  (*r.mutable_parameters())["queue_time_us"].set_int64_param(f.queue_time_us);
  (*r.mutable_parameters())["compute_time_us"].set_int64_param(f.compute_time_us);
  (*r.mutable_parameters())["batch_rows"].set_int64_param(f.batch_rows);
  for (size_t s : selected) {
    const Tensor& o = outputs[s];
    auto* t = r.add_outputs();
    t->set_name(o.name);
    t->set_datatype(std::string(KServeDatatype(o.dtype)));
    for (int64_t d : o.shape) t->add_shape(d);
    *r.add_raw_output_contents() = o.data;
  }
  return Deterministic(r);
}

void ExpectSameAsKServe(const ResponseFields& f, const std::vector<Tensor>& outputs,
                        const std::vector<size_t>& selected) {
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(WriteModelInferResponse(f, outputs, selected, &buffer).ok());
  ExpectSameBytes<inference::ModelInferResponse>(buffer, KServeReference(f, outputs, selected));
}

TEST(ModelInferResponseTest, AsTheServerAnswersIt) {
  ExpectSameAsKServe({.model_name = "identity", .model_version = "1", .id = "req-7",
                      .queue_time_us = 3, .compute_time_us = 17, .batch_rows = 1},
                     {Output("output", DType::kFloat32, {1, 4}, std::string(16, '\x7f'))}, {0});
}

TEST(ModelInferResponseTest, ZeroParametersAndEmptyContentsAreWritten) {
  // A set oneof member is written when zero; each raw_output_contents
  // element is written when empty; an absent id and version are left out.
  ExpectSameAsKServe({.model_name = "m"}, {Output("o", DType::kBool, {0}, "")}, {0});
  // An output with no name, datatype or shape is still an (empty) entry.
  ExpectSameAsKServe({}, {Output("", DType::kInvalid, {}, "")}, {0});
  ExpectSameAsKServe({}, {}, {});
}

TEST(ModelInferResponseTest, WritesTheSelectedOutputsInTheirOrder) {
  const std::vector<Tensor> outputs = {
      Output("logits", DType::kFloat32, {2, 4}, std::string(32, 'a')),
      Output("index", DType::kInt64, {2, 1}, std::string(16, 'b')),
      Output("half", DType::kFloat16, {2, 3}, std::string(12, 'c'))};
  ExpectSameAsKServe({.model_name = "m", .batch_rows = 2}, outputs, {1});
  ExpectSameAsKServe({.model_name = "m", .batch_rows = 2}, outputs, {2, 0});
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(WriteModelInferResponse({}, outputs, {1}, &buffer).ok());
  inference::ModelInferResponse r;
  ASSERT_TRUE(r.ParseFromString(Flatten(buffer)));
  ASSERT_EQ(r.outputs_size(), 1);
  EXPECT_EQ(r.outputs(0).name(), "index");
  EXPECT_EQ(r.outputs(0).datatype(), "INT64");
  ASSERT_EQ(r.raw_output_contents_size(), 1);
  EXPECT_EQ(r.raw_output_contents(0), std::string(16, 'b'));
}

TEST(ModelInferResponseTest, NegativeLargeAndLongValues) {
  std::vector<Tensor> outputs;
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64,
                  DType::kInt64, DType::kInt32, DType::kUInt8, DType::kInt8, DType::kBool}) {
    outputs.push_back(Output(std::string(130, 'o'), d, {-1, 128, int64_t{1} << 40}, "xy"));
  }
  outputs.push_back(Output("big", DType::kUInt8, {1, 1 << 20}, std::string(1 << 20, '\x02')));
  std::vector<size_t> all(outputs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  ExpectSameAsKServe({.model_name = std::string(127, 'n'), .model_version = "2026-12-05",
                      .id = std::string(300, 'i'), .queue_time_us = -5,
                      .compute_time_us = int64_t{1} << 35, .batch_rows = 256},
                     outputs, all);
}

}  // namespace
}  // namespace metalserve
