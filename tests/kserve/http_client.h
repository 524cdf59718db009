// A minimal HTTP/1.1 client over a loopback TCP socket for the REST tests:
// it sends exactly the bytes a test gives (so that malformed, partial and
// chunked requests can be sent) and reads one response. Not thread-safe:
// one HttpConnection per thread. The destructor closes the socket.
#ifndef METALSERVE_TESTS_KSERVE_HTTP_CLIENT_H_
#define METALSERVE_TESTS_KSERVE_HTTP_CLIENT_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace metalserve::testing {

struct HttpResponse {
  int status = 0;  // 0: no response (connection closed or timed out)
  absl::flat_hash_map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

class HttpConnection {
 public:
  // Connects to 127.0.0.1:`port`; every read waits at most `timeout`.
  explicit HttpConnection(int port, absl::Duration timeout = absl::Seconds(10));
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  bool connected() const { return fd_ >= 0; }
  // Sends raw bytes; false on error.
  bool Send(const std::string& bytes);
  // Reads one response (Content-Length framed); status 0 when none came.
  HttpResponse Read();
  // True when the server closed the connection within the timeout.
  bool AwaitClosed();

 private:
  const int timeout_ms_;
  int fd_ = -1;
  std::string buffered_;
};

// "METHOD path HTTP/1.1" with Host, Content-Length (when body is not empty
// or method is POST) and `extra_headers` ("Name: value\r\n" lines).
std::string RawRequest(const std::string& method, const std::string& path,
                       const std::string& body = "", const std::string& extra_headers = "");

// One request on a fresh connection.
HttpResponse HttpCall(int port, const std::string& method, const std::string& path,
                      const std::string& body = "", const std::string& extra_headers = "");

}  // namespace metalserve::testing

#endif  // METALSERVE_TESTS_KSERVE_HTTP_CLIENT_H_
