// Transport-level defences of the real InferenceServer over 127.0.0.1 with a
// fake runner (issue 17): the gRPC port bound exclusively, options validated
// before anything binds, malformed protobuf answered INVALID_ARGUMENT and
// counted, compression refused unless enabled, and early refusal when the
// queue is full.
//
// Every call carries a deadline; every wait is bounded; nothing sleeps to
// prove that something happened.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/service/server.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/metric_sample.h"

namespace metalserve {
namespace {

using ::metalserve::testing::LoopbackServerOptions;
using ::metalserve::testing::MakeRequest;
using ::metalserve::testing::MetricsWithoutListener;
using ::metalserve::testing::NativeFakeServerTest;
using ::testing::HasSubstr;

constexpr char kPredictMethod[] = "/metalserve.v1.Inference/Predict";
constexpr char kModelInferMethod[] = "/inference.GRPCInferenceService/ModelInfer";
// Not a protobuf: field 0 is invalid and the varint never ends.
const std::string kGarbage("\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11);

class TransportTest : public NativeFakeServerTest {
 protected:
  // Sends `body` as the raw request of `method`; bounded by a 10 s deadline.
  grpc::Status RawCall(const std::string& method, const std::string& body) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::Slice slice(body);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::Status status;
    absl::Notification done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    done.WaitForNotification();
    return status;
  }
  // The requests_total count for `method` and `code` (with or without model
  // labels), or -1.
  double RequestsTotal(const std::string& method, const std::string& code) {
    return testing::Sample(metrics_->Scrape(), testing::RequestsSeries(method, code))
        .value_or(-1);
  }
  // Blocks until the queue depth gauge reads `rows` (bounded: 10 s).
  bool AwaitQueueDepth(int rows) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (testing::Sample(metrics_->Scrape(), "metalserve_queue_depth_rows") != rows) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }
};

// Two self-signed certificates with their keys (a.pem/a.key, b.pem/b.key)
// and a file that is not PEM, made once per run by the openssl command line.
class TlsFiles {
 public:
  static const TlsFiles& Get() {
    static const TlsFiles files;  // its folder is removed at exit
    return files;
  }
  bool ok() const { return ok_; }
  std::string path(const std::string& name) const { return dir_.File(name); }

 private:
  TlsFiles() {
    std::ofstream(path("garbage.pem")) << "this is not a certificate\n";
    ok_ = true;
    for (const char* n : {"a", "b"}) {
      const std::string cmd = absl::StrCat(
          "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
          " -days 2 -subj /CN=localhost -keyout ", path(absl::StrCat(n, ".key")),
          " -out ", path(absl::StrCat(n, ".pem")), " >/dev/null 2>&1");
      ok_ = ok_ && std::system(cmd.c_str()) == 0;
    }
  }
  ::metalserve::testing::TempDir dir_{"metalserve_transport_"};
  bool ok_ = false;
};

TEST(ServerOptionsTest, RefusesAddressWithoutPortOrWithPortOutOfRange) {
  ServerOptions o;
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:-1",
                          "127.0.0.1:http", "[::1]", "::1:8500", "[::1"}) {
    o.address = bad;
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("'", bad, "'"))) << bad;
  }
  o.address = "127.0.0.1:99999";
  EXPECT_THAT(o.Validate().message(), HasSubstr("not in [0, 65535]"));
  o.address = "127.0.0.1";
  EXPECT_THAT(o.Validate().message(), HasSubstr("has no port"));
  for (const char* good : {"127.0.0.1:0", "127.0.0.1:65535", "[::1]:8500",
                           "localhost:8500", "0.0.0.0:8500", "unix:/tmp/m.sock"}) {
    o.address = good;
    EXPECT_TRUE(o.Validate().ok()) << good << ": " << o.Validate();
  }
}

TEST(ServerOptionsTest, RefusesDeviceConcurrencyBelowOne) {
  ServerOptions o;
  o.device_concurrency = 0;
  const absl::Status s = o.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("device_concurrency must be at least 1, got 0"));
  o.device_concurrency = 1;
  EXPECT_TRUE(o.Validate().ok());
}

