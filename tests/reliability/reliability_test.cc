// Reliability of the native service over real gRPC on 127.0.0.1 with a fake
// runner: overload, cancellation and disconnects, a bad-input battery beyond
// tests/service, and the message size limit. TLS / mutual TLS: tls_test.cc.
//
// Every call carries a deadline; every wait is bounded; nothing sleeps to
// prove that something happened.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/service/server.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"

extern char** environ;

namespace metalserve {
namespace {

using metalserve::v1::PredictRequest;
using metalserve::v1::PredictResponse;
using ::metalserve::testing::ExpectDoubled;
using ::metalserve::testing::Floats;
using ::metalserve::testing::MakeRequest;
using ::metalserve::testing::NativeFakeServerTest;
using ::testing::HasSubstr;

constexpr int64_t kW = FakeRunner::kWidth;

// Counts finished async calls by outcome; waits are bounded.
class Outcomes {
 public:
  void Add(const grpc::Status& s) {
    absl::MutexLock l(&mu_);
    ++done_;
    if (s.ok()) {
      ++ok_;
    } else if (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
               s.error_message().find("queue is full") != std::string::npos) {
      ++refused_;
    } else {
      other_.push_back(absl::StrCat(s.error_code(), ": ", s.error_message()));
    }
  }
  // True when `pred` held within `timeout`.
  bool AwaitRefused(int n, absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    auto cond = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return refused_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
  }
  bool AwaitDone(int n, absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    auto cond = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
  }
  int ok() { absl::MutexLock l(&mu_); return ok_; }
  int refused() { absl::MutexLock l(&mu_); return refused_; }
  int done() { absl::MutexLock l(&mu_); return done_; }
  std::vector<std::string> other() { absl::MutexLock l(&mu_); return other_; }

 private:
  absl::Mutex mu_;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
  int ok_ ABSL_GUARDED_BY(mu_) = 0;
  int refused_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> other_ ABSL_GUARDED_BY(mu_);
};

// One async Predict; owns its context, request and response.
struct AsyncCall {
  grpc::ClientContext ctx;
  PredictRequest req;
  PredictResponse resp;
  grpc::Status status;
};

class ReliabilityTest : public NativeFakeServerTest {
 protected:
  // Options of a loopback server on a free port, batches of up to 8 rows.
  static ServerOptions Opts() { return testing::LoopbackServerOptions(); }

  void StartServer(ServerOptions so = Opts()) { StartServerAndConnect(so); }

  void StartAsync(AsyncCall* c, Outcomes* out, absl::Duration timeout = absl::Seconds(30)) {
    c->ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    stub_->async()->Predict(&c->ctx, &c->req, &c->resp, [c, out](grpc::Status s) {
      c->status = s;
      out->Add(s);
    });
  }

