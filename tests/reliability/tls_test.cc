// TLS and mutual TLS of the native service over real gRPC on 127.0.0.1 with
// a fake runner, with certificates made by the openssl command line at test
// time: the server's certificate is checked by the client (a client trusting
// another CA is refused), and with --tls_client_ca only clients holding a
// certificate from that CA get through.
//
// Every call carries a deadline; nothing sleeps to prove anything.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/service/server.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"
#include "tests/testing/temp_dir.h"

namespace metalserve {
namespace {

using metalserve::v1::PredictResponse;
using ::metalserve::testing::MakeRequest;
using ::metalserve::testing::NativeFakeServerTest;

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A CA, a server certificate for 127.0.0.1/localhost, a client certificate
// from the same CA, and a client certificate from an unrelated CA; made once
// per test binary run by the openssl command line in a temporary directory.
class Pki {
 public:
  static const Pki& Get() {
    static const Pki pki;  // its folder is removed at exit
    return pki;
  }
  bool ok() const { return ok_; }
  const std::string& log() const { return log_; }
  std::string path(const std::string& name) const { return dir_.File(name); }
  std::string pem(const std::string& name) const { return ReadAll(path(name)); }

 private:
  Pki() {
    const std::string d = dir_.path();
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::vector<std::string> cmds = {
        absl::StrCat("openssl req -x509 ", key, " -keyout ", d, "/ca.key -out ", d,
                     "/ca.pem -days 2 -subj /CN=metalserve-test-ca"),
        absl::StrCat("openssl req -x509 ", key, " -keyout ", d, "/other_ca.key -out ", d,
                     "/other_ca.pem -days 2 -subj /CN=other-ca"),
        absl::StrCat("printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n"
                     "extendedKeyUsage=serverAuth\\n' > ", d, "/server.ext"),
        absl::StrCat("printf 'extendedKeyUsage=clientAuth\\n' > ", d, "/client.ext"),
        absl::StrCat("openssl req ", key, " -keyout ", d, "/server.key -out ", d,
                     "/server.csr -subj /CN=localhost"),
        absl::StrCat("openssl x509 -req -in ", d, "/server.csr -CA ", d, "/ca.pem -CAkey ",
                     d, "/ca.key -CAcreateserial -days 2 -extfile ", d,
                     "/server.ext -out ", d, "/server.pem"),
        absl::StrCat("openssl req ", key, " -keyout ", d, "/client.key -out ", d,
                     "/client.csr -subj /CN=client"),
        absl::StrCat("openssl x509 -req -in ", d, "/client.csr -CA ", d, "/ca.pem -CAkey ",
                     d, "/ca.key -CAcreateserial -days 2 -extfile ", d,
                     "/client.ext -out ", d, "/client.pem"),
        absl::StrCat("openssl req ", key, " -keyout ", d, "/stranger.key -out ", d,
                     "/stranger.csr -subj /CN=stranger"),
        absl::StrCat("openssl x509 -req -in ", d, "/stranger.csr -CA ", d,
                     "/other_ca.pem -CAkey ", d, "/other_ca.key -CAcreateserial -days 2"
                     " -extfile ", d, "/client.ext -out ", d, "/stranger.pem"),
    };
    ok_ = true;
    for (const std::string& c : cmds) {
      const std::string full = absl::StrCat(c, " >>", d, "/openssl.log 2>&1");
      if (std::system(full.c_str()) != 0) {
        ok_ = false;
        log_ = absl::StrCat("failed: ", c, "\n", ReadAll(d + "/openssl.log"));
        return;
      }
    }
  }
  ::metalserve::testing::TempDir dir_{"metalserve_pki_"};
  bool ok_ = false;
  std::string log_;
};

class TlsTest : public NativeFakeServerTest {
 protected:
  void StartTls(bool mutual) {
    const Pki& pki = Pki::Get();
    ASSERT_TRUE(pki.ok()) << pki.log();
    ServerOptions so = testing::LoopbackServerOptions();
    so.tls_cert_path = pki.path("server.pem");
    so.tls_key_path = pki.path("server.key");
    if (mutual) so.tls_client_ca_path = pki.path("ca.pem");
    StartServerAndConnect(so);
  }
  // A TLS client trusting `root_ca` (the test CA unless told), presenting
  // `cert` (or nothing).
  void ConnectTls(const std::string& cert = "", const std::string& root_ca = "ca") {
    const Pki& pki = Pki::Get();
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = pki.pem(root_ca + ".pem");
    if (!cert.empty()) {
      o.pem_cert_chain = pki.pem(cert + ".pem");
      o.pem_private_key = pki.pem(cert + ".key");
    }
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a fresh connection
    // gRPC 1.51 matches the target name against DNS SANs only, so the name
    // checked is "localhost" (the certificate also carries IP:127.0.0.1).
    args.SetSslTargetNameOverride("localhost");
    Connect(grpc::SslCredentials(o), args);
  }
  grpc::Status Probe() {
    PredictResponse resp;
    return Call(MakeRequest(1, 1), &resp, absl::Seconds(5));
  }
};

TEST_F(TlsTest, TlsCallSucceedsAndChecksServerCertificate) {
  StartTls(/*mutual=*/false);
  ConnectTls();
  grpc::Status s = Probe();
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
}

// The negative half of the test above: a client that trusts another CA
// must refuse the server's certificate.
TEST_F(TlsTest, ClientTrustingAnotherCaRefusesServerCertificate) {
  StartTls(/*mutual=*/false);
  ConnectTls(/*cert=*/"", /*root_ca=*/"other_ca");
  grpc::Status s = Probe();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_TRUE(runner_.batch_rows().empty());
}

TEST_F(TlsTest, PlaintextClientToTlsServerFails) {
  StartTls(/*mutual=*/false);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  Connect(grpc::InsecureChannelCredentials(), args);
  grpc::Status s = Probe();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_TRUE(runner_.batch_rows().empty());
}

TEST_F(TlsTest, MutualTlsAcceptsClientCertificateFromTrustedCa) {
  StartTls(/*mutual=*/true);
  ConnectTls("client");
  grpc::Status s = Probe();
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
}

TEST_F(TlsTest, MutualTlsRefusesClientWithoutCertificate) {
  StartTls(/*mutual=*/true);
  ConnectTls();
  grpc::Status s = Probe();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_TRUE(runner_.batch_rows().empty());
}

TEST_F(TlsTest, MutualTlsRefusesClientCertificateFromAnotherCa) {
  StartTls(/*mutual=*/true);
  ConnectTls("stranger");
  grpc::Status s = Probe();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_TRUE(runner_.batch_rows().empty());
}

}  // namespace
}  // namespace metalserve
