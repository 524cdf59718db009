// The native service over real gRPC on 127.0.0.1, with a fake runner.
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/service/server.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"

namespace metalserve {
namespace {

using metalserve::v1::DATA_TYPE_FLOAT16;
using metalserve::v1::PredictRequest;
using metalserve::v1::PredictResponse;
using ::metalserve::testing::MakeRequest;
using ::metalserve::testing::NativeFakeServerTest;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kW = FakeRunner::kWidth;

class ServiceTest : public NativeFakeServerTest {
 protected:
  void StartServer(BatcherOptions batching) {
    ServerOptions so = testing::LoopbackServerOptions();
    so.batching = batching;
    StartServerAndConnect(so);
  }
  void StartServer() { StartServerAndConnect(testing::LoopbackServerOptions()); }

  // Sends `reqs` concurrently; returns statuses and responses in order.
  void CallAll(const std::vector<PredictRequest>& reqs,
               std::vector<grpc::Status>* statuses,
               std::vector<PredictResponse>* resps) {
    statuses->resize(reqs.size());
    resps->resize(reqs.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < reqs.size(); ++i) {
      threads.emplace_back([&, i] { (*statuses)[i] = Call(reqs[i], &(*resps)[i]); });
    }
    for (auto& t : threads) t.join();
  }

  // The values are doubled and the output has the request's rows.
  void ExpectDoubled(const PredictRequest& req, const PredictResponse& resp) {
    ASSERT_NO_FATAL_FAILURE(testing::ExpectDoubled(req, resp));
    EXPECT_EQ(resp.outputs(0).shape(0), req.inputs(0).shape(0));
  }

  void ExpectStillServing() {
    PredictResponse resp;
    PredictRequest req = MakeRequest(1, 5);
    ASSERT_TRUE(Call(req, &resp).ok());
    ExpectDoubled(req, resp);
  }
};

TEST_F(ServiceTest, PredictReturnsEachRequestItsOwnRows) {
  BatcherOptions b;
  b.max_batch_size = 8;
  b.max_queue_delay = absl::Seconds(5);  // closes when full
  StartServer(b);
  std::vector<PredictRequest> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(MakeRequest(2, 100.0f * i));
  std::vector<grpc::Status> st;
  std::vector<PredictResponse> resp;
  CallAll(reqs, &st, &resp);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(st[i].ok()) << st[i].error_message();
    ExpectDoubled(reqs[i], resp[i]);
    EXPECT_EQ(resp[i].model_name(), "fake");
    EXPECT_EQ(resp[i].device(), "cpu");
    EXPECT_EQ(resp[i].batch_rows(), 8);
  }
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(8));
}

TEST_F(ServiceTest, PadsToAllowedSizeAndSlicesOutputsBack) {
  BatcherOptions b;
  b.max_batch_size = 8;
  b.allowed_batch_sizes = {1, 2, 4, 8};
  b.max_queue_delay = absl::Milliseconds(200);
  StartServer(b);
  runner_.CloseGate();
  // The first request occupies the executor; the next three queue and form a
  // batch of 3 rows, padded to 4.
  std::vector<grpc::Status> st0(1);
  std::vector<PredictResponse> r0(1);
  std::thread first([&] { st0[0] = Call(MakeRequest(1, -1), &r0[0]); });
  runner_.AwaitRunning(1);
  std::vector<PredictRequest> reqs = {MakeRequest(1, 10), MakeRequest(1, 20),
                                      MakeRequest(1, 30)};
  std::vector<grpc::Status> st;
  std::vector<PredictResponse> resp;
  std::thread rest([&] { CallAll(reqs, &st, &resp); });
  // Wait until all three are queued before releasing the executor.
  const bool queued = AwaitQueueDepth(3);
  runner_.OpenGate();
  first.join();
  rest.join();
  ASSERT_TRUE(queued) << "the three requests never queued together";
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(st[i].ok()) << st[i].error_message();
    ExpectDoubled(reqs[i], resp[i]);
    EXPECT_EQ(resp[i].batch_rows(), 4);
  }
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(1, 4));
}

