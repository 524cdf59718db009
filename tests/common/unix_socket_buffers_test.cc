// NewUnixSocketBufferMutator and UnixSocketBufferOption, observed on real
// connections: a gRPC server and channel over a Unix socket (and over TCP
// loopback), one health check each, then the process's own socket fds read
// back with getsockopt. Without the mutator both ends keep the kernel's
// default buffers; a TCP connection keeps them with it. Above Linux's
// net.core.wmem_max cap, a process allowed SO_SNDBUFFORCE still gets the
// figure.
#include "common/unix_socket_buffers.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/testing/temp_dir.h"

namespace metalserve {
namespace {

// Small enough that every kernel grants it, and unlike any default:
// Linux reports twice what was asked (212,992 by default), macOS as asked.
constexpr int64_t kAsked = 48 * 1024;

struct Buffers {
  int send = 0;
  int receive = 0;
};

int Option(int fd, int name) {
  int value = 0;
  socklen_t len = sizeof(value);
  EXPECT_EQ(getsockopt(fd, SOL_SOCKET, name, &value, &len), 0);
  return value;
}

// The process's open descriptors above stderr (no /proc on macOS: each
// number is asked).
std::vector<int> OpenFds() {
  std::vector<int> fds;
  for (int fd = 3; fd < 4096; ++fd) {
    if (fcntl(fd, F_GETFD) != -1) fds.push_back(fd);
  }
  return fds;
}

// The process's connected sockets whose local (server end) or peer (client
// end) address is the Unix socket `path`.
std::vector<Buffers> UnixEnds(const std::string& path) {
  std::vector<Buffers> out;
  for (int fd : OpenFds()) {
    for (auto get : {getsockname, getpeername}) {
      sockaddr_un addr{};
      socklen_t len = sizeof(addr);
      if (get(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
      // gRPC may keep the URI's extra slashes ("unix:///tmp/x" binds
      // "///tmp/x", the same file).
      const std::string name = addr.sun_path;
      if (addr.sun_family != AF_UNIX || name.size() < path.size() ||
          name.compare(name.size() - path.size(), path.size(), path) != 0) {
        continue;
      }
      // The listener's own name is the path too; it has no peer.
      sockaddr_un peer{};
      socklen_t peer_len = sizeof(peer);
      if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
      out.push_back({Option(fd, SO_SNDBUF), Option(fd, SO_RCVBUF)});
      break;
    }
  }
  return out;
}

// The port of an AF_INET or AF_INET6 address (gRPC's sockets for
// 127.0.0.1 may be IPv6 ones holding a v4-mapped address); -1 otherwise.
int PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

// The process's connected TCP sockets to or from `port`.
std::vector<Buffers> TcpEnds(int port) {
  std::vector<Buffers> out;
  for (int fd : OpenFds()) {
    sockaddr_storage self{}, peer{};
    socklen_t a = sizeof(self), b = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &a) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &b) != 0) {
      continue;
    }
    if (PortOf(self) == port || PortOf(peer) == port) {
      out.push_back({Option(fd, SO_SNDBUF), Option(fd, SO_RCVBUF)});
    }
  }
  return out;
}

// Answers every health check SERVING, on the callback API.
class Health final : public grpc::health::v1::Health::CallbackService {
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const grpc::health::v1::HealthCheckRequest*,
                                  grpc::health::v1::HealthCheckResponse* response) override {
    response->set_status(grpc::health::v1::HealthCheckResponse::SERVING);
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

class UnixSocketBuffersTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }

  // Starts a server on `address` (with the option when `on`), checks health
  // once over a channel (with the mutator when `on`) and keeps both open.
  void Connect(const std::string& address, bool on, int* port = nullptr,
               int64_t asked = kAsked) {
    grpc::ServerBuilder builder;
    builder.RegisterService(&health_);
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
    if (on) builder.SetOption(UnixSocketBufferOption(asked));
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    grpc::ChannelArguments args;
    if (on) args.SetSocketMutator(NewUnixSocketBufferMutator(asked));
    const std::string target =
        port != nullptr ? "127.0.0.1:" + std::to_string(*port) : address;
    channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(stub->Check(&ctx, request, &response).ok());
  }

