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

 public:
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

// Priority isolation over gRPC: while level 1 is active, the level-2 rows
// that queued behind its batch run in batches capped by
// priority_lower_batch_cost (4 rows at 1 ms a row), not in one of 8.
class PriorityIsolationServiceTest : public testing::NativeFakeServerTest {
 protected:
  void SetUp() override {
    ServerOptions so = testing::LoopbackServerOptions();
    so.batching.max_batch_size = 8;
    so.batching.allowed_batch_sizes = {1, 2, 4, 8};
    so.batching.max_queue_delay = absl::ZeroDuration();
    so.batching.priority_levels = 2;
    const absl::Duration ms = absl::Milliseconds(1);
    so.batching.batch_costs = {{1, ms}, {2, 2 * ms}, {4, 4 * ms}, {8, 8 * ms}};
    so.batching.priority_lower_batch_cost = 4 * ms;
    so.batching.priority_active_window = absl::Minutes(5);  // the whole test
    StartServerAndConnect(so);
  }
};

TEST_F(PriorityIsolationServiceTest, LowerRowsQueuedWhileLevelOneIsActiveRunInCappedBatches) {
  runner_.CloseGate();
  std::vector<grpc::Status> st(7);
  std::vector<PredictResponse> resp(7);
  std::vector<std::thread> calls;
  calls.emplace_back([&] { st[0] = Call(PriorityServiceTest::At(1, 10), &resp[0]); });
  runner_.AwaitRunning(1);
  for (int i = 1; i < 7; ++i) {
    calls.emplace_back([&, i] { st[i] = Call(PriorityServiceTest::At(2, 20 + i), &resp[i]); });
  }
  const bool queued = AwaitQueueDepth(6);
  runner_.OpenGate();
  for (std::thread& t : calls) t.join();
  ASSERT_TRUE(queued) << "the level-2 requests never all queued";
  for (const grpc::Status& s : st) EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(1, 4, 2));
}

}  // namespace
}  // namespace metalserve