TEST(ServerOptionsTest, NamesTlsFilesThatDoNotParseOrDoNotMatch) {
  const TlsFiles& f = TlsFiles::Get();
  ASSERT_TRUE(f.ok()) << "openssl could not make the test certificates";
  ServerOptions o;
  o.tls_cert_path = f.path("a.pem");
  o.tls_key_path = f.path("a.key");
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();

  o.tls_key_path = f.path("b.key");
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.Validate().message(), HasSubstr("TLS key does not match certificate"));

  o.tls_cert_path = f.path("garbage.pem");
  EXPECT_THAT(o.Validate().message(),
              HasSubstr(absl::StrCat("cannot parse certificate ", f.path("garbage.pem"))));

  o.tls_cert_path = f.path("a.pem");
  o.tls_key_path = f.path("garbage.pem");
  EXPECT_THAT(o.Validate().message(),
              HasSubstr(absl::StrCat("cannot parse private key ", f.path("garbage.pem"))));

  o.tls_key_path = f.path("a.key");
  o.tls_client_ca_path = f.path("garbage.pem");
  EXPECT_THAT(o.Validate().message(), HasSubstr("(tls_client_ca)"));
}

TEST(ServerOptionsTest, StartReportsBadTlsFilesNotAnAddressInUse) {
  const TlsFiles& f = TlsFiles::Get();
  ASSERT_TRUE(f.ok()) << "openssl could not make the test certificates";
  ServerOptions o = LoopbackServerOptions();
  o.tls_cert_path = f.path("a.pem");
  o.tls_key_path = f.path("b.key");
  FakeRunner runner;
  auto metrics = MetricsWithoutListener();
  auto server = InferenceServer::Start(o, &runner, metrics.get());
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("TLS key does not match certificate"));
}

TEST_F(TransportTest, SecondServerOnTheSamePortFailsToStart) {
  StartServerAndConnect(LoopbackServerOptions());
  ServerOptions same = LoopbackServerOptions();
  same.address = ServerTarget();
  FakeRunner other_runner;
  auto other_metrics = MetricsWithoutListener();
  auto second = InferenceServer::Start(same, &other_runner, other_metrics.get());
  ASSERT_FALSE(second.ok()) << "a second server started on " << same.address;
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(same.address));
  EXPECT_THAT(second.status().message(), HasSubstr("in use"));
  // The first server still answers.
  v1::PredictResponse resp;
  EXPECT_TRUE(Call(MakeRequest(1, 1), &resp).ok());
}

TEST_F(TransportTest, MalformedPredictBodyIsInvalidArgumentAndCounted) {
  StartServerAndConnect(LoopbackServerOptions());
  const grpc::Status s = RawCall(kPredictMethod, kGarbage);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(),
              HasSubstr("request body (11 bytes) is not a valid metalserve.v1.PredictRequest"));
  EXPECT_EQ(RequestsTotal("Predict", "INVALID_ARGUMENT"), 1);
  // It named no model: counted without model labels.
  const std::string labelled =
      R"(metalserve_requests_total{code="INVALID_ARGUMENT",method="Predict",model="fake"})";
  EXPECT_EQ(testing::Sample(metrics_->Scrape(), labelled), 0);
  v1::PredictResponse resp;
  EXPECT_TRUE(Call(MakeRequest(1, 1), &resp).ok()) << "the server keeps answering";
}

TEST_F(TransportTest, EmptyPredictBodyIsInvalidArgument) {
  StartServerAndConnect(LoopbackServerOptions());
  const grpc::Status s = RawCall(kPredictMethod, "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
}

TEST_F(TransportTest, MalformedModelInferBodyIsInvalidArgumentAndCounted) {
  StartServerAndConnect(LoopbackServerOptions());
  const grpc::Status s = RawCall(kModelInferMethod, kGarbage);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("is not a valid inference.ModelInferRequest"));
  EXPECT_EQ(RequestsTotal("ModelInfer", "INVALID_ARGUMENT"), 1);
}

