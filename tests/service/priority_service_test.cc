// Priorities end to end over gRPC on 127.0.0.1: the native field and
// KServe's parameters["priority"] reach the batcher, which runs the higher
// level first and refuses a level out of range naming the range.
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "tests/testing/fake_runner_server.h"

namespace metalserve {
namespace {

using ::metalserve::testing::MakeRequest;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using v1::PredictRequest;
using v1::PredictResponse;

class PriorityServiceTest : public testing::NativeFakeServerTest {
 protected:
  void SetUp() override {
    ServerOptions so = testing::LoopbackServerOptions();
    so.batching.max_batch_size = 1;
    so.batching.max_queue_delay = absl::ZeroDuration();
    so.batching.priority_levels = 2;
    StartServerAndConnect(so);
  }
  static PredictRequest At(int priority, float value) {
    PredictRequest req = MakeRequest(1, value);
    req.set_priority(priority);
    return req;
  }
};

TEST_F(PriorityServiceTest, HighPriorityRequestRunsBeforeAnEarlierLowOne) {
  runner_.CloseGate();
  std::vector<grpc::Status> st(3);
  std::vector<PredictResponse> resp(3);
  std::thread running([&] { st[0] = Call(At(2, 1), &resp[0]); });
  runner_.AwaitRunning(1);
  std::thread low([&] { st[1] = Call(At(2, 20), &resp[1]); });
  ASSERT_TRUE(AwaitQueueDepth(1));
  std::thread high([&] { st[2] = Call(At(1, 10), &resp[2]); });
  const bool both = AwaitQueueDepth(2);
  runner_.OpenGate();
  running.join();
  low.join();
  high.join();
  ASSERT_TRUE(both) << "the second request never queued";
  for (const grpc::Status& s : st) EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(runner_.row_first_values(), ElementsAre(1, 10, 20));
}

TEST_F(PriorityServiceTest, NativePriorityOutOfRangeIsInvalidArgumentNamingTheRange) {
  PredictResponse resp;
  const grpc::Status s = Call(At(3, 1), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("priority 3 is out of range [1, 2]"));
  EXPECT_TRUE(runner_.batch_rows().empty());
}

TEST_F(PriorityServiceTest, KServePriorityParameterIsReadAndChecked) {
  auto kserve = inference::GRPCInferenceService::NewStub(channel_);
  auto infer = [&](inference::InferParameter p, inference::ModelInferResponse* resp) {
    inference::ModelInferRequest req;
    auto* in = req.add_inputs();
    in->set_name("input");
    in->set_datatype("FP32");
    in->add_shape(1);
    in->add_shape(FakeRunner::kWidth);
    for (int i = 0; i < FakeRunner::kWidth; ++i) in->mutable_contents()->add_fp32_contents(1);
    (*req.mutable_parameters())["priority"] = p;
    grpc::ClientContext ctx;
    return kserve->ModelInfer(&ctx, req, resp);
  };
  inference::ModelInferResponse resp;
  inference::InferParameter ok;
  ok.set_uint64_param(1);
  EXPECT_TRUE(infer(ok, &resp).ok());
  inference::InferParameter high;
  high.set_int64_param(5);
  grpc::Status s = infer(high, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("priority 5 is out of range [1, 2]"));
  inference::InferParameter text;
  text.set_string_param("high");
  s = infer(text, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("parameters[\"priority\"]"));
}

}  // namespace
}  // namespace metalserve
