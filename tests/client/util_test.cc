// Request building, flag parsing, channel targets and report formats.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_split.h"
#include "client/channel_factory.h"
#include "client/load_generator.h"
#include "client/report.h"
#include "client/request_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace metalserve::client {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

v1::GetModelMetadataResponse ImageModelMetadata() {
  v1::GetModelMetadataResponse md;
  v1::TensorSpec* in = md.add_inputs();
  in->set_name("pixels");
  in->set_dtype(v1::DATA_TYPE_FLOAT32);
  for (int64_t d : {-1, 3, 8, 8}) in->add_shape(d);
  return md;
}

TEST(RequestBuilderTest, MetadataShapeGetsBatchDimensionReplaced) {
  const auto md = ImageModelMetadata();
  auto inputs = ResolveInputs(&md, {}, /*batch=*/5);
  ASSERT_THAT(inputs, IsOk());
  ASSERT_EQ(inputs->size(), 1u);
  EXPECT_EQ((*inputs)[0].name, "pixels");
  EXPECT_THAT((*inputs)[0].shape, ElementsAre(5, 3, 8, 8));
  auto req = BuildPredictRequest(*inputs, {}, "m");
  ASSERT_THAT(req, IsOk());
  EXPECT_EQ(req->model_name(), "m");
  EXPECT_EQ(req->inputs(0).data(), std::string(5 * 3 * 8 * 8 * 4, '\0'));
}

TEST(RequestBuilderTest, OverridesReplaceMetadataFields) {
  const auto md = ImageModelMetadata();
  InputOverrides o;
  o.name = "x";
  o.dtype = v1::DATA_TYPE_FLOAT16;
  o.shape = std::vector<int64_t>{7};
  auto inputs = ResolveInputs(&md, o, 2);
  ASSERT_THAT(inputs, IsOk());
  EXPECT_EQ((*inputs)[0].name, "x");
  EXPECT_EQ((*inputs)[0].dtype, v1::DATA_TYPE_FLOAT16);
  EXPECT_THAT((*inputs)[0].shape, ElementsAre(2, 7));
}

TEST(RequestBuilderTest, NeedsMetadataOrAllOverrides) {
  InputOverrides o;
  o.name = "x";
  EXPECT_THAT(ResolveInputs(nullptr, o, 1), StatusIs(absl::StatusCode::kInvalidArgument));
  o.dtype = v1::DATA_TYPE_INT64;
  o.shape = std::vector<int64_t>{};
  auto inputs = ResolveInputs(nullptr, o, 3);
  ASSERT_THAT(inputs, IsOk());
  EXPECT_THAT((*inputs)[0].shape, ElementsAre(3));
}

