// --dump_outputs' JSON: parsed back with the library that writes it.
#include "client/output_dump.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"

namespace metalserve::client {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::HasSubstr;

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST(OutputDumpTest, NamesThatNeedEscapingStayValidJson) {
  const std::string name = "out\"put\\1\n\t";
  std::string json;
  ASSERT_THAT(OutputsJson({{name, "INT32", {2}, Bytes<int32_t>({7, -3})}}, &json), IsOk());
  ASSERT_TRUE(nlohmann::json::accept(json)) << json;
  const auto doc = nlohmann::json::parse(json);
  EXPECT_EQ(doc["outputs"][0]["name"], name);
  EXPECT_EQ(doc["outputs"][0]["data"], nlohmann::json::parse("[7,-3]"));
}

TEST(OutputDumpTest, FloatsKeepNineDigitsAndNonFiniteValuesAreStrings) {
  const float inf = std::numeric_limits<float>::infinity();
  std::string json;
  ASSERT_THAT(OutputsJson({{"logits", "FP32", {1, 6},
                            Bytes<float>({0.1f, -2.5f, 6.0f, NAN, inf, -inf})}},
                          &json),
              IsOk());
  EXPECT_EQ(json,
            "{\"outputs\":[{\"name\":\"logits\",\"datatype\":\"FP32\",\"shape\":[1,6],"
            "\"data\":[0.100000001,-2.5,6,\"NaN\",\"Infinity\",\"-Infinity\"]}]}\n");
}

TEST(OutputDumpTest, DoublesAreWrittenInTheirShortestRoundTripForm) {
  std::string json;
  ASSERT_THAT(OutputsJson({{"x", "FP64", {3}, Bytes<double>({0.1, 6.0, 1e20})}}, &json),
              IsOk());
  EXPECT_THAT(json, HasSubstr("\"data\":[0.1,6,1e+20]"));
}

TEST(OutputDumpTest, EveryDatatypeDecodesToItsValues) {
  std::string json;
  ASSERT_THAT(
      OutputsJson({{"f64", "FP64", {1}, Bytes<double>({0.1})},
                   {"f16", "FP16", {2}, Bytes<uint16_t>({0x3c00, 0xc000})},  // 1, -2
                   {"bf16", "BF16", {1}, Bytes<uint16_t>({0x3fc0})},         // 1.5
                   {"i64", "INT64", {1}, Bytes<int64_t>({(int64_t{1} << 62) + 1})},
                   {"i8", "INT8", {1}, Bytes<int8_t>({-3})},
                   {"u8", "UINT8", {1}, Bytes<uint8_t>({200})},
                   {"b", "BOOL", {2}, Bytes<uint8_t>({0, 1})}},
                  &json),
      IsOk());
  const auto out = nlohmann::json::parse(json)["outputs"];
  ASSERT_EQ(out.size(), 7u);
  EXPECT_EQ(out[0]["data"][0].get<double>(), 0.1);
  EXPECT_EQ(out[1]["data"], nlohmann::json::parse("[1,-2]"));
  EXPECT_EQ(out[2]["data"][0].get<double>(), 1.5);
  EXPECT_EQ(out[3]["data"][0].get<int64_t>(), (int64_t{1} << 62) + 1);
  EXPECT_EQ(out[4]["data"][0].get<int>(), -3);
  EXPECT_EQ(out[5]["data"][0].get<int>(), 200);
  EXPECT_EQ(out[6]["data"], nlohmann::json::parse("[false,true]"));
  EXPECT_EQ(out[3]["shape"], nlohmann::json::parse("[1]"));
}

TEST(OutputDumpTest, BytesThatDoNotFitTheDatatypeAreAnErrorNamingTheOutput) {
  std::string json;
  EXPECT_THAT(OutputsJson({{"logits", "FP32", {1}, std::string(6, '\0')}}, &json),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output 'logits': 6 bytes of datatype 'FP32'")));
  EXPECT_THAT(OutputsJson({{"s", "BYTES", {1}, "abc"}}, &json),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'BYTES'")));
}

}  // namespace
}  // namespace metalserve::client
