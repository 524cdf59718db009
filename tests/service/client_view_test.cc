// What a client sees, over real gRPC on 127.0.0.1 with a fake runner:
// status messages that stay small whatever the client sent.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/service/status_util.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"

namespace metalserve {
namespace {

using metalserve::v1::PredictRequest;
using metalserve::v1::PredictResponse;
using ::metalserve::testing::MakeRequest;
using ::metalserve::testing::NativeFakeServerTest;
using ::testing::HasSubstr;

constexpr size_t kHuge = 1 << 20;  // 1 MiB of client-supplied name

TEST(TruncatedTest, KeepsShortTextAndNotesTheLengthOfLongText) {
  EXPECT_EQ(Truncated("abc", 3), "abc");
  EXPECT_EQ(Truncated("abcd", 3), "abc...(truncated, 4 bytes)");
  EXPECT_EQ(ClientText(std::string(kHuge, 'x')),
            absl::StrCat(std::string(kMaxClientTextBytes, 'x'),
                         "...(truncated, 1048576 bytes)"));
}

TEST(TruncatedTest, NeverSplitsAUtf8Character) {
  // "é" is two bytes (C3 A9); a cut after 2 bytes of "aé" would split it.
  EXPECT_EQ(Truncated("a\xC3\xA9z", 2), "a...(truncated, 4 bytes)");
  EXPECT_EQ(Truncated("a\xC3\xA9z", 3), "a\xC3\xA9...(truncated, 4 bytes)");
}

class ClientViewTest : public NativeFakeServerTest {
 protected:
  void StartServer(BatcherOptions batching) {
    ServerOptions so = testing::LoopbackServerOptions();
    so.batching = batching;
    StartServerAndConnect(so);
  }

  void ExpectServes() {
    PredictResponse resp;
    const PredictRequest req = MakeRequest(1, 5);
    ASSERT_TRUE(Call(req, &resp).ok());
    testing::ExpectDoubled(req, resp);
  }
};

TEST_F(ClientViewTest, HugeModelNameIsNotFoundWithTruncatedNameAndChannelKeepsServing) {
  StartServer(testing::LoopbackServerOptions().batching);
  for (int i = 0; i < 3; ++i) {
    PredictRequest req = MakeRequest(1, 1);
    req.set_model_name(std::string(kHuge, 'm'));
    PredictResponse resp;
    const grpc::Status s = Call(req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message().size();
    EXPECT_THAT(s.error_message(), HasSubstr("model_name 'mmmm"));
    EXPECT_THAT(s.error_message(), HasSubstr("...(truncated, 1048576 bytes)"));
    EXPECT_LE(s.error_message().size(), kMaxStatusMessageBytes);
    ExpectServes();  // the same channel
  }
}

TEST_F(ClientViewTest, HugeInputNameIsInvalidArgumentAndConcurrentCallsSucceed) {
  StartServer(testing::LoopbackServerOptions().batching);
  std::vector<std::thread> good;
  std::vector<grpc::Status> good_status(8);
  for (int i = 0; i < 8; ++i) {
    good.emplace_back([&, i] {
      PredictResponse resp;
      good_status[i] = Call(MakeRequest(1, i), &resp);
    });
  }
  for (int i = 0; i < 3; ++i) {
    PredictRequest req = MakeRequest(1, 1);
    req.mutable_inputs(0)->set_name(std::string(kHuge, 'n'));
    PredictResponse resp;
    const grpc::Status s = Call(req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("inputs[0].name 'nnnn"));
    EXPECT_THAT(s.error_message(), HasSubstr("...(truncated, 1048576 bytes)"));
  }
  for (auto& t : good) t.join();
  for (const grpc::Status& s : good_status) EXPECT_TRUE(s.ok()) << s.error_message();
  ExpectServes();
}

TEST_F(ClientViewTest, KServeHugeDatatypeAndVersionGetTheirCodes) {
  StartServer(testing::LoopbackServerOptions().batching);
  auto kserve = inference::GRPCInferenceService::NewStub(channel_);
  auto call = [&](const inference::ModelInferRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    inference::ModelInferResponse resp;
    return kserve->ModelInfer(&ctx, req, &resp);
  };
  inference::ModelInferRequest bad_type;
  bad_type.set_model_name("fake");
  auto* in = bad_type.add_inputs();
  in->set_name("input");
  in->set_datatype(std::string(kHuge, 'T'));
  in->add_shape(1);
  in->add_shape(FakeRunner::kWidth);
  grpc::Status s = call(bad_type);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("...(truncated, 1048576 bytes)"));

  inference::ModelInferRequest bad_version;
  bad_version.set_model_name("fake");
  bad_version.set_model_version(std::string(kHuge, '9'));
  s = call(bad_version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("...(truncated, 1048576 bytes)"));
  ExpectServes();
}

}  // namespace
}  // namespace metalserve
