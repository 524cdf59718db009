// The listen addresses of ServerOptions::address: a comma-separated list of
// host:port, [ipv6]:port, unix:path / unix:///abs/path and
// unix-abstract:name entries, e.g. "127.0.0.1:8500,unix:///run/metalserve.sock".
//
// Unix socket files get the exclusive-port rule TCP ports have: gRPC removes
// whatever socket file is at the path before it binds, so a second server
// would silently take over the first one's socket. PrepareUnixSocket refuses
// a path a live server answers on, removes a stale socket (no one listening:
// a server that was killed) with a log line, and refuses to touch a path that
// is not a socket. The server removes its socket files on shutdown.
//
// Thread-safety: free functions; the file-system ones race with other
// processes as any check-then-bind does (two servers starting on one path in
// the same millisecond can both pass the check).
#ifndef METALSERVE_SERVER_SERVICE_LISTEN_ADDRESS_H_
#define METALSERVE_SERVER_SERVICE_LISTEN_ADDRESS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace metalserve {

// The entries of a comma-separated address list, spaces around each
// trimmed; an empty entry is kept (and refused by validation).
std::vector<std::string> SplitAddresses(absl::string_view list);

// The socket file of a "unix:" address ("unix:///run/m.sock" -> "/run/m.sock",
// "unix:m.sock" -> "m.sock"); nullopt for TCP and unix-abstract addresses.
std::optional<std::string> UnixSocketPath(absl::string_view address);

// INVALID_ARGUMENT naming the address when its socket path is longer than a
// sockaddr_un holds or its folder does not exist.
absl::Status ValidateUnixSocketPath(absl::string_view address, const std::string& path);

// Before binding `path`: OK when nothing is there; removes a stale socket
// (connection refused) and logs it; UNAVAILABLE when a server answers on it
// or it is not a socket, naming the path.
absl::Status PrepareUnixSocket(const std::string& path);

// Removes the socket file at `path` if one is still there (shutdown).
void RemoveUnixSocket(const std::string& path);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_LISTEN_ADDRESS_H_
