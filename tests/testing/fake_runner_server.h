// Helpers for tests that run the real InferenceServer over gRPC on
// 127.0.0.1 with a FakeRunner behind it (service, KServe, reliability and
// client tests): the fixtures, loopback options, and builders and checks for
// the fake runner's one input "input", float32 [rows, FakeRunner::kWidth]
// (output = 2 * input).
#ifndef METALSERVE_TESTS_TESTING_FAKE_RUNNER_SERVER_H_
#define METALSERVE_TESTS_TESTING_FAKE_RUNNER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/service/server.h"
#include "tests/testing/fake_runner.h"

namespace metalserve::testing {

// Real Metrics with no HTTP listener: tests read them with Scrape().
std::unique_ptr<Metrics> MetricsWithoutListener();

// A loopback server on a free port: 127.0.0.1:0, batches of up to 8 rows,
// 1 ms queue delay; every other field keeps its default, but grpc_api is
// async when the environment has METALSERVE_TEST_GRPC_API=async.
ServerOptions LoopbackServerOptions();

// Fixture: an InferenceServer serving runner_, started by the test (in SetUp
// or the test body) with StartFakeServer.
//
// Ownership: owns the runner, the metrics and the server; the server is
// declared last, so it is destroyed before what it uses. TearDown opens the
// runner's gate (so a test that stops while holding it cannot stall the
// drain) and shuts the server down with 5 s of grace. Thread-safety: as a
// ::testing::Test; the runner and server are thread-safe, the members are
// set from the test thread.
class FakeRunnerServerTest : public ::testing::Test {
 protected:
  // Starts server_ with `so`, serving runner_ and recording into a fresh
  // metrics_ without listener, on clock_ (the real clock when null). On
  // error server_ stays empty.
  absl::Status StartFakeServer(const ServerOptions& so);
  // "127.0.0.1:<port>" of the started server.
  std::string ServerTarget() const;
  void TearDown() override;
  // The queue depth gauge, in rows; -1 when absent.
  int QueueDepth() const;
  // Waits (at most 20 s) until the queue holds at least `rows` rows; false
  // when it never did (callers assert it).
  bool AwaitQueueDepth(int rows) const;
  // The server's own count of `method` calls answered with `code` (a name
  // such as "CANCELLED"); -1 when the series is absent.
  double ServerCount(absl::string_view method, absl::string_view code) const;

  FakeRunner runner_;
  Clock* clock_ = nullptr;  // not owned; set before StartFakeServer
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<InferenceServer> server_;
};

// FakeRunnerServerTest with a metalserve.v1.Inference client on channel_.
class NativeFakeServerTest : public FakeRunnerServerTest {
 protected:
  // Starts the server (asserting it started), then connects in plaintext.
  void StartServerAndConnect(const ServerOptions& so);
  // Points channel_ and stub_ at the server with `creds` and `args`.
  void Connect(std::shared_ptr<grpc::ChannelCredentials> creds,
               const grpc::ChannelArguments& args = {});
  // One Predict through stub_ with a deadline `timeout` from now.
  grpc::Status Call(const v1::PredictRequest& req, v1::PredictResponse* resp,
                    absl::Duration timeout = absl::Seconds(10));

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

// A Predict request for the fake runner: `rows` rows of float32 values
// first, first + step, first + 2 * step, ... in row-major order.
v1::PredictRequest MakeRequest(int64_t rows, float first, float step = 1);

// `bytes` (native-endian float32, as on the wire here) as floats.
std::vector<float> Floats(const std::string& bytes);

// Expects `resp` to hold one output whose values are twice `req`'s input
// values, element by element.
void ExpectDoubled(const v1::PredictRequest& req, const v1::PredictResponse& resp);

}  // namespace metalserve::testing

#endif  // METALSERVE_TESTS_TESTING_FAKE_RUNNER_SERVER_H_