TEST(RequestBuilderTest, VariableNonBatchDimensionNeedsShapeFlag) {
  auto md = ImageModelMetadata();
  md.mutable_inputs(0)->set_shape(2, -1);
  EXPECT_THAT(ResolveInputs(&md, {}, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--shape")));
}

TEST(RequestBuilderTest, RandomFloat16IsFiniteAndSeeded) {
  InputSpec spec{"x", v1::DATA_TYPE_FLOAT16, {4, 64}};
  InputSource src{InputKind::kRandom, "", 9};
  auto a = BuildPredictRequest({spec}, src, "");
  auto b = BuildPredictRequest({spec}, src, "");
  ASSERT_THAT(a, IsOk());
  const std::string& data = a->inputs(0).data();
  ASSERT_EQ(data.size(), 4u * 64 * 2);
  EXPECT_EQ(data, b->inputs(0).data());
  EXPECT_NE(data, std::string(data.size(), '\0'));
  for (size_t i = 0; i < data.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, data.data() + i, 2);
    EXPECT_NE(h & 0x7C00, 0x7C00) << "inf/nan at " << i;
  }
}

TEST(RequestBuilderTest, FileInputOfOneRowIsRepeatedPerRow) {
  const ::metalserve::testing::TempDir dir("client_util_test_");
  const std::string path = dir.File("row.bin");
  {
    std::ofstream out(path, std::ios::binary);
    out << "ABCDEFGH";  // one row of 2 float32
  }
  InputSpec spec{"x", v1::DATA_TYPE_FLOAT32, {3, 2}};
  auto req = BuildPredictRequest({spec}, {InputKind::kFile, path, 1}, "");
  ASSERT_THAT(req, IsOk());
  EXPECT_EQ(req->inputs(0).data(), "ABCDEFGHABCDEFGHABCDEFGH");

  InputSpec wrong{"x", v1::DATA_TYPE_FLOAT32, {3, 3}};
  EXPECT_THAT(BuildPredictRequest({wrong}, {InputKind::kFile, path, 1}, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("8 bytes")));
  std::remove(path.c_str());
}

TEST(RequestBuilderTest, ParsesInputSourceDtypeAndShape) {
  EXPECT_EQ(ParseInputSource("zeros")->kind, InputKind::kZeros);
  EXPECT_EQ(ParseInputSource("random")->kind, InputKind::kRandom);
  EXPECT_EQ(ParseInputSource("@/tmp/x")->path, "/tmp/x");
  EXPECT_THAT(ParseInputSource("ones"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(*ParseDataType("fp16"), v1::DATA_TYPE_FLOAT16);
  EXPECT_EQ(*ParseDataType("int64"), v1::DATA_TYPE_INT64);
  EXPECT_THAT(*ParseShape("3,224,224"), ElementsAre(3, 224, 224));
  EXPECT_THAT(ParseShape("3,-1"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ConcurrencySweepTest, ParsesListsAndGeometricAndLinearRanges) {
  EXPECT_THAT(*ParseConcurrencySweep("8"), ElementsAre(8));
  EXPECT_THAT(*ParseConcurrencySweep("1,4,16"), ElementsAre(1, 4, 16));
  EXPECT_THAT(*ParseConcurrencySweep("1:64:x2"), ElementsAre(1, 2, 4, 8, 16, 32, 64));
  EXPECT_THAT(*ParseConcurrencySweep("4:14:+5"), ElementsAre(4, 9, 14));
  for (const char* bad : {"0", "8:4:x2", "1:8:x1", "1:8", "1:8:*2", "a"}) {
    EXPECT_THAT(ParseConcurrencySweep(bad), StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
}

TEST(RateSweepTest, ParsesOneRateOrAListAndZeroMeansClosedLoop) {
  EXPECT_THAT(*ParseRateSweep("500"), ElementsAre(500));
  EXPECT_THAT(*ParseRateSweep("50,100,2.5"), ElementsAre(50, 100, 2.5));
  EXPECT_TRUE(ParseRateSweep("0")->empty());
  EXPECT_TRUE(ParseRateSweep("")->empty());
  for (const char* bad : {"-5", "50,0", "50,,100", "abc", "inf", "nan"}) {
    EXPECT_THAT(ParseRateSweep(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--rate=")))
        << bad;
  }
}

TEST(ChannelTargetTest, SeveralAddressesBecomeOneIpv4OrIpv6Target) {
  EXPECT_EQ(*ChannelTarget({"dns:///svc:1"}), "dns:///svc:1");
  EXPECT_EQ(*ChannelTarget({"10.0.0.1:5", "10.0.0.2:6"}), "ipv4:///10.0.0.1:5,10.0.0.2:6");
  EXPECT_EQ(*ChannelTarget({"[::1]:5", "[::2]:6"}), "ipv6:///[::1]:5,[::2]:6");
  EXPECT_THAT(ChannelTarget({"a.example:5", "10.0.0.1:5"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dns:///")));
  EXPECT_THAT(ChannelTarget({}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ChannelTargetTest, MissingTlsFilesAreReported) {
  ChannelOptions o;
  o.targets = {"127.0.0.1:1"};
  o.tls_ca = "/nonexistent/ca.pem";
  EXPECT_THAT(CreateChannels(o), StatusIs(absl::StatusCode::kNotFound, HasSubstr("tls_ca")));
  o.tls_ca.clear();
  o.tls_cert = "/nonexistent/cert.pem";
  EXPECT_THAT(CreateChannels(o), StatusIs(absl::StatusCode::kInvalidArgument));
}

RunReport SampleReport() {
  RunReport r;
  r.spec.concurrency = 4;
  r.stats.ok = 3;
  r.stats.rows = 6;
  r.stats.elapsed = absl::Seconds(1);
  r.stats.errors["UNAVAILABLE"] = 1;
  for (int ms : {1, 2, 3}) r.stats.latency.Record(absl::Milliseconds(ms));
  r.stats.server_queue_us_sum = 300;
  r.stats.server_compute_us_sum = 600;
  r.stats.server_batch_rows_sum = 12;
  return r;
}

TEST(ReportTest, JsonCarriesThroughputPercentilesErrorsAndServerSplit) {
  const std::string json = FormatReports({SampleReport()}, OutputFormat::kJson);
  EXPECT_THAT(json, StartsWith("{\"runs\":[{\"mode\":\"closed\",\"concurrency\":4"));
  EXPECT_THAT(json, HasSubstr("\"ok\":3,\"errors\":{\"UNAVAILABLE\":1}"));
  EXPECT_THAT(json, HasSubstr("\"error_rate\":0.25"));
  EXPECT_THAT(json, HasSubstr("\"requests_per_s\":3.0,\"rows_per_s\":6.0"));
  EXPECT_THAT(json, HasSubstr("\"p50\":200"));  // 2 ms within 1%
  EXPECT_THAT(json, HasSubstr("\"mean\":2000.0"));
  EXPECT_THAT(json, HasSubstr("\"max\":3000.0"));
  EXPECT_THAT(json, HasSubstr("\"queue_us_mean\":100.0,\"compute_us_mean\":200.0,"
                              "\"batch_rows_mean\":4.0"));
}

TEST(ReportTest, CsvHasHeaderAndOneRowPerRun) {
  const std::string csv =
      FormatReports({SampleReport(), SampleReport()}, OutputFormat::kCsv);
  const std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0], StartsWith("mode,concurrency,rate,ok,errors,"));
  EXPECT_THAT(lines[1], StartsWith("closed,4,0,3,1,0.25,"));
  EXPECT_THAT(lines[1], ::testing::EndsWith(",UNAVAILABLE=1"));
  EXPECT_EQ(std::count(lines[0].begin(), lines[0].end(), ','),
            std::count(lines[1].begin(), lines[1].end(), ','));
}

TEST(ReportTest, TextNamesErrorsAndOutputFormatsParse) {
  const std::string text = FormatReports({SampleReport()}, OutputFormat::kText);
  EXPECT_THAT(text, HasSubstr("closed loop, concurrency 4"));
  EXPECT_THAT(text, HasSubstr("UNAVAILABLE 1"));
  EXPECT_THAT(ParseOutputFormat("yaml"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(*ParseOutputFormat("csv"), OutputFormat::kCsv);
}

TEST(ReportTest, ServerTimesAreReportedAsPercentilesAndMeans) {
  RunReport r = SampleReport();
  for (int us : {100, 200, 900}) r.stats.server_queue.Record(absl::Microseconds(us));
  for (int us : {10, 20, 30}) r.stats.server_compute.Record(absl::Microseconds(us));
  // Bucket midpoints: 200 us reads 200.2, 900 us 899.1 (within 0.4%).
  const std::string json = FormatReports({r}, OutputFormat::kJson);
  EXPECT_THAT(json, HasSubstr("\"queue_us\":{\"p50\":200.2,\"p90\":899.1,\"p99\":899.1}"));
  EXPECT_THAT(json, HasSubstr("\"compute_us\":{\"p50\":20.0,\"p90\":30.0,\"p99\":30.0}"));
  const std::string text = FormatReports({r}, OutputFormat::kText);
  EXPECT_THAT(text, HasSubstr("queue us   p50 200  p90 899  p99 899  mean 100"));
  EXPECT_THAT(text, HasSubstr("compute us p50 20  p90 30  p99 30  mean 200"));
  const std::string csv = FormatReports({r}, OutputFormat::kCsv);
  EXPECT_THAT(csv, HasSubstr("server_queue_us_p50,server_queue_us_p90,server_queue_us_p99,"));
  EXPECT_THAT(csv, HasSubstr(",200.2,899.1,899.1,20.0,30.0,30.0,UNAVAILABLE=1"));
}

TEST(ReportTest, VersionsAndRegressionsAreReportedInTextAndJson) {
  RunReport r = SampleReport();
  EXPECT_THAT(FormatReports({r}, OutputFormat::kText), Not(HasSubstr("versions")));
  EXPECT_THAT(FormatReports({r}, OutputFormat::kJson),
              HasSubstr("\"versions\":{},\"model_version_regressions\":0"));
  r.stats.versions = {{"10", 5}, {"9", 7}, {"", 1}};
  r.stats.model_version_regressions = 2;
  EXPECT_THAT(FormatReports({r}, OutputFormat::kText),
              HasSubstr("\nversions   9: 7, 10: 5, (none): 1; regressions 2\n"));
  const auto doc = nlohmann::ordered_json::parse(FormatReports({r}, OutputFormat::kJson));
  const auto& run = doc["runs"][0];
  EXPECT_EQ(run["versions"].dump(), R"({"9":7,"10":5,"":1})");
  EXPECT_EQ(run["model_version_regressions"], 2);
}

TEST(ReportTest, ErrorMessagesAreShownPerCodeAndEscapedInJson) {
  RunReport r = SampleReport();
  r.stats.error_messages["UNAVAILABLE"] = {"connect failed", "line\nbreak \"quoted\""};
  const std::string text = FormatReports({r}, OutputFormat::kText);
  EXPECT_THAT(text, HasSubstr("UNAVAILABLE: connect failed\n"));
  const std::string json = FormatReports({r}, OutputFormat::kJson);
  EXPECT_THAT(json, HasSubstr("\"error_messages\":{\"UNAVAILABLE\":[\"connect failed\","
                              "\"line\\nbreak \\\"quoted\\\"\"]}"));
}

TEST(ReportTest, JsonKeepsItsKeysInOrder) {
  const auto doc = nlohmann::ordered_json::parse(
      FormatReports({SampleReport(), SampleReport()}, OutputFormat::kJson));
  ASSERT_EQ(doc.at("runs").size(), 2u);
  std::vector<std::string> keys;
  for (const auto& [key, value] : doc["runs"][0].items()) keys.push_back(key);
  EXPECT_THAT(keys, ::testing::ElementsAre("mode", "concurrency", "rate", "ok", "errors",
                                           "error_messages", "error_rate", "elapsed_s",
                                           "requests_per_s", "rows_per_s", "latency_us",
                                           "server", "versions",
                                           "model_version_regressions"));
  keys.clear();
  for (const auto& [key, value] : doc["runs"][0]["latency_us"].items()) keys.push_back(key);
  EXPECT_THAT(keys, ::testing::ElementsAre("p50", "p90", "p95", "p99", "p99_9", "max", "min",
                                           "mean", "stddev"));
  keys.clear();
  for (const auto& [key, value] : doc["runs"][0]["server"].items()) keys.push_back(key);
  EXPECT_THAT(keys, ::testing::ElementsAre("queue_us_mean", "compute_us_mean",
                                           "batch_rows_mean", "queue_us", "compute_us"));
  EXPECT_EQ(doc["runs"][0]["errors"]["UNAVAILABLE"], 1);
}

// A server's message is bytes; the report must still be JSON (valid UTF-8).
TEST(ReportTest, JsonStaysValidWhenAnErrorMessageIsNotUtf8) {
  RunReport r = SampleReport();
  r.stats.error_messages["INTERNAL"] = {"bad byte \xff here"};
  const std::string json = FormatReports({r}, OutputFormat::kJson);
  nlohmann::json doc;
  ASSERT_NO_THROW(doc = nlohmann::json::parse(json)) << json;
  EXPECT_THAT(doc["runs"][0]["error_messages"]["INTERNAL"][0].get<std::string>(),
              ::testing::AllOf(StartsWith("bad byte "), ::testing::EndsWith(" here")));
}

TEST(ReportTest, LongErrorMessagesAreTruncated) {
  EXPECT_EQ(TruncateMessage("short"), "short");
  const std::string cut = TruncateMessage(std::string(1000, 'x'));
  EXPECT_EQ(cut.size(), kMaxMessageBytes);
  EXPECT_THAT(cut, ::testing::EndsWith("xx..."));
}

}  // namespace
}  // namespace metalserve::client