// With the queue full, a request is refused before its body is parsed: even
// a body that is not a protobuf gets UNAVAILABLE, not INVALID_ARGUMENT.
TEST_F(TransportTest, FullQueueRefusesBeforeParsingTheBody) {
  ServerOptions so = LoopbackServerOptions();
  so.batching.max_batch_size = 2;
  so.batching.max_queue_size = 2;
  runner_.CloseGate();
  StartServerAndConnect(so);
  if (HasFatalFailure()) return;
  // One request holds the only executor at the gate; two more fill the queue.
  std::vector<std::thread> callers;
  std::vector<grpc::Status> held(3);
  callers.emplace_back([&] { v1::PredictResponse r; held[0] = Call(MakeRequest(1, 1), &r); });
  runner_.AwaitRunning(1);
  for (int i = 1; i < 3; ++i) {
    callers.emplace_back([&, i] { v1::PredictResponse r; held[i] = Call(MakeRequest(1, 1), &r); });
  }
  ASSERT_TRUE(AwaitQueueDepth(2));

  for (const char* method : {kPredictMethod, kModelInferMethod}) {
    const grpc::Status s = RawCall(method, kGarbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << method << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("refused before reading the request")) << method;
  }
  // Counted under the only model, whose queue refused them.
  const std::string scrape = metrics_->Scrape();
  for (const char* method : {"Predict", "ModelInfer"}) {
    const std::string series = absl::StrCat(R"(metalserve_requests_total{code="UNAVAILABLE",)",
                                            R"(method=")", method, R"(",model="fake"})");
    EXPECT_EQ(testing::Sample(scrape, series), 1) << method;
  }
  runner_.OpenGate();
  for (auto& t : callers) t.join();
  for (const grpc::Status& s : held) EXPECT_TRUE(s.ok()) << s.error_message();
}

// A channel that compresses every request with gzip.
std::shared_ptr<grpc::Channel> GzipChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetCompressionAlgorithm(GRPC_COMPRESS_GZIP);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

TEST_F(TransportTest, GzipRequestIsRefusedByDefault) {
  StartServerAndConnect(LoopbackServerOptions());
  auto stub = v1::Inference::NewStub(GzipChannel(ServerTarget()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::PredictResponse resp;
  const grpc::Status s = stub->Predict(&ctx, MakeRequest(2, 1), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("gzip"));
  EXPECT_THAT(s.error_message(), HasSubstr("disabled"));
  // Uncompressed calls are unaffected.
  EXPECT_TRUE(Call(MakeRequest(1, 1), &resp).ok());
}

TEST_F(TransportTest, GzipRequestIsAnsweredWithAcceptCompression) {
  ServerOptions so = LoopbackServerOptions();
  so.accept_compression = true;
  StartServerAndConnect(so);
  auto stub = v1::Inference::NewStub(GzipChannel(ServerTarget()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  const v1::PredictRequest req = MakeRequest(2, 1);
  v1::PredictResponse resp;
  const grpc::Status s = stub->Predict(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  testing::ExpectDoubled(req, resp);
}

TEST(ServerOptionsTest, MemoryQuotaIsSizedFromMaxMessageBytesUnlessSet) {
  ServerOptions o;
  o.max_message_bytes = 1 << 20;
  EXPECT_EQ(o.MemoryQuotaBytes(), int64_t{256} << 20);
  o.max_message_bytes = 256 << 20;
  EXPECT_EQ(o.MemoryQuotaBytes(), int64_t{1} << 30);
  o.memory_quota_bytes = o.max_message_bytes - 1;
  EXPECT_THAT(o.Validate().message(), HasSubstr("memory_quota_bytes must be 0"));
  o.memory_quota_bytes = o.max_message_bytes;
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_EQ(o.MemoryQuotaBytes(), o.max_message_bytes);
}

}  // namespace
}  // namespace metalserve
