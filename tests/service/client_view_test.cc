// What a client sees, over real gRPC on 127.0.0.1 with a fake runner:
// status messages that stay small whatever the client sent, and server
// metrics that count each call the way its client saw it end.
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/service/rpc_task.h"
#include "server/service/status_util.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"
#include "tests/testing/metric_sample.h"

namespace metalserve {
namespace {

using metalserve::v1::PredictRequest;
using metalserve::v1::PredictResponse;
using ::metalserve::testing::MakeRequest;
using ::metalserve::testing::NativeFakeServerTest;
using ::testing::HasSubstr;
using ::testing::Optional;

constexpr size_t kHuge = 1 << 20;  // 1 MiB of client-supplied name

using ::metalserve::testing::Sample;

std::string PredictCount(absl::string_view code) {
  return absl::StrCat("metalserve_requests_total{code=\"", code,
                      "\",method=\"Predict\"}");
}

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

  // Polls (up to 10 s) until `value_of()` returns `value`.
  template <typename F>
  void AwaitValue(absl::string_view what, F value_of, double value) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (value_of() != value && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_EQ(value_of(), value) << what;
  }
  void AwaitSample(absl::string_view series, double value) {
    AwaitValue(series, [&] { return Sample(metrics_->Scrape(), series).value_or(-1); },
               value);
  }
  // Predict calls the server counted with either code.
  double Counted(absl::string_view a, absl::string_view b) {
    const std::string scrape = metrics_->Scrape();
    return Sample(scrape, PredictCount(a)).value_or(0) +
           Sample(scrape, PredictCount(b)).value_or(0);
  }
  // Rows the server holds: in batches the model has started, and queued.
  double RowsOnServer() {
    double rows = Sample(metrics_->Scrape(), "metalserve_queue_depth_rows").value_or(0);
    for (int64_t r : runner_.batch_rows()) rows += r;
    return rows;
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

// Calls answered by the model after their client's deadline: the clients saw
// DEADLINE_EXCEEDED, and so does requests_total.
TEST_F(ClientViewTest, AnswerAfterClientDeadlineIsNotCountedOk) {
  BatcherOptions b = testing::LoopbackServerOptions().batching;
  b.max_queue_delay = absl::Milliseconds(20);  // the calls share one batch
  StartServer(b);
  runner_.CloseGate();
  constexpr int kCalls = 4;
  const absl::Duration timeout = absl::Seconds(1);
  std::vector<grpc::Status> st(kCalls);
  std::vector<std::thread> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.emplace_back([&, i] {
      PredictResponse resp;
      st[i] = Call(MakeRequest(1, i), &resp, timeout);
    });
  }
  runner_.AwaitRunning(1);
  // Every call reached the server (long before its deadline).
  AwaitValue("rows on the server", [&] { return RowsOnServer(); }, kCalls);
  for (auto& t : calls) t.join();
  const absl::Time client_deadlines_passed = absl::Now();
  for (const grpc::Status& s : st) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // The server's deadline of a call lies its transit time (well under 500 ms
  // on loopback, even loaded) after the client's; let it pass before the
  // model answers: an answer in between would reach the server's count as OK
  // while its client saw DEADLINE_EXCEEDED, and no server can tell.
  absl::SleepFor(client_deadlines_passed + absl::Milliseconds(500) - absl::Now());
  runner_.OpenGate();
  ExpectServes();
  AwaitSample(PredictCount("DEADLINE_EXCEEDED"), kCalls);
  EXPECT_THAT(Sample(metrics_->Scrape(), PredictCount("OK")), Optional(1.0));
}

TEST_F(ClientViewTest, AnswerAfterClientCancelledIsCountedCancelled) {
  StartServer(testing::LoopbackServerOptions().batching);
  runner_.CloseGate();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  grpc::Status cancelled;
  std::thread call([&] {
    PredictResponse resp;
    cancelled = stub_->Predict(&ctx, MakeRequest(1, 1), &resp);
  });
  runner_.AwaitRunning(1);
  ctx.TryCancel();
  call.join();
  EXPECT_EQ(cancelled.error_code(), grpc::StatusCode::CANCELLED);
  // Lets the client's RST_STREAM reach the server (loopback: well under a
  // millisecond unloaded) before the model answers; nothing on the server
  // side shows that it has.
  absl::SleepFor(absl::Milliseconds(500));
  runner_.OpenGate();
  ExpectServes();
  AwaitSample(PredictCount("CANCELLED"), 1);
  EXPECT_THAT(Sample(metrics_->Scrape(), PredictCount("OK")), Optional(1.0));
}

// A call still running when the shutdown timeout cuts it off: gRPC ends it
// UNAVAILABLE for the client, and the server counts it so, not OK.
TEST_F(ClientViewTest, CallCutOffAtShutdownTimeoutIsCountedUnavailable) {
  StartServer(testing::LoopbackServerOptions().batching);
  runner_.CloseGate();
  grpc::Status cut;
  std::thread call([&] {
    PredictResponse resp;
    cut = Call(MakeRequest(1, 1), &resp, absl::Seconds(30));
  });
  runner_.AwaitRunning(1);
  std::thread stop([&] { server_->Shutdown(absl::Milliseconds(200)); });
  call.join();
  EXPECT_EQ(cut.error_code(), grpc::StatusCode::UNAVAILABLE) << cut.error_message();
  runner_.OpenGate();
  stop.join();  // the batcher has answered the task: its outcome is recorded
  const std::string scrape = metrics_->Scrape();
  EXPECT_THAT(Sample(scrape, PredictCount("UNAVAILABLE")), Optional(1.0));
  EXPECT_THAT(Sample(scrape, PredictCount("OK")), Optional(0.0));
}

// The rule behind the counts above, case by case. After the shutdown's cut-off
// a call counts UNAVAILABLE even while its server context does not yet show
// the cancellation: gRPC delivers it to the server context on another thread,
// and the client can hold UNAVAILABLE first (the test above raced so in CI).
TEST(CodeSeenByClientTest, EachCaseAsTheClientSawIt) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  const absl::Time later = now + absl::Seconds(10);
  using absl::StatusCode;
  EXPECT_EQ(CodeSeenByClient(StatusCode::kOk, false, false, later, now), StatusCode::kOk);
  EXPECT_EQ(CodeSeenByClient(StatusCode::kInvalidArgument, false, false, later, now),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeSeenByClient(StatusCode::kOk, true, false, later, now),
            StatusCode::kCancelled);
  EXPECT_EQ(CodeSeenByClient(StatusCode::kOk, true, true, later, now),
            StatusCode::kUnavailable);
  EXPECT_EQ(CodeSeenByClient(StatusCode::kOk, false, true, later, now),
            StatusCode::kUnavailable);
  EXPECT_EQ(CodeSeenByClient(StatusCode::kOk, false, false, now, now),
            StatusCode::kDeadlineExceeded);
  EXPECT_EQ(CodeSeenByClient(StatusCode::kOk, true, true, now, now),
            StatusCode::kDeadlineExceeded);
}

// Queued calls that expire while the model is busy take the queue-depth
// gauge back to zero, with no later request to reset it.
TEST_F(ClientViewTest, QueueDepthGaugeReturnsToZeroAfterQueuedCallsExpire) {
  BatcherOptions b;
  b.max_batch_size = 1;
  b.max_queue_delay = absl::ZeroDuration();
  StartServer(b);
  runner_.CloseGate();
  grpc::Status first;
  std::thread busy([&] {
    PredictResponse resp;
    first = Call(MakeRequest(1, 1), &resp);
  });
  runner_.AwaitRunning(1);
  constexpr int kQueued = 3;
  std::vector<std::thread> queued;
  for (int i = 0; i < kQueued; ++i) {
    queued.emplace_back([&, i] {
      PredictResponse resp;
      Call(MakeRequest(1, i), &resp, absl::Seconds(3));
    });
  }
  // All three are queued (long before their deadlines), then their clients
  // give up.
  AwaitSample("metalserve_queue_depth_rows", kQueued);
  for (auto& t : queued) t.join();
  // Let their server-side deadlines pass too (see above), so that the
  // executor's next poll expires them rather than running them.
  absl::SleepFor(absl::Milliseconds(500));
  runner_.OpenGate();
  busy.join();
  EXPECT_TRUE(first.ok());
  AwaitValue("expired or cancelled",
             [&] { return Counted("DEADLINE_EXCEEDED", "CANCELLED"); }, kQueued);
  EXPECT_THAT(Sample(metrics_->Scrape(), "metalserve_queue_depth_rows"),
              Optional(0.0));
}

}  // namespace
}  // namespace metalserve
