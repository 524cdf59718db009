#include "common/unix_socket_buffers.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <utility>
#include <vector>

#include "grpc/support/sync.h"
#include "grpcpp/support/channel_arguments.h"

// gRPC's socket mutator interface (src/core/lib/iomgr/socket_mutator.h in
// gRPC's sources, not installed; see the header). Layout only: nothing of
// gRPC's is called through these declarations, gRPC calls into them.
typedef enum {
  GRPC_FD_CLIENT_CONNECTION_USAGE,
  GRPC_FD_SERVER_LISTENER_USAGE,
  GRPC_FD_SERVER_CONNECTION_USAGE,
} grpc_fd_usage;

typedef struct {
  int fd;
  grpc_fd_usage usage;
} grpc_mutate_socket_info;

struct grpc_socket_mutator_vtable {
  bool (*mutate_fd)(int fd, grpc_socket_mutator* mutator);
  int (*compare)(grpc_socket_mutator* a, grpc_socket_mutator* b);
  void (*destroy)(grpc_socket_mutator* mutator);
  bool (*mutate_fd_2)(const grpc_mutate_socket_info* info, grpc_socket_mutator* mutator);
};

struct grpc_socket_mutator {
  const grpc_socket_mutator_vtable* vtable;
  gpr_refcount refcount;
};

namespace metalserve {
namespace {

struct UnixBufferMutator {
  grpc_socket_mutator base;  // first: gRPC holds a pointer to it
  int bytes = 0;
};

const UnixBufferMutator* Self(grpc_socket_mutator* m) {
  return reinterpret_cast<const UnixBufferMutator*>(m);
}

// One buffer: on Linux first through the *FORCE option, which is not
// capped at net.core.wmem_max / rmem_max (212,992 bytes unless raised, below
// a 602 KB request) and succeeds for a process with CAP_NET_ADMIN (root
// outside a container that drops it); else, or where it fails, the plain
// option, which the kernel caps.
void SetBuffer(int fd, [[maybe_unused]] int force_option, int option, int bytes) {
#ifdef __linux__
  if (setsockopt(fd, SOL_SOCKET, force_option, &bytes, sizeof(bytes)) == 0) return;
#endif
  (void)setsockopt(fd, SOL_SOCKET, option, &bytes, sizeof(bytes));
}

// Sets both buffers on a Unix-domain socket; every other socket is left as
// it is. Never fails the connection: a buffer the kernel refuses or caps
// only leaves the default.
void SetBuffers(int fd, int bytes) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      addr.ss_family != AF_UNIX) {
    return;
  }
#ifdef __linux__
  SetBuffer(fd, SO_SNDBUFFORCE, SO_SNDBUF, bytes);
  SetBuffer(fd, SO_RCVBUFFORCE, SO_RCVBUF, bytes);
#else
  SetBuffer(fd, 0, SO_SNDBUF, bytes);
  SetBuffer(fd, 0, SO_RCVBUF, bytes);
#endif
}

// `bytes` as setsockopt takes it.
int SocketOptionBytes(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>(bytes, 1, INT_MAX));
}

bool MutateFd(int fd, grpc_socket_mutator* m) {
  SetBuffers(fd, Self(m)->bytes);
  return true;
}

bool MutateFd2(const grpc_mutate_socket_info* info, grpc_socket_mutator* m) {
  // A listener's buffers are not what its accepted connections get.
  if (info->usage != GRPC_FD_SERVER_LISTENER_USAGE) SetBuffers(info->fd, Self(m)->bytes);
  return true;
}

int Compare(grpc_socket_mutator* a, grpc_socket_mutator* b) {
  const int x = Self(a)->bytes, y = Self(b)->bytes;
  return x < y ? -1 : (x > y ? 1 : 0);
}

void Destroy(grpc_socket_mutator* m) {
  delete reinterpret_cast<UnixBufferMutator*>(m);
}

constexpr grpc_socket_mutator_vtable kVtable = {MutateFd, Compare, Destroy, MutateFd2};

class UnixSocketBufferServerOption final : public grpc::ServerBuilderOption {
 public:
  explicit UnixSocketBufferServerOption(int64_t bytes) : bytes_(bytes) {}
  void UpdateArguments(grpc::ChannelArguments* args) override {
    args->SetSocketMutator(NewUnixSocketBufferMutator(bytes_));
  }
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*) override {}

 private:
  const int64_t bytes_;
};

}  // namespace

grpc_socket_mutator* NewUnixSocketBufferMutator(int64_t bytes) {
  auto* m = new UnixBufferMutator;
  m->base.vtable = &kVtable;
  gpr_ref_init(&m->base.refcount, 1);
  m->bytes = SocketOptionBytes(bytes);
  return &m->base;
}

std::unique_ptr<grpc::ServerBuilderOption> UnixSocketBufferOption(int64_t bytes) {
  return std::make_unique<UnixSocketBufferServerOption>(bytes);
}

absl::StatusOr<int64_t> UnixSocketBufferGranted(int64_t bytes) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    return absl::InternalError("socketpair(AF_UNIX) failed");
  }
  SetBuffers(fds[0], SocketOptionBytes(bytes));
  int granted = 0;
  socklen_t len = sizeof(granted);
  const int rc = getsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &granted, &len);
  close(fds[0]);
  close(fds[1]);
  if (rc != 0) return absl::InternalError("getsockopt(SO_SNDBUF) failed");
  return static_cast<int64_t>(granted);
}

}  // namespace metalserve
