// Socket buffer sizes for gRPC's Unix-domain connections.
//
// A Unix stream socket moves a message through the sender's send buffer:
// Linux charges each write to the sender's SO_SNDBUF (net.core.wmem_default,
// 208 KiB unless raised) and blocks the writer once it is full, so a
// 602 KB request crosses in three or more writes, each one a wake-up of the
// reader and the writer; macOS's default (net.local.stream.sendspace and
// recvspace) is 8 KiB, about 75 of them. TCP loopback tunes its buffers by
// itself and is left alone. Measured on this project's development VM
// (docs/performance.md, "Unix socket buffers"): with 1 MiB buffers the
// echo server's CPU per 602 KB request over a socket fell by about 20 %, and
// the null runner's with it.
//
// gRPC offers no public way to set a socket option on the connections it
// makes and accepts other than a grpc_socket_mutator, whose definition is in
// a gRPC-internal header that is not installed. This file declares the
// same three types (unchanged from gRPC 1.39 to today's releases: a vtable
// of four functions, the mutator as a vtable pointer and a refcount) and
// fills them in itself; unix_socket_buffers_test checks on every build that
// gRPC calls the mutator on both ends of a real connection.
//
// Thread-safety: the mutator is immutable; gRPC may call it from any thread.
#ifndef METALSERVE_COMMON_UNIX_SOCKET_BUFFERS_H_
#define METALSERVE_COMMON_UNIX_SOCKET_BUFFERS_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "grpc/grpc.h"
#include "grpcpp/server_builder.h"

namespace metalserve {

// Default for the programs' --unix_socket_buffer_bytes: room for a
// 602 KB request and its framing in one write on Linux (which doubles the
// figure asked for) and on macOS.
inline constexpr int64_t kDefaultUnixSocketBufferBytes = 1 << 20;

// A new mutator that sets SO_SNDBUF and SO_RCVBUF to `bytes` on every
// connected Unix-domain socket it is shown (client connections and
// connections a server accepts), and leaves every other socket as it is.
// On Linux it asks with SO_SNDBUFFORCE / SO_RCVBUFFORCE first, which
// net.core.wmem_max / rmem_max do not cap (a process with CAP_NET_ADMIN);
// otherwise the kernel may cap the figure (Linux: those two sysctls, whose
// default of 212,992 bytes is below a 602 KB request;
// UnixSocketBufferGranted says what a socket gets). One reference,
// owned by whoever it is handed to (grpc::ChannelArguments::SetSocketMutator
// takes it). `bytes` must be positive.
grpc_socket_mutator* NewUnixSocketBufferMutator(int64_t bytes);

// A ServerBuilder option that installs NewUnixSocketBufferMutator(bytes) on
// the server's connections.
std::unique_ptr<grpc::ServerBuilderOption> UnixSocketBufferOption(int64_t bytes);

// The send buffer a Unix-domain socket gets when `bytes` is asked for, read
// back from a socket pair: Linux doubles the figure (for its bookkeeping)
// and, without CAP_NET_ADMIN, caps it at net.core.wmem_max; macOS caps it
// at kern.ipc.maxsockbuf. For the programs' start-up log line.
absl::StatusOr<int64_t> UnixSocketBufferGranted(int64_t bytes);

}  // namespace metalserve

#endif  // METALSERVE_COMMON_UNIX_SOCKET_BUFFERS_H_
