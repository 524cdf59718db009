// Unix domain sockets and several listen addresses on the real
// InferenceServer with a fake runner (issue 20): Predict over a socket and
// over TCP from one server, the socket file removed on shutdown, the
// exclusive-port rule for sockets (a live socket refused, a stale one
// replaced, a file that is not a socket left alone), and each entry of an
// address list validated.
//
// Every call carries a deadline; nothing sleeps.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/service/listen_address.h"
#include "server/service/server.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"
#include "tests/testing/temp_dir.h"

namespace metalserve {
namespace {

using ::metalserve::testing::ExpectDoubled;
using ::metalserve::testing::LoopbackServerOptions;
using ::metalserve::testing::MakeRequest;
using ::metalserve::testing::MetricsWithoutListener;
using ::metalserve::testing::NativeFakeServerTest;
using ::metalserve::testing::TempDir;
using ::testing::HasSubstr;

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// A socket file nobody listens on: what a killed server leaves behind.
void MakeStaleSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);  // the file stays
  ASSERT_TRUE(Exists(path));
}

class TransportUnixSocketTest : public NativeFakeServerTest {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }
  std::string SocketAddress() const { return "unix://" + socket_; }
  // One Predict through a fresh channel to `target`.
  grpc::Status CallVia(const std::string& target, const v1::PredictRequest& req,
                       v1::PredictResponse* resp) {
    auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
    auto stub = v1::Inference::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return stub->Predict(&ctx, req, resp);
  }

  TempDir dir_{"metalserve-uds-"};
  const std::string socket_ = dir_.File("m.sock");
};

TEST_F(TransportUnixSocketTest, ServesTcpAndUnixSocketAndRemovesSocketOnShutdown) {
  ServerOptions so = LoopbackServerOptions();
  so.address = absl::StrCat("127.0.0.1:0,", SocketAddress());
  StartServerAndConnect(so);  // channel_ goes to the TCP port
  ASSERT_GT(server_->port(), 1);
  ASSERT_TRUE(Exists(socket_));
  const v1::PredictRequest req = MakeRequest(2, 1.5f);
  v1::PredictResponse over_socket, over_tcp;
  ASSERT_TRUE(CallVia(SocketAddress(), req, &over_socket).ok());
  ExpectDoubled(req, over_socket);
  ASSERT_TRUE(Call(req, &over_tcp).ok());
  ExpectDoubled(req, over_tcp);
  server_->Shutdown(absl::Seconds(5));
  EXPECT_FALSE(Exists(socket_)) << socket_ << " left behind after shutdown";
}

TEST_F(TransportUnixSocketTest, SecondServerOnALiveSocketFailsAndFirstKeepsServing) {
  ServerOptions so = LoopbackServerOptions();
  so.address = SocketAddress();
  ASSERT_TRUE(StartFakeServer(so).ok());
  FakeRunner other_runner;
  auto other_metrics = MetricsWithoutListener();
  auto second = InferenceServer::Start(so, &other_runner, other_metrics.get());
  ASSERT_FALSE(second.ok()) << "a second server started on " << so.address;
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(socket_));
  EXPECT_THAT(second.status().message(), HasSubstr("already answers"));
  ASSERT_TRUE(Exists(socket_)) << "the failed start removed the live server's socket";
  v1::PredictResponse resp;
  EXPECT_TRUE(CallVia(SocketAddress(), MakeRequest(1, 1), &resp).ok());
}

TEST_F(TransportUnixSocketTest, StaleSocketFileIsReplacedAndServed) {
  MakeStaleSocket(socket_);
  ServerOptions so = LoopbackServerOptions();
  so.address = SocketAddress();
  ASSERT_TRUE(StartFakeServer(so).ok());
  const v1::PredictRequest req = MakeRequest(1, 3);
  v1::PredictResponse resp;
  ASSERT_TRUE(CallVia(SocketAddress(), req, &resp).ok());
  ExpectDoubled(req, resp);
}

TEST_F(TransportUnixSocketTest, PathThatIsNotASocketIsRefusedAndLeftAlone) {
  std::ofstream(socket_) << "not a socket";
  ServerOptions so = LoopbackServerOptions();
  so.address = SocketAddress();
  const absl::Status s = StartFakeServer(so);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr(socket_));
  EXPECT_THAT(s.message(), HasSubstr("not a socket"));
  std::ifstream in(socket_);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "not a socket");
}

TEST(TransportAddressListTest, RefusesEmptyRepeatedAndUnusableEntriesNamingThem) {
  auto code_and_message = [](const std::string& address) {
    ServerOptions so;
    so.address = address;
    return so.Validate();
  };
  absl::Status s = code_and_message("127.0.0.1:8500,");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("empty entry"));
  s = code_and_message("127.0.0.1:8500, 127.0.0.1:8500");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("given twice"));
  s = code_and_message("127.0.0.1:8500,localhost:99999");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'localhost:99999'"));
  s = code_and_message("unix:///no/such/folder/m.sock");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'/no/such/folder' does not exist"));
  s = code_and_message("unix:///tmp/" + std::string(120, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("at most 107 fit"));
  EXPECT_TRUE(code_and_message("127.0.0.1:0,[::1]:0,unix:///tmp/m.sock").ok());
}

TEST(TransportAddressListTest, UnixSocketPathReadsBothSpellings) {
  EXPECT_EQ(UnixSocketPath("unix:///run/m.sock"), "/run/m.sock");
  EXPECT_EQ(UnixSocketPath("unix:/run/m.sock"), "/run/m.sock");
  EXPECT_EQ(UnixSocketPath("unix:m.sock"), "m.sock");
  EXPECT_EQ(UnixSocketPath("unix-abstract:m"), std::nullopt);
  EXPECT_EQ(UnixSocketPath("127.0.0.1:8500"), std::nullopt);
}

}  // namespace
}  // namespace metalserve
