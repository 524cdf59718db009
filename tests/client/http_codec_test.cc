// The KServe REST forms metalserve-bench --protocol=http sends and reads.
#include "client/http_codec.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace metalserve::client {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

inference::ModelInferRequest TwoRows() {
  inference::ModelInferRequest r;
  auto* in = r.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  in->add_shape(2);
  in->add_shape(2);
  const std::vector<float> v = {1, 2.5f, -3, 4};
  r.add_raw_input_contents(std::string(reinterpret_cast<const char*>(v.data()), 16));
  (*r.mutable_parameters())["priority"].set_int64_param(2);
  return r;
}

TEST(HttpCodecTest, JsonBodyCarriesDataShapeAndParameters) {
  auto body = EncodeInferBody(TwoRows(), HttpTensorFormat::kJson);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(body->header_length, -1);
  const Json j = Json::parse(body->body);
  EXPECT_EQ(j["inputs"][0]["data"], Json({1.0, 2.5, -3.0, 4.0}));
  EXPECT_EQ(j["inputs"][0]["shape"], Json({2, 2}));
  EXPECT_EQ(j["inputs"][0]["datatype"], "FP32");
  EXPECT_EQ(j["parameters"]["priority"], 2);
  EXPECT_FALSE(j["parameters"].contains("binary_data_output"));
}

TEST(HttpCodecTest, BinaryBodyAppendsRawBytesAfterTheJsonHeader) {
  const inference::ModelInferRequest r = TwoRows();
  auto body = EncodeInferBody(r, HttpTensorFormat::kBinary);
  ASSERT_TRUE(body.ok()) << body.status();
  ASSERT_GT(body->header_length, 0);
  const Json j = Json::parse(body->body.substr(0, body->header_length));
  EXPECT_EQ(j["inputs"][0]["parameters"]["binary_data_size"], 16);
  EXPECT_FALSE(j["inputs"][0].contains("data"));
  EXPECT_EQ(j["parameters"]["binary_data_output"], true);
  EXPECT_EQ(body->body.substr(body->header_length), r.raw_input_contents(0));
}

TEST(HttpCodecTest, HalfPrecisionGoesAsItsFloatValue) {
  inference::ModelInferRequest r;
  auto* in = r.add_inputs();
  in->set_datatype("FP16");
  in->add_shape(2);
  r.add_raw_input_contents(std::string("\x00\x3c\x00\xc0", 4));  // 1.0, -2.0
  auto body = EncodeInferBody(r, HttpTensorFormat::kJson);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(Json::parse(body->body)["inputs"][0]["data"], Json({1.0, -2.0}));
  in->set_datatype("BYTES");
  auto bytes = EncodeInferBody(r, HttpTensorFormat::kJson);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bytes.status().message(), HasSubstr("'BYTES'"));
}

TEST(HttpCodecTest, AnswerFiguresAndErrorsAreRead) {
  const std::string ok =
      R"({"model_version":"3","outputs":[],)"
      R"("parameters":{"queue_time_us":7,"compute_time_us":9,"batch_rows":3}})";
  CallResult r = DecodeInferAnswer(200, ok + "BINARY", static_cast<int64_t>(ok.size()));
  EXPECT_EQ(r.code, grpc::StatusCode::OK);
  EXPECT_EQ(r.model_version, "3");
  EXPECT_EQ(r.queue_us, 7);
  EXPECT_EQ(r.compute_us, 9);
  EXPECT_EQ(r.batch_rows, 3);
  r = DecodeInferAnswer(504, R"({"error":"deadline passed"})", -1);
  EXPECT_EQ(r.code, grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(r.message, "HTTP 504: deadline passed");
  r = DecodeInferAnswer(502, "<html>bad gateway</html>", -1);
  EXPECT_EQ(r.code, grpc::StatusCode::UNKNOWN);
  EXPECT_THAT(r.message, HasSubstr("HTTP 502: <html>bad gateway"));
  EXPECT_EQ(CodeOfHttpStatus(400), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(CodeOfHttpStatus(404), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(CodeOfHttpStatus(503), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CodeOfHttpStatus(500), grpc::StatusCode::INTERNAL);
}

TEST(HttpCodecTest, ModelMetadataIsReadAsTheKServeMessage) {
  auto m = ParseModelMetadata(
      R"({"name":"identity","versions":["1"],"platform":"pytorch_libtorch",
          "inputs":[{"name":"input","datatype":"FP32","shape":[-1,4]}],
          "outputs":[{"name":"output","datatype":"FP32","shape":[-1,4]}]})");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name(), "identity");
  ASSERT_EQ(m->inputs_size(), 1);
  EXPECT_EQ(m->inputs(0).shape(1), 4);
  EXPECT_EQ(m->outputs(0).name(), "output");
  EXPECT_EQ(ParseModelMetadata("{\"error\":\"x\"}").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace metalserve::client
