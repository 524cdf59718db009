// metalserve-bench end to end: the binary against an in-process fake server
// on 127.0.0.1, bounded by --requests and --deadline.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/fake_inference_server.h"
#include "tests/testing/subprocess.h"

namespace metalserve::client {
namespace {

using ::metalserve::testing::FakeInferenceServer;
using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Outcome = ::metalserve::testing::CommandOutcome;

Outcome RunBench(const std::string& args) {
  return ::metalserve::testing::RunCommand(
      absl::StrCat(METALSERVE_BENCH_BINARY, " ", args, " --progress=off"));
}

TEST(MetalserveBenchCliTest, TakesShapeFromMetadataAndPrintsJson) {
  auto server = FakeInferenceServer::Start({.delay = absl::Milliseconds(1)});
  const Outcome o = RunBench(absl::StrCat(
      "--target=", server->address(),
      " --requests=40 --concurrency=1,4 --batch=3 --input=random --output=json"
      " --deadline=5s"));
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("{\"runs\":[{\"mode\":\"closed\",\"concurrency\":1,"));
  EXPECT_THAT(o.out, HasSubstr("\"mode\":\"closed\",\"concurrency\":4,"));
  EXPECT_THAT(o.out, HasSubstr("\"ok\":40,\"errors\":{}"));
  EXPECT_THAT(o.out, HasSubstr("\"batch_rows_mean\":3.0"));
  EXPECT_EQ(server->received(), 80);
  // Metadata says [-1, 4]; the batch dimension became --batch.
  EXPECT_THAT(server->last_input_shape(), ElementsAre(3, 4));
}

TEST(MetalserveBenchCliTest, ExitsWithTwoWhenErrorRateExceedsLimit) {
  auto server = FakeInferenceServer::Start(
      {.delay = absl::ZeroDuration(), .fail_every = 2});
  const std::string common = absl::StrCat(
      "--target=", server->address(),
      " --requests=20 --input_name=input --dtype=float32 --shape=4 --output=csv");
  const Outcome over = RunBench(common + " --max_error_rate=0.1");
  EXPECT_EQ(over.exit_code, 2) << over.out;
  EXPECT_THAT(over.out, HasSubstr("INVALID_ARGUMENT=10"));
  const Outcome under = RunBench(common + " --max_error_rate=0.5");
  EXPECT_EQ(under.exit_code, 0) << under.out;
}

TEST(MetalserveBenchCliTest, SweepsRequestRatesGivenAsAList) {
  auto server = FakeInferenceServer::Start({.delay = absl::Milliseconds(1)});
  const Outcome o = RunBench(absl::StrCat(
      "--target=", server->address(),
      " --rate=200,400 --requests=10 --output=json --deadline=5s"));
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("{\"mode\":\"open\",\"concurrency\":0,\"rate\":200.0,"));
  EXPECT_THAT(o.out, HasSubstr("{\"mode\":\"open\",\"concurrency\":0,\"rate\":400.0,"));
  EXPECT_EQ(server->received(), 20);
}

TEST(MetalserveBenchCliTest, RejectsABadRateNamingIt) {
  const Outcome o = RunBench("--rate=100,-5 --target=127.0.0.1:1");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_THAT(o.out, HasSubstr("--rate='100,-5': '-5' is not a rate > 0"));
}

TEST(MetalserveBenchCliTest, TextReportShowsServerPercentilesAndErrorMessages) {
  // Queue times 100..1000 us in a cycle of 10; every 5th request fails.
  auto server = FakeInferenceServer::Start({.delay = absl::ZeroDuration(),
                                            .fail_every = 5,
                                            .queue_time_cycle = 10});
  const Outcome o = RunBench(absl::StrCat(
      "--target=", server->address(), " --requests=100 --deadline=5s"));
  EXPECT_EQ(o.exit_code, 0) << o.out;
  // Successful requests are n % 5 != 0: queue times 100..400 and 600..900.
  EXPECT_THAT(o.out, ContainsRegex("queue us   p50 [0-9]+  p90 (899|900)  p99 (899|900)"));
  EXPECT_THAT(o.out, HasSubstr("errors     INVALID_ARGUMENT 20\n"));
  int shown = 0;
  for (size_t at = 0; (at = o.out.find("INVALID_ARGUMENT: fake failure requested #", at)) !=
                      std::string::npos;
       ++at) {
    ++shown;
  }
  EXPECT_EQ(shown, 3) << o.out;  // 20 distinct messages, 3 shown
}

TEST(MetalserveBenchCliTest, HelpDocumentsDurationDefaultAndRandomRanges) {
  const Outcome o = RunBench("--helpfull");
  // Help text is wrapped: join the lines before looking.
  const std::string help = absl::StrReplaceAll(o.out, {{"\n      ", " "}});
  EXPECT_THAT(help, HasSubstr("Default 0, which means 10s, or no time limit when "
                              "--requests is set.); default: 0;"));
  EXPECT_THAT(help, HasSubstr("int64/int32 in [0, 100)"));
}

TEST(MetalserveBenchCliTest, RejectsUnknownProtocolNamingIt) {
  const Outcome o = RunBench("--protocol=bogus --target=127.0.0.1:1");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_THAT(o.out, HasSubstr("--protocol='bogus' is not supported"));
}

}  // namespace
}  // namespace metalserve::client