TEST_F(ServiceTest, ModelErrorIsInternalAndNextRequestSucceeds) {
  StartServer();
  PredictResponse resp;
  grpc::Status s = Call(MakeRequest(1, FakeRunner::kPoison), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(s.error_message(), HasSubstr("poison row"));
  ExpectStillServing();
}

TEST_F(ServiceTest, PoisonedRequestFailsAloneAndItsBatchMatesSucceed) {
  BatcherOptions b;
  b.max_batch_size = 4;
  b.max_queue_delay = absl::Seconds(5);  // the four close a full batch
  StartServer(b);
  std::vector<PredictRequest> reqs = {MakeRequest(1, 1), MakeRequest(1, FakeRunner::kPoison),
                                      MakeRequest(1, 3), MakeRequest(1, 4)};
  std::vector<grpc::Status> st;
  std::vector<PredictResponse> resp;
  CallAll(reqs, &st, &resp);
  for (int i = 0; i < 4; ++i) {
    if (i == 1) {
      EXPECT_EQ(st[i].error_code(), grpc::StatusCode::INTERNAL);
    } else {
      ASSERT_TRUE(st[i].ok()) << i << ": " << st[i].error_message();
      ExpectDoubled(reqs[i], resp[i]);
    }
  }
  EXPECT_EQ(runner_.batch_rows().front(), 4);
}

TEST_F(ServiceTest, OutOfMemorySplitsBatchAndOnlyTooLargeRequestFails) {
  BatcherOptions b;
  b.max_batch_size = 8;
  b.max_queue_delay = absl::Seconds(5);
  StartServer(b);
  runner_.set_oom_above_rows(2);
  // 1 + 1 + 3 + 1 + 1 + 1 = 8 rows: a full batch. The 3-row request cannot
  // fit alone; the others succeed after the split.
  std::vector<PredictRequest> reqs = {MakeRequest(1, 1), MakeRequest(1, 2),
                                      MakeRequest(3, 3), MakeRequest(1, 4),
                                      MakeRequest(1, 5), MakeRequest(1, 6)};
  std::vector<grpc::Status> st;
  std::vector<PredictResponse> resp;
  CallAll(reqs, &st, &resp);
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].inputs(0).shape(0) == 3) {
      EXPECT_EQ(st[i].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    } else {
      ASSERT_TRUE(st[i].ok()) << i << ": " << st[i].error_message();
      ExpectDoubled(reqs[i], resp[i]);
    }
  }
  EXPECT_EQ(runner_.batch_rows().front(), 8);
}

