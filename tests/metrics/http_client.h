#ifndef METALSERVE_TESTS_METRICS_HTTP_CLIENT_H_
#define METALSERVE_TESTS_METRICS_HTTP_CLIENT_H_

// A blocking loopback TCP client for the /metrics listener tests: raw
// sockets, so a test can hold connections idle or send half a request.

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace metalserve {

// A TCP connection to 127.0.0.1:`port`, closed on destruction. Every read
// and write gives up after `io_timeout`.
class LoopbackConnection {
 public:
  LoopbackConnection(int port, absl::Duration io_timeout)
      : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    if (fd_ < 0) return;
    timeval tv = absl::ToTimeval(io_timeout);
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ =
        connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~LoopbackConnection() {
    if (fd_ >= 0) close(fd_);
  }
  LoopbackConnection(const LoopbackConnection&) = delete;
  LoopbackConnection& operator=(const LoopbackConnection&) = delete;

  bool connected() const { return connected_; }

  bool Send(absl::string_view bytes) {
    return send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }

  // Reads until a whole response (headers and Content-Length bytes of body)
  // has arrived, the peer closes, or a read times out; what arrived.
  std::string ReadResponse() {
    std::string response;
    char buffer[4096];
    ssize_t n;
    while ((n = recv(fd_, buffer, sizeof(buffer), 0)) > 0) {
      response.append(buffer, static_cast<size_t>(n));
      if (Complete(response)) break;
    }
    return response;
  }

  // 0 when the peer closed the connection, -1 when the read timed out or
  // failed, else the bytes read.
  ssize_t ReadSome() {
    char buffer[256];
    return recv(fd_, buffer, sizeof(buffer), 0);
  }

 private:
  static bool Complete(const std::string& response) {
    const size_t header_end = response.find("\r\n\r\n");
    if (header_end == std::string::npos) return false;
    const std::string kLength = "Content-Length: ";
    const size_t at = response.find(kLength);
    if (at == std::string::npos || at > header_end) return false;
    const size_t value = at + kLength.size();
    size_t length = 0;
    if (!absl::SimpleAtoi(absl::string_view(response).substr(
                              value, response.find("\r\n", value) - value),
                          &length)) {
      return false;
    }
    return response.size() >= header_end + 4 + length;
  }

  const int fd_;
  bool connected_ = false;
};

// One request on a fresh connection; the response, or what arrived of it.
inline std::string HttpRequest(int port, absl::string_view method,
                               absl::string_view path,
                               absl::Duration io_timeout = absl::Seconds(10)) {
  LoopbackConnection c(port, io_timeout);
  if (!c.connected()) return "connect failed";
  if (!c.Send(absl::StrCat(method, " ", path,
                           " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           "Connection: close\r\n\r\n"))) {
    return "send failed";
  }
  return c.ReadResponse();
}

}  // namespace metalserve

#endif  // METALSERVE_TESTS_METRICS_HTTP_CLIENT_H_
