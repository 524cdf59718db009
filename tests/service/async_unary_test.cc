// Predict and ModelInfer through completion queues (--grpc_api=async): the
// flag, the method registration, and a server whose calls outnumber the
// calls asked for in advance. The rest of the gRPC behaviour is the whole
// ServiceTest/ClientViewTest/KServeTest/ReliabilityTest suites run again
// with METALSERVE_TEST_GRPC_API=async (their ".async" ctest entries).
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/service/async_unary.h"
#include "server/service/raw_call.h"
#include "server/service/server.h"
#include "tests/testing/fake_runner_server.h"

namespace metalserve {
namespace {

using ::metalserve::testing::MakeRequest;
using ::metalserve::testing::NativeFakeServerTest;
using ::testing::HasSubstr;

TEST(GrpcApiTest, ParsesEachNameAndNamesABadOne) {
  EXPECT_EQ(*ParseGrpcApi("callback", 16), GrpcApi::kCallback);
  EXPECT_EQ(*ParseGrpcApi("async", 2), GrpcApi::kAsync);
  // auto: by the core count.
  EXPECT_EQ(*ParseGrpcApi("auto", 2), GrpcApi::kCallback);
  EXPECT_EQ(*ParseGrpcApi("auto", kAsyncMinCores - 1), GrpcApi::kCallback);
  EXPECT_EQ(*ParseGrpcApi("auto", kAsyncMinCores), GrpcApi::kAsync);
  EXPECT_EQ(*ParseGrpcApi("auto", 16), GrpcApi::kAsync);
  const absl::StatusOr<GrpcApi> bad = ParseGrpcApi("sync");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("grpc_api"));
  EXPECT_THAT(bad.status().message(), HasSubstr("'sync'"));
}

TEST(GrpcApiTest, ValidateRefusesQueueThreadsOutOfRange) {
  ServerOptions so = testing::LoopbackServerOptions();
  so.grpc_cq_threads = 65;
  const absl::Status s = so.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("grpc_cq_threads"));
  EXPECT_THAT(s.message(), HasSubstr("65"));
  so.grpc_cq_threads = -1;
  EXPECT_EQ(so.Validate().code(), absl::StatusCode::kInvalidArgument);
  so.grpc_cq_threads = 64;
  EXPECT_TRUE(so.Validate().ok());
}

TEST(GrpcApiTest, QueuesFollowTheFlagOrTheDefault) {
  EXPECT_EQ(AsyncUnaryServer::QueuesFor(3), 3);
  EXPECT_EQ(AsyncUnaryServer::QueuesFor(0), AsyncUnaryServer::kDefaultQueues);
}

// A container's CPU limit (cgroup v2 cpu.max) lowers the core count that
// --grpc_api=auto reads, rounded up; "max" and unreadable text leave it.
TEST(GrpcApiTest, CpuMaxLowersTheCoreCount) {
  EXPECT_EQ(CoresUnderCpuMax("200000 100000", 64), 2);
  EXPECT_EQ(CoresUnderCpuMax("150000 100000\n", 64), 2);
  EXPECT_EQ(CoresUnderCpuMax("50000 100000", 64), 1);
  EXPECT_EQ(CoresUnderCpuMax("1600000 100000", 8), 8);
  EXPECT_EQ(CoresUnderCpuMax("max 100000", 64), 64);
  EXPECT_EQ(CoresUnderCpuMax("", 64), 64);
  EXPECT_EQ(CoresUnderCpuMax("-1 100000", 64), 64);  // cgroup v1's "no limit"
  EXPECT_GE(UsableCores(), 1);
}

// The indices the generated code gives the methods (their order in the
// .proto files): registering the wrong one would serve another method.
TEST(MethodIndexTest, FollowsTheProtoOrder) {
  EXPECT_EQ(MethodIndex(v1::Inference::service_full_name(), "Predict"), 0);
  EXPECT_EQ(MethodIndex(v1::Inference::service_full_name(), "GetModelMetadata"), 1);
  EXPECT_EQ(MethodIndex(inference::GRPCInferenceService::service_full_name(), "ModelInfer"), 5);
}

class AsyncServiceTest : public NativeFakeServerTest {
 protected:
  void StartAsync(int queues) {
    ServerOptions so = testing::LoopbackServerOptions();
    so.grpc_api = GrpcApi::kAsync;
    so.grpc_cq_threads = queues;
    StartServerAndConnect(so);
  }
};

// More calls at once than the queues have asked for in advance (16 each):
// every one is answered with its own rows, and the callback methods
// (GetModelMetadata, KServe's ServerLive) still answer beside them.
TEST_F(AsyncServiceTest, AnswersMoreCallsThanWereAskedForInAdvance) {
  constexpr int kQueues = 2;
  constexpr int kCalls = 3 * AsyncUnaryServer::kWaitingCalls * kQueues;
  StartAsync(kQueues);
  runner_.CloseGate();  // every call arrives before any is answered
  std::vector<v1::PredictRequest> reqs;
  for (int i = 0; i < kCalls; ++i) reqs.push_back(MakeRequest(1, 10.0f * i));
  std::vector<v1::PredictResponse> resps(kCalls);
  std::vector<grpc::Status> statuses(kCalls);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back([&, i] { statuses[i] = Call(reqs[i], &resps[i]); });
  }
  // All but the batches the blocked executors took.
  ASSERT_TRUE(AwaitQueueDepth(kCalls - 32)) << "the calls never reached the batcher";
  {
    grpc::ClientContext ctx;
    v1::GetModelMetadataResponse meta;
    ASSERT_TRUE(stub_->GetModelMetadata(&ctx, v1::GetModelMetadataRequest(), &meta).ok());
    auto kserve = inference::GRPCInferenceService::NewStub(channel_);
    grpc::ClientContext live_ctx;
    inference::ServerLiveResponse live;
    ASSERT_TRUE(kserve->ServerLive(&live_ctx, inference::ServerLiveRequest(), &live).ok());
    EXPECT_TRUE(live.live());
  }
  runner_.OpenGate();
  for (auto& t : threads) t.join();
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].error_message();
    testing::ExpectDoubled(reqs[i], resps[i]);
  }
  EXPECT_EQ(ServerCount("Predict", "OK"), kCalls);
}

// A server shut down as soon as it started: the calls asked for at start are
// counted before Start returns, so the queues are never shut down under a
// poller still asking (gRPC aborts on that).
TEST_F(AsyncServiceTest, ShutsDownRightAfterStarting) {
  for (int i = 0; i < 20; ++i) {
    ServerOptions so = testing::LoopbackServerOptions();
    so.grpc_api = GrpcApi::kAsync;
    so.grpc_cq_threads = 4;
    absl::StatusOr<std::unique_ptr<InferenceServer>> server =
        InferenceServer::Start(so, &runner_, nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    (*server)->Shutdown(absl::Seconds(5));
  }
}

}  // namespace
}  // namespace metalserve
