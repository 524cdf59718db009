#ifndef METALSERVE_SERVER_METRICS_HTTP_LISTENER_H_
#define METALSERVE_SERVER_METRICS_HTTP_LISTENER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct MHD_Daemon;

namespace metalserve {

// A listening TCP socket bound to `address` (host:port, [v6]:port; port 0
// picks one); *ipv6 tells its family. INVALID_ARGUMENT for a malformed
// address, UNAVAILABLE naming `what` ("/metrics"), the address and the
// system's reason when it cannot be bound. The caller owns the descriptor.
absl::StatusOr<int> BindListenSocket(const std::string& address, absl::string_view what,
                                     bool* ipv6);
// The port `fd` is bound to; 0 when it cannot be read.
int BoundPort(int fd);

struct HttpListenerOptions {
  // host:port to listen on ("127.0.0.1:9464", "0.0.0.0:9464", "[::1]:9464",
  // "localhost:9464"). Port 0 picks a free one; port() says which.
  std::string address;
  // A connection with no traffic for this long is closed: an idle client,
  // or one that sent half a request, holds a socket and nothing else, and
  // for at most this long. Rounded up to whole seconds (libmicrohttpd's
  // unit). Default 10 s, Prometheus' default scrape timeout.
  absl::Duration idle_timeout = absl::Seconds(10);
  // Connections served at once; more are accepted and closed at once, so
  // the descriptors a flood of clients can take are bounded. Default 64.
  int max_connections = 64;
};

// The /metrics HTTP listener: HTTP/1.0 and 1.1, GET or HEAD of /metrics
// answered 200 with `body()` as Prometheus text format 0.0.4; any other path
// 404, any other method 405.
//
// Served by libmicrohttpd from one polling thread (epoll where there is
// one) that multiplexes every connection, so idle or slow clients cannot
// hold a scrape back (unlike prometheus-cpp's exposer: two civetweb worker
// threads, each held by one connection for up to 30 s). The thread has the
// default stack size: civetweb's worker threads have a fixed 100 KiB stack,
// into which glibc places the process's static TLS, and a process whose
// libraries carry more than about 100 KB of it (OpenBLAS as libblas.so.3
// in the Debian image: 112,640 bytes) cannot start them at all.
//
// Thread-safety: `body` is called on the listener's thread, one request at
// a time; it must be thread-safe against the caller's other threads. The
// destructor closes the listening socket and every connection and joins the
// thread; no call to `body` runs after it returns.
class HttpListener {
 public:
  using BodyFn = std::function<std::string()>;

  // InvalidArgument for a malformed address or option; Unavailable naming
  // the address and the system's reason when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpListener>> Start(
      const HttpListenerOptions& options, BodyFn body);
  ~HttpListener();

  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // The port bound (the one picked when the address asked for 0).
  int port() const { return port_; }
  // Called on the listener's thread for each request.
  std::string Body() const { return body_(); }

 private:
  HttpListener(BodyFn body, int port) : body_(std::move(body)), port_(port) {}

  const BodyFn body_;
  const int port_;
  MHD_Daemon* daemon_ = nullptr;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_METRICS_HTTP_LISTENER_H_