TEST_F(ServiceTest, RefusesWithUnavailableWhenQueueIsFull) {
  BatcherOptions b;
  b.max_batch_size = 2;
  b.max_queue_size = 2;
  b.max_queue_delay = absl::ZeroDuration();
  StartServer(b);
  runner_.CloseGate();
  std::vector<grpc::Status> st(3);
  std::vector<PredictResponse> resp(3);
  std::thread running([&] { st[0] = Call(MakeRequest(2, 1), &resp[0]); });
  runner_.AwaitRunning(1);
  std::thread queued([&] { st[1] = Call(MakeRequest(2, 1), &resp[1]); });
  const bool full = AwaitQueueDepth(2);
  st[2] = Call(MakeRequest(1, 1), &resp[2]);
  EXPECT_EQ(st[2].error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(st[2].error_message(), HasSubstr("queue is full"));
  runner_.OpenGate();
  running.join();
  queued.join();
  ASSERT_TRUE(full) << "the queue never filled";
  EXPECT_TRUE(st[0].ok());
  EXPECT_TRUE(st[1].ok()) << "an accepted request is never lost";
}

TEST_F(ServiceTest, DeadlinePassedInQueueIsDeadlineExceededAndNeverRuns) {
  BatcherOptions b;
  b.max_batch_size = 1;
  b.max_queue_delay = absl::ZeroDuration();
  StartServer(b);
  runner_.CloseGate();
  grpc::Status first;
  PredictResponse r1, r2;
  std::thread t([&] { first = Call(MakeRequest(1, 1), &r1); });
  runner_.AwaitRunning(1);
  // The late call waits in the queue (the server has it: no deadline can
  // pass in transit on a loaded machine), then its client gives up.
  grpc::Status late;
  std::thread l([&] { late = Call(MakeRequest(1, 2), &r2, absl::Seconds(1)); });
  ASSERT_TRUE(AwaitQueueDepth(1));
  l.join();
  EXPECT_EQ(late.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The client gives up at its own deadline; the server's counts from when
  // the call arrived and may lie a moment later. Let the server's pass too
  // before freeing the executor, whose next poll must then expire the call.
  absl::SleepFor(absl::Milliseconds(500));
  runner_.OpenGate();
  t.join();
  EXPECT_TRUE(first.ok());
  ExpectStillServing();
  // Only the first request and the check above ran.
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(1, 1));
  // The server itself answered DEADLINE_EXCEEDED (the client's status above
  // is its own deadline's, whatever the server answered). The executor
  // expired the call before running the check above, so it is counted.
  EXPECT_EQ(ServerCount("Predict", "DEADLINE_EXCEEDED"), 1);
  EXPECT_EQ(ServerCount("Predict", "CANCELLED"), 0);
  EXPECT_EQ(ServerCount("Predict", "OK"), 2);
}

// Shutdown(timeout) (main.cc passes --shutdown_timeout) waits for accepted
// calls, then cancels those still running: once the timeout has passed, while
// the model still holds its batch, the client hears UNAVAILABLE (gRPC's
// "Cancelling all calls").
TEST_F(ServiceTest, ShutdownCancelsCallsStillRunningAtItsTimeout) {
  StartServer();
  runner_.CloseGate();
  grpc::Status held;
  PredictResponse resp;
  absl::Notification answered;
  std::thread call([&] {
    held = Call(MakeRequest(1, 1), &resp, absl::Seconds(30));
    answered.Notify();
  });
  runner_.AwaitRunning(1);
  const absl::Time start = absl::Now();
  std::thread shutdown([&] { server_->Shutdown(absl::Milliseconds(300)); });
  const bool cancelled_while_held = answered.WaitForNotificationWithTimeout(absl::Seconds(20));
  const absl::Duration took = absl::Now() - start;
  runner_.OpenGate();  // lets the batcher drain, so Shutdown returns
  call.join();
  shutdown.join();
  ASSERT_TRUE(cancelled_while_held) << "the running call was not ended by the timeout";
  EXPECT_EQ(held.error_code(), grpc::StatusCode::UNAVAILABLE) << held.error_message();
  EXPECT_GE(took, absl::Milliseconds(300)) << "cancelled before the timeout";
}

TEST_F(ServiceTest, BadInputGetsInvalidArgumentNamingFieldAndServerKeepsServing) {
  BatcherOptions b = testing::LoopbackServerOptions().batching;
  b.max_request_rows = 8;
  StartServer(b);
  struct Case {
    const char* what;
    std::function<void(PredictRequest*)> mutate;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"unknown name", [](PredictRequest* r) { r->mutable_inputs(0)->set_name("pixels"); },
       "inputs[0].name 'pixels'"},
      {"wrong dtype", [](PredictRequest* r) { r->mutable_inputs(0)->set_dtype(DATA_TYPE_FLOAT16); },
       "dtype is float16"},
      {"wrong rank", [](PredictRequest* r) { r->mutable_inputs(0)->add_shape(1); },
       "has rank 3"},
      {"wrong dim", [](PredictRequest* r) { r->mutable_inputs(0)->set_shape(1, 5); },
       "shape[1] = 5"},
      {"byte length", [](PredictRequest* r) { r->mutable_inputs(0)->mutable_data()->append("x"); },
       "needs 16"},
      {"empty", [](PredictRequest* r) { r->clear_inputs(); }, "inputs is empty"},
      {"negative", [](PredictRequest* r) { r->mutable_inputs(0)->set_shape(0, -3); },
       "is negative"},
      {"overflow", [](PredictRequest* r) {
         r->mutable_inputs(0)->set_shape(0, int64_t{1} << 62);
       }, "overflows int64"},
  };
  for (const Case& c : cases) {
    PredictRequest req = MakeRequest(1, 1);
    c.mutate(&req);
    PredictResponse resp;
    grpc::Status s = Call(req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    EXPECT_THAT(s.error_message(), HasSubstr(c.expect)) << c.what;
  }
  PredictRequest other = MakeRequest(1, 1);
  other.set_model_name("resnet50");
  PredictResponse resp;
  grpc::Status s = Call(other, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("'resnet50'"));
  PredictRequest too_many = MakeRequest(9, 1);
  s = Call(too_many, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("9 rows (batch dimension), more than max_request_rows 8"));
  ExpectStillServing();
  EXPECT_TRUE(runner_.batch_rows().size() == 1) << "bad requests never reach the model";
}

TEST_F(ServiceTest, MetadataReportsSignatureAndBatching) {
  BatcherOptions b;
  b.max_batch_size = 16;
  b.allowed_batch_sizes = {4, 16};
  StartServer(b);
  grpc::ClientContext ctx;
  metalserve::v1::GetModelMetadataRequest req;
  metalserve::v1::GetModelMetadataResponse resp;
  ASSERT_TRUE(stub_->GetModelMetadata(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.model_name(), "fake");
  ASSERT_EQ(resp.inputs_size(), 1);
  EXPECT_EQ(resp.inputs(0).name(), "input");
  EXPECT_THAT(resp.inputs(0).shape(), ElementsAre(-1, kW));
  EXPECT_EQ(resp.outputs(0).name(), "output");
  EXPECT_EQ(resp.max_batch_size(), 16);
  EXPECT_THAT(resp.allowed_batch_sizes(), ElementsAre(4, 16));
}

TEST_F(ServiceTest, HealthFollowsServingState) {
  StartServer();
  auto health = grpc::health::v1::Health::NewStub(channel_);
  auto check = [&](const std::string& service) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status st = health->Check(&ctx, req, &resp);
    return st.ok() ? static_cast<int>(resp.status()) : -1;
  };
  EXPECT_EQ(check(""), 1);
  EXPECT_EQ(check("metalserve.v1.Inference"), 1);
  server_->SetServing(false);
  EXPECT_EQ(check(""), 2);
  EXPECT_EQ(check("metalserve.v1.Inference"), 2);
}

}  // namespace
}  // namespace metalserve