  void ExpectStillServing() {
    PredictResponse resp;
    PredictRequest req = MakeRequest(1, 5);
    grpc::Status s = Call(req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ExpectDoubled(req, resp);
  }
};

// ---------------------------------------------------------------- overload

// With the model held, the executor busy and the queue full, 10x the queue's
// capacity more requests arrive. Every one of them is refused while the model
// is still held (so refusal never waits for capacity), and every accepted
// request succeeds once the model is released.
TEST_F(ReliabilityTest, OverloadRefusesExcessAtOnceAndAnswersEveryAcceptedRequest) {
  ServerOptions so = Opts();
  so.batching.max_batch_size = 4;
  so.batching.max_queue_size = 8;
  so.batching.max_queue_delay = absl::ZeroDuration();
  so.batching.num_executors = 1;
  StartServer(so);
  runner_.CloseGate();

  Outcomes out;
  constexpr int kAccepted = 1 + 8;  // one running, eight queued rows
  constexpr int kExcess = 10 * 8;
  std::vector<std::unique_ptr<AsyncCall>> calls;
  auto launch = [&](int i) {
    calls.push_back(std::make_unique<AsyncCall>());
    calls.back()->req = MakeRequest(1, 10.0f * i);
    StartAsync(calls.back().get(), &out);
  };
  launch(0);
  runner_.AwaitRunning(1);
  for (int i = 1; i < kAccepted; ++i) launch(i);
  ASSERT_TRUE(AwaitQueueDepth(8));
  for (int i = kAccepted; i < kAccepted + kExcess; ++i) launch(i);

  ASSERT_TRUE(out.AwaitRefused(kExcess, absl::Seconds(20)))
      << "refused " << out.refused() << " of " << kExcess << " while the model was held";
  EXPECT_EQ(out.ok(), 0);
  EXPECT_EQ(out.done(), kExcess) << "nothing accepted finished while the model was held";

  runner_.OpenGate();
  ASSERT_TRUE(out.AwaitDone(kAccepted + kExcess, absl::Seconds(20)));
  EXPECT_EQ(out.ok(), kAccepted);
  EXPECT_EQ(out.refused(), kExcess);
  EXPECT_THAT(out.other(), ::testing::IsEmpty());
  for (int i = 0; i < kAccepted; ++i) ExpectDoubled(calls[i]->req, calls[i]->resp);
  // The queue depth gauge follows the queue down, not only up: the last
  // admission and the refusals saw 8 rows queued.
  EXPECT_EQ(QueueDepth(), 0);
}

// ------------------------------------------------- cancellation, disconnect

TEST_F(ReliabilityTest, ClientCancelWhileRunningReturnsCancelledAndServerKeepsServing) {
  StartServer();
  runner_.CloseGate();
  Outcomes out;
  AsyncCall c;
  c.req = MakeRequest(2, 1);
  StartAsync(&c, &out);
  runner_.AwaitRunning(1);
  c.ctx.TryCancel();
  ASSERT_TRUE(out.AwaitDone(1, absl::Seconds(10)));
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::CANCELLED);
  // The executor finishes the cancelled RPC's reactor after the fact.
  runner_.OpenGate();
  ExpectStillServing();
}

// A request cancelled by its client while queued never runs: the server
// drops it at its next look at the queue and counts it CANCELLED. (The
// client's CANCELLED status alone proves nothing: gRPC gives it to the
// client after TryCancel whatever the server does.)
TEST_F(ReliabilityTest, ClientCancelWhileQueuedNeverRunsAndServerKeepsServing) {
  ServerOptions so = Opts();
  so.batching.max_batch_size = 1;
  so.batching.max_queue_delay = absl::ZeroDuration();
  so.batching.num_executors = 1;
  StartServer(so);
  runner_.CloseGate();
  Outcomes out;
  AsyncCall running, queued;
  running.req = MakeRequest(1, 1);
  queued.req = MakeRequest(1, 2);  // its row starts with 2: never in the log
  StartAsync(&running, &out);
  runner_.AwaitRunning(1);
  StartAsync(&queued, &out);
  ASSERT_TRUE(AwaitQueueDepth(1));
  queued.ctx.TryCancel();
  ASSERT_TRUE(out.AwaitDone(1, absl::Seconds(10)));
  EXPECT_EQ(queued.status.error_code(), grpc::StatusCode::CANCELLED);
  // A call on the same connection after the cancellation: HTTP/2 delivers
  // the cancelled stream's RST_STREAM before this call's headers, so once it
  // is answered the server has seen the cancellation.
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::GetModelMetadataResponse meta;
  ASSERT_TRUE(stub_->GetModelMetadata(&ctx, {}, &meta).ok());
  // The transport has read the RST_STREAM by now, but gRPC marks the call's
  // context cancelled in a closure of its own, which under ASan once ran
  // after the executor had taken the call (it then ran). A margin for that
  // closure, not a proof: the assertions below are unchanged.
  absl::SleepFor(absl::Milliseconds(300));
  runner_.OpenGate();
  ASSERT_TRUE(out.AwaitDone(2, absl::Seconds(10)));
  ASSERT_TRUE(running.status.ok()) << running.status.error_message();
  ExpectDoubled(running.req, running.resp);
  ExpectStillServing();
  EXPECT_THAT(runner_.row_first_values(), ::testing::ElementsAre(1, 5))
      << "only the running request and the check ran; the cancelled one did not";
  EXPECT_EQ(ServerCount("Predict", "CANCELLED"), 1);
  EXPECT_EQ(ServerCount("Predict", "OK"), 2);
}

// A client process with calls running and queued is killed (its TCP
// connection drops). The server finishes those RPCs, keeps serving, and shuts
// down promptly (a leaked reactor would hold Shutdown to its timeout).
TEST_F(ReliabilityTest, ClientProcessKilledMidRequestLeavesServerHealthy) {
  ServerOptions so = Opts();
  so.batching.max_batch_size = 2;
  so.batching.max_queue_delay = absl::ZeroDuration();
  so.batching.num_executors = 1;
  StartServer(so);
  runner_.CloseGate();
  const std::string target = absl::StrCat("--target=127.0.0.1:", server_->port());
  std::vector<std::string> args = {METALSERVE_BENCH_BINARY, target, "--requests=1000",
                                   "--concurrency=6", "--deadline=60s",
                                   "--progress=off", "--output=json"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  // One batch held in the model, at least 4 rows queued behind it.
  runner_.AwaitRunning(1);
  const bool queued = AwaitQueueDepth(4);
  kill(pid, SIGKILL);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  ASSERT_TRUE(queued);
  EXPECT_TRUE(WIFSIGNALED(wstatus));
  runner_.OpenGate();
  ExpectStillServing();
  const absl::Time t0 = absl::Now();
  server_->Shutdown(absl::Seconds(20));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10)) << "an RPC of the dead client was left open";
}

// ------------------------------------------------------ bad input battery

TEST_F(ReliabilityTest, HugeDeclaredShapeIsInvalidArgumentWithoutAllocating) {
  StartServer();
  PredictRequest req = MakeRequest(1, 1);
  req.mutable_inputs(0)->set_shape(0, int64_t{1} << 40);  // 16 TiB declared
  PredictResponse resp;
  grpc::Status s = Call(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("needs 17592186044416"));
  ExpectStillServing();
}

TEST_F(ReliabilityTest, NegativeNonBatchDimensionIsInvalidArgument) {
  runner_.mutable_info().inputs[0].shape = {-1, -1};  // a dynamic second dim
  StartServer();
  PredictRequest req = MakeRequest(1, 1);
  req.mutable_inputs(0)->set_shape(1, -4);
  PredictResponse resp;
  grpc::Status s = Call(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("-4"));
  ExpectStillServing();
}

TEST_F(ReliabilityTest, ShapeProductOverflowIsInvalidArgument) {
  runner_.mutable_info().inputs[0].shape = {-1, -1};
  StartServer();
  PredictResponse resp;
  // Element count overflows: 3037000500^2 > 2^63 - 1.
  PredictRequest elements = MakeRequest(1, 1);
  elements.mutable_inputs(0)->set_shape(0, 3037000500);
  elements.mutable_inputs(0)->set_shape(1, 3037000500);
  grpc::Status s = Call(elements, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("overflow"));
  // Element count fits, byte count (x 4 bytes) does not.
  PredictRequest bytes = MakeRequest(1, 1);
  bytes.mutable_inputs(0)->set_shape(0, int64_t{1} << 60);
  bytes.mutable_inputs(0)->set_shape(1, 4);
  s = Call(bytes, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("byte size overflows int64"));
  ExpectStillServing();
}

TEST_F(ReliabilityTest, NanAndInfAreAcceptedAndPassedThrough) {
  StartServer();
  const float inf = std::numeric_limits<float>::infinity();
  const float v[kW] = {std::numeric_limits<float>::quiet_NaN(), inf, -inf, 1.5f};
  PredictRequest req = MakeRequest(1, 0);
  req.mutable_inputs(0)->set_data(std::string(reinterpret_cast<const char*>(v), sizeof v));
  PredictResponse resp;
  grpc::Status s = Call(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.outputs_size(), 1);
  const auto out = Floats(resp.outputs(0).data());
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], inf);
  EXPECT_EQ(out[2], -inf);
  EXPECT_EQ(out[3], 3.0f);
}

TEST_F(ReliabilityTest, MessageAboveSizeLimitIsResourceExhaustedFromGrpc) {
  ServerOptions so = Opts();
  so.max_message_bytes = 1024;
  StartServer(so);
  PredictResponse resp;
  // 8 rows x 4 floats = 128 bytes of data: under the limit.
  ASSERT_TRUE(Call(MakeRequest(8, 1), &resp).ok());
  // Under max_batch_size rows but 4 KiB of data, over the 1 KiB limit.
  PredictRequest big = MakeRequest(1, 1);
  big.mutable_inputs(0)->mutable_data()->append(4096, '\0');
  grpc::Status s = Call(big, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_EQ(runner_.batch_rows().size(), 1u) << "the large message never reached the model";
  ExpectStillServing();
}

TEST_F(ReliabilityTest, UnknownModelNameIsNotFound) {
  StartServer();
  PredictRequest req = MakeRequest(1, 1);
  req.set_model_name("no_such_model");
  PredictResponse resp;
  grpc::Status s = Call(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("'no_such_model'"));
  EXPECT_TRUE(runner_.batch_rows().empty());
}

}  // namespace
}  // namespace metalserve
