#include "tests/testing/fake_runner_server.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "server/service/async_unary.h"
#include "tests/testing/metric_sample.h"

namespace metalserve::testing {

std::unique_ptr<Metrics> MetricsWithoutListener() {
  MetricsOptions mo;
  mo.listen_address = "";
  return *Metrics::Create(mo);
}

ServerOptions LoopbackServerOptions() {
  ServerOptions so;
  so.address = "127.0.0.1:0";
  so.batching.max_batch_size = 8;
  so.batching.max_queue_delay = absl::Milliseconds(1);
  // The ".async" copies of the gRPC suites (tests/service/CMakeLists.txt)
  // set this: Predict and ModelInfer then go through completion queues.
  if (const char* api = std::getenv("METALSERVE_TEST_GRPC_API"); api != nullptr) {
    absl::StatusOr<GrpcApi> parsed = ParseGrpcApi(api);
    CHECK(parsed.ok()) << "METALSERVE_TEST_GRPC_API: " << parsed.status();
    so.grpc_api = *parsed;
  }
  return so;
}

absl::Status FakeRunnerServerTest::StartFakeServer(const ServerOptions& so) {
  metrics_ = MetricsWithoutListener();
  auto server = InferenceServer::Start(so, &runner_, metrics_.get(), clock_);
  if (!server.ok()) return server.status();
  server_ = *std::move(server);
  return absl::OkStatus();
}

std::string FakeRunnerServerTest::ServerTarget() const {
  return absl::StrCat("127.0.0.1:", server_->port());
}

void FakeRunnerServerTest::TearDown() {
  runner_.OpenGate();
  if (server_) server_->Shutdown(absl::Seconds(5));
}

int FakeRunnerServerTest::QueueDepth() const {
  const auto v = Sample(metrics_->Scrape(), "metalserve_queue_depth_rows");
  return v.has_value() ? static_cast<int>(*v) : -1;
}

bool FakeRunnerServerTest::AwaitQueueDepth(int rows) const {
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (absl::Now() < give_up) {
    if (QueueDepth() >= rows) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

double FakeRunnerServerTest::ServerCount(absl::string_view method,
                                         absl::string_view code) const {
  return Sample(metrics_->Scrape(), RequestsSeries(method, code)).value_or(-1);
}

void NativeFakeServerTest::StartServerAndConnect(const ServerOptions& so) {
  const absl::Status started = StartFakeServer(so);
  ASSERT_TRUE(started.ok()) << started;
  Connect(grpc::InsecureChannelCredentials());
  // Connected before the test's first call, so a call with a short deadline
  // does not spend it connecting on a loaded (or sanitized) machine. (A TLS
  // server's tests connect with their own credentials.)
  if (!so.tls_cert_path.empty()) return;
  ASSERT_TRUE(channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(20))))
      << "no connection to " << ServerTarget();
}

void NativeFakeServerTest::Connect(std::shared_ptr<grpc::ChannelCredentials> creds,
                                   const grpc::ChannelArguments& args) {
  channel_ = grpc::CreateCustomChannel(ServerTarget(), creds, args);
  stub_ = v1::Inference::NewStub(channel_);
}

grpc::Status NativeFakeServerTest::Call(const v1::PredictRequest& req,
                                        v1::PredictResponse* resp, absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return stub_->Predict(&ctx, req, resp);
}

v1::PredictRequest MakeRequest(int64_t rows, float first, float step) {
  constexpr int64_t kW = FakeRunner::kWidth;
  v1::PredictRequest req;
  auto* t = req.add_inputs();
  t->set_name("input");
  t->set_dtype(v1::DATA_TYPE_FLOAT32);
  t->add_shape(rows);
  t->add_shape(kW);
  std::vector<float> v(rows * kW);
  for (size_t i = 0; i < v.size(); ++i) v[i] = first + step * static_cast<float>(i);
  t->set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
  return req;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

void ExpectDoubled(const v1::PredictRequest& req, const v1::PredictResponse& resp) {
  ASSERT_EQ(resp.outputs_size(), 1);
  const auto in = Floats(req.inputs(0).data());
  const auto out = Floats(resp.outputs(0).data());
  ASSERT_EQ(in.size(), out.size());
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out[i], 2 * in[i]) << i;
}

}  // namespace metalserve::testing
