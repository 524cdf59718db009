#include "tests/kserve/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace metalserve::testing {
HttpConnection::HttpConnection(int port, absl::Duration timeout)
    : timeout_ms_(static_cast<int>(absl::ToInt64Milliseconds(timeout))) {
  fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd_);
    fd_ = -1;
  }
}

HttpConnection::~HttpConnection() {
  if (fd_ >= 0) close(fd_);
}

bool HttpConnection::Send(const std::string& bytes) {
  size_t sent = 0;
  while (fd_ >= 0 && sent < bytes.size()) {
    const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return fd_ >= 0;
}

// Appends what arrives within the timeout; false on close, error or timeout.
static bool ReadMore(int fd, int timeout_ms, std::string* buffered) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return false;
  char chunk[65536];
  const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
  if (n <= 0) return false;
  buffered->append(chunk, static_cast<size_t>(n));
  return true;
}

HttpResponse HttpConnection::Read() {
  HttpResponse r;
  size_t end;
  while ((end = buffered_.find("\r\n\r\n")) == std::string::npos) {
    if (!ReadMore(fd_, timeout_ms_, &buffered_)) return r;
  }
  std::vector<std::string> lines = absl::StrSplit(buffered_.substr(0, end), "\r\n");
  std::vector<std::string> first = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (first.size() < 2 || !absl::SimpleAtoi(first[1], &r.status)) return r;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    r.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  size_t length = 0;
  if (auto it = r.headers.find("content-length"); it != r.headers.end()) {
    (void)absl::SimpleAtoi(it->second, &length);
  }
  buffered_.erase(0, end + 4);
  while (buffered_.size() < length) {
    if (!ReadMore(fd_, timeout_ms_, &buffered_)) {
      r.status = 0;
      return r;
    }
  }
  r.body = buffered_.substr(0, length);
  buffered_.erase(0, length);
  return r;
}

bool HttpConnection::AwaitClosed() {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, timeout_ms_) <= 0) return false;
  char c;
  return recv(fd_, &c, 1, 0) <= 0;
}

std::string RawRequest(const std::string& method, const std::string& path,
                       const std::string& body, const std::string& extra_headers) {
  std::string r = absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                               extra_headers);
  if (!body.empty() || method == "POST") {
    absl::StrAppend(&r, "Content-Length: ", body.size(), "\r\n");
  }
  absl::StrAppend(&r, "\r\n", body);
  return r;
}

HttpResponse HttpCall(int port, const std::string& method, const std::string& path,
                      const std::string& body, const std::string& extra_headers) {
  HttpConnection c(port);
  if (!c.Send(RawRequest(method, path, body, extra_headers))) return {};
  return c.Read();
}

}  // namespace metalserve::testing
