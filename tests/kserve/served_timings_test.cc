// The queue and compute times a served answer reports (Predict's
// queue_time_us and compute_time_us, ModelInfer's and REST's parameters of
// the same names), end to end over loopback, on a simulated clock: the one
// call waits the batcher's 5 ms delay, and the fake runner's forward
// advances the clock by 7 ms, so each protocol must answer exactly 5,000
// and 7,000.
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/kserve/http_client.h"
#include "tests/kserve/rest_fixture.h"
#include "tests/testing/fake_runner_server.h"
#include "tests/testing/simulated_clock.h"

namespace metalserve {
namespace {

using ::metalserve::testing::Json;

constexpr absl::Duration kDelay = absl::Milliseconds(5);
constexpr absl::Duration kForward = absl::Milliseconds(7);

class ServedTimingsTest : public testing::RestTest {
 protected:
  void SetUp() override {
    clock_ = &sim_;
    ServerOptions so = testing::LoopbackServerOptions();
    so.batching.max_batch_size = 8;
    so.batching.max_queue_delay = kDelay;
    runner_.set_on_run([this] { sim_.AdvanceTime(kForward); });
    Start(so);
    channel_ = grpc::CreateChannel(ServerTarget(), grpc::InsecureChannelCredentials());
  }

  // Runs `call` on its own thread, lets the simulated clock pass the
  // batcher's delay once the call is queued, and waits for the answer.
  template <typename Call>
  void CallThroughTheDelay(Call call) {
    std::thread t(call);
    const bool queued = AwaitQueueDepth(1);
    sim_.AdvanceTime(kDelay);
    t.join();
    ASSERT_TRUE(queued) << "the call never reached the queue";
    EXPECT_THAT(runner_.batch_rows(), ::testing::ElementsAre(1));
  }

  // The server goes before sim_, which it reads.
  void TearDown() override {
    RestTest::TearDown();
    server_.reset();
  }

  static std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    return ctx;
  }

  SimulatedClock sim_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ServedTimingsTest, PredictReportsTheDelayAsQueueTimeAndTheForwardAsComputeTime) {
  auto stub = v1::Inference::NewStub(channel_);
  v1::PredictResponse resp;
  grpc::Status st;
  CallThroughTheDelay([&] { st = stub->Predict(Ctx().get(), testing::MakeRequest(1, 1), &resp); });
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.queue_time_us(), 5000);
  EXPECT_EQ(resp.compute_time_us(), 7000);
  EXPECT_EQ(resp.batch_rows(), 1);
}

TEST_F(ServedTimingsTest, ModelInferReportsThemAsInt64Parameters) {
  auto stub = inference::GRPCInferenceService::NewStub(channel_);
  inference::ModelInferRequest req;
  req.set_model_name("fake");
  auto* in = req.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  in->add_shape(1);
  in->add_shape(FakeRunner::kWidth);
  for (int i = 0; i < FakeRunner::kWidth; ++i) in->mutable_contents()->add_fp32_contents(i);
  inference::ModelInferResponse resp;
  grpc::Status st;
  CallThroughTheDelay([&] { st = stub->ModelInfer(Ctx().get(), req, &resp); });
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.parameters().at("queue_time_us").int64_param(), 5000);
  EXPECT_EQ(resp.parameters().at("compute_time_us").int64_param(), 7000);
  EXPECT_EQ(resp.parameters().at("batch_rows").int64_param(), 1);
}

TEST_F(ServedTimingsTest, RestReportsThemInTheAnswersParameters) {
  testing::HttpResponse r;
  CallThroughTheDelay([&] {
    r = Post(testing::kInfer, testing::JsonInput(1, {1, 2, 3, 4}).dump());
  });
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = Json::parse(r.body);
  EXPECT_EQ(j["parameters"]["queue_time_us"], 5000) << r.body;
  EXPECT_EQ(j["parameters"]["compute_time_us"], 7000) << r.body;
  EXPECT_EQ(j["parameters"]["batch_rows"], 1) << r.body;
}

}  // namespace
}  // namespace metalserve
