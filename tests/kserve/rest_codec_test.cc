// The REST body codec (server/service/rest_codec.h): every datatype the
// gRPC path accepts from JSON `data`, nested and flat, the binary tensor
// extension both ways, and the refusals naming field and value.
#include "server/service/rest_codec.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace metalserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

Json OneInput(const std::string& datatype, const Json& shape, const Json& data) {
  return {{"inputs", {{{"name", "x"}, {"shape", shape}, {"datatype", datatype},
                       {"data", data}}}}};
}

template <typename T>
std::string Bytes(std::vector<T> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string Decoded(const Json& body) {
  auto r = DecodeRestInferRequest(body.dump(), std::nullopt, "m", "");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->request.raw_input_contents(0) : "";
}

absl::Status DecodeError(const Json& body) {
  return DecodeRestInferRequest(body.dump(), std::nullopt, "m", "").status();
}

TEST(RestCodecTest, EveryDatatypeConvertsFromJsonData) {
  EXPECT_EQ(Decoded(OneInput("FP32", {2}, {1.5, -2})), Bytes<float>({1.5f, -2.0f}));
  EXPECT_EQ(Decoded(OneInput("FP64", {2}, {1.5, 1e300})), Bytes<double>({1.5, 1e300}));
  EXPECT_EQ(Decoded(OneInput("INT64", {2}, {-5, INT64_MAX})), Bytes<int64_t>({-5, INT64_MAX}));
  EXPECT_EQ(Decoded(OneInput("INT32", {2}, {-5, 7})), Bytes<int32_t>({-5, 7}));
  EXPECT_EQ(Decoded(OneInput("INT8", {2}, {-128, 127})), Bytes<int8_t>({-128, 127}));
  EXPECT_EQ(Decoded(OneInput("UINT8", {2}, {0, 255})), Bytes<uint8_t>({0, 255}));
  EXPECT_EQ(Decoded(OneInput("BOOL", {2}, {true, false})), Bytes<uint8_t>({1, 0}));
  // 1.5 = 0x3E00 in IEEE half, 0x3FC0 in bfloat16.
  EXPECT_EQ(Decoded(OneInput("FP16", {2}, {1.5, -2})), Bytes<uint16_t>({0x3E00, 0xC000}));
  EXPECT_EQ(Decoded(OneInput("BF16", {2}, {1.5, -2})), Bytes<uint16_t>({0x3FC0, 0xC000}));
}

TEST(RestCodecTest, NestedDataIsFlattenedRowMajor) {
  EXPECT_EQ(Decoded(OneInput("INT32", {2, 2}, {{1, 2}, {3, 4}})),
            Bytes<int32_t>({1, 2, 3, 4}));
}

TEST(RestCodecTest, ValuesThatDoNotFitAreRefusedNamingTheElement) {
  absl::Status s = DecodeError(OneInput("INT8", {2}, {1, 200}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("inputs[0] ('x').data[1] = 200 is out of range"));
  EXPECT_THAT(DecodeError(OneInput("INT32", {1}, {1.5})).message(),
              HasSubstr("data[0] = 1.5 is not an integer"));
  EXPECT_THAT(DecodeError(OneInput("BOOL", {1}, {1})).message(),
              HasSubstr("data[0] = 1 is not a boolean"));
  EXPECT_THAT(DecodeError(OneInput("FP32", {3}, {1, 2})).message(),
              HasSubstr("data has 2 values; shape [3] needs 3"));
  EXPECT_THAT(DecodeError(OneInput("FP32", {1}, "abc")).message(),
              HasSubstr("inputs[0] ('x').data must be an array"));
  EXPECT_THAT(DecodeError(Json{{"inputs", {{{"name", "x"}}}}}).message(),
              HasSubstr("inputs[0].datatype must be a string"));
  EXPECT_THAT(DecodeError(Json{{"inputs", 3}}).message(), HasSubstr("inputs must be an array"));
  Json deep = Json::array({1});
  for (int i = 0; i < 40; ++i) deep = Json::array({deep});
  EXPECT_THAT(DecodeError(OneInput("FP32", {1}, deep)).message(),
              HasSubstr("nested deeper than"));
}

TEST(RestCodecTest, BinaryInputsTakeTheirBytesInOrder) {
  Json header = {{"inputs", {{{"name", "a"}, {"shape", {1}}, {"datatype", "INT32"},
                              {"parameters", {{"binary_data_size", 4}}}},
                             {{"name", "b"}, {"shape", {1}}, {"datatype", "INT32"},
                              {"data", {9}}},
                             {{"name", "c"}, {"shape", {2}}, {"datatype", "INT8"},
                              {"parameters", {{"binary_data_size", 2}}}}}}};
  const std::string json = header.dump();
  auto r = DecodeRestInferRequest(json + Bytes<int32_t>({7}) + Bytes<int8_t>({1, 2}),
                                  json.size(), "m", "1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.model_version(), "1");
  EXPECT_EQ(r->request.raw_input_contents(0), Bytes<int32_t>({7}));
  EXPECT_EQ(r->request.raw_input_contents(1), Bytes<int32_t>({9}));
  EXPECT_EQ(r->request.raw_input_contents(2), Bytes<int8_t>({1, 2}));
  // One byte too many, one too few.
  EXPECT_THAT(DecodeRestInferRequest(json + std::string(7, 'x'), json.size(), "m", "")
                  .status().message(),
              HasSubstr("7 bytes of binary data after the JSON header but the inputs' "
                        "binary_data_size add up to 6"));
  EXPECT_THAT(DecodeRestInferRequest(json + std::string(5, 'x'), json.size(), "m", "")
                  .status().message(),
              HasSubstr("inputs[2] ('c').parameters.binary_data_size = 2 but only 1 bytes"));
}

TEST(RestCodecTest, OutputsAreJsonOrBinaryAsAsked) {
  Json body = OneInput("FP32", {1}, {1});
  body["outputs"] = {{{"name", "y"}, {"parameters", {{"binary_data", true}}}}, {{"name", "z"}}};
  body["parameters"] = {{"binary_data_output", false}};
  auto r = DecodeRestInferRequest(body.dump(), std::nullopt, "m", "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output_binary, std::vector<bool>({true, false}));

  std::vector<Tensor> outputs(2);
  outputs[0] = {"y", DType::kFloat16, {1, 2}, Bytes<uint16_t>({0x3E00, 0xC000})};
  outputs[1] = {"z", DType::kBool, {2}, Bytes<uint8_t>({1, 0})};
  const ResponseFields fields{.model_name = "m", .model_version = "3", .id = "req-9",
                              .queue_time_us = 5, .compute_time_us = 7, .batch_rows = 2};
  RestBody out = EncodeRestInferResponse(fields, outputs, {1, 0}, {false, true});
  ASSERT_TRUE(out.has_binary);
  Json j = Json::parse(out.body.substr(0, out.json_length));
  EXPECT_EQ(j["model_name"], "m");
  EXPECT_EQ(j["model_version"], "3");
  EXPECT_EQ(j["id"], "req-9");
  EXPECT_EQ(j["parameters"], Json({{"batch_rows", 2}, {"compute_time_us", 7},
                                   {"queue_time_us", 5}}));
  EXPECT_EQ(j["outputs"][0]["data"], Json({true, false}));
  EXPECT_EQ(j["outputs"][1]["parameters"]["binary_data_size"], 4);
  EXPECT_EQ(out.body.substr(out.json_length), outputs[0].data);
  out = EncodeRestInferResponse({.model_name = "m"}, outputs, {0}, {false});
  EXPECT_EQ(Json::parse(out.body)["outputs"][0]["data"], Json({1.5, -2.0}));
  EXPECT_FALSE(Json::parse(out.body).contains("id")) << "an empty id is not sent";
}

}  // namespace
}  // namespace metalserve