  // Connects over the Unix socket with `asked` on both ends, then expects
  // both of the connection's ends to hold `granted` send and receive bytes.
  void ExpectBothUnixEndsGet(int64_t asked, int64_t granted) {
    Connect("unix://" + path_, /*on=*/true, nullptr, asked);
    const std::vector<Buffers> ends = UnixEnds(path_);
    ASSERT_EQ(ends.size(), 2u) << "the client's end and the server's";
    for (const Buffers& b : ends) {
      EXPECT_EQ(b.send, granted);
      EXPECT_EQ(b.receive, granted);
    }
    server_->Shutdown();
  }

  metalserve::testing::TempDir dir_{"metalserve-sockbuf-"};
  const std::string path_ = dir_.File("s.sock");
  Health health_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(UnixSocketBuffersTest, BothEndsOfAUnixConnectionGetTheBuffers) {
  const int64_t granted = UnixSocketBufferGranted(kAsked).value();
  EXPECT_GE(granted, kAsked);
  ExpectBothUnixEndsGet(kAsked, granted);
}

#ifdef __linux__
// The plain option is capped at net.core.wmem_max (212,992 bytes by default,
// below a 602 KB request); a process allowed SO_SNDBUFFORCE (CAP_NET_ADMIN)
// gets what it asks for above that cap.
TEST_F(UnixSocketBuffersTest, AboveTheSysctlCapTheForceOptionGrantsTheFigure) {
  int cap = 0;
  FILE* f = fopen("/proc/sys/net/core/wmem_max", "r");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(fscanf(f, "%d", &cap), 1);
  fclose(f);
  if (cap > INT_MAX / 4) GTEST_SKIP() << "net.core.wmem_max " << cap << " leaves no room above it";
  const int64_t asked = 2 * static_cast<int64_t>(cap);
  int probe[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, probe), 0);
  const int bytes = static_cast<int>(asked);
  const bool may_force =
      setsockopt(probe[0], SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) == 0;
  close(probe[0]);
  close(probe[1]);
  const int64_t granted = UnixSocketBufferGranted(asked).value();
  if (!may_force) {
    EXPECT_LE(granted, 2 * static_cast<int64_t>(cap));
    GTEST_SKIP() << "no CAP_NET_ADMIN here: the plain option's cap applies ("
                 << granted << " bytes granted for " << asked << ")";
  }
  // Linux doubles what it grants: the plain option gives at most 2 * cap.
  EXPECT_GT(granted, 2 * static_cast<int64_t>(cap)) << "net.core.wmem_max is " << cap;
  ExpectBothUnixEndsGet(asked, granted);
}
#endif

TEST_F(UnixSocketBuffersTest, WithoutTheMutatorTheKernelDefaultsStay) {
  const int64_t granted = UnixSocketBufferGranted(kAsked).value();
  Connect("unix://" + path_, /*on=*/false);
  const std::vector<Buffers> ends = UnixEnds(path_);
  ASSERT_EQ(ends.size(), 2u);
  for (const Buffers& b : ends) EXPECT_NE(b.send, granted);
  server_->Shutdown();
}

TEST_F(UnixSocketBuffersTest, TcpConnectionsAreLeftToTheKernel) {
  const int64_t granted = UnixSocketBufferGranted(kAsked).value();
  int port = 0;
  Connect("127.0.0.1:0", /*on=*/true, &port);
  ASSERT_GT(port, 0);
  const std::vector<Buffers> ends = TcpEnds(port);
  ASSERT_EQ(ends.size(), 2u);
  for (const Buffers& b : ends) {
    EXPECT_NE(b.send, granted);
    EXPECT_NE(b.receive, granted);
  }
  server_->Shutdown();
}

}  // namespace
}  // namespace metalserve
