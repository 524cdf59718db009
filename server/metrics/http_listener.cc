#include "server/metrics/http_listener.h"

#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace metalserve {
namespace {

constexpr char kMetricsPath[] = "/metrics";
constexpr char kTextFormat[] = "text/plain; version=0.0.4; charset=utf-8";
constexpr int kListenBacklog = 128;

// host:port, with [v6] brackets removed from the host.
absl::Status SplitHostPort(const std::string& address, absl::string_view what,
                           std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  int number = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1),
                        &number) ||
      number < 0 || number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " listen address must be host:port, got \"", address, "\""));
  }
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  *port = address.substr(colon + 1);
  return absl::OkStatus();
}

void LogFromDaemon(void* /*cls*/, const char* format, va_list ap) {
  char line[512];
  std::vsnprintf(line, sizeof(line), format, ap);
  LOG(WARNING) << "metrics listener: " << line;
}

MHD_Result Reply(MHD_Connection* connection, unsigned int code,
                 const std::string& body, const char* content_type) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                          content_type);
  const MHD_Result result = MHD_queue_response(connection, code, response);
  MHD_destroy_response(response);
  return result;
}

MHD_Result HandleRequest(void* cls, MHD_Connection* connection,
                         const char* url, const char* method,
                         const char* /*version*/, const char* /*upload_data*/,
                         size_t* /*upload_data_size*/, void** /*con_cls*/) {
  const auto* listener = static_cast<const HttpListener*>(cls);
  const bool get = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0;
  const bool head = std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  if (!get && !head) {
    return Reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED,
                 "only GET and HEAD are served\n", "text/plain");
  }
  if (std::strcmp(url, kMetricsPath) != 0) {
    return Reply(connection, MHD_HTTP_NOT_FOUND,
                 absl::StrCat("not found: ", url, " (metrics are at ",
                              kMetricsPath, ")\n"),
                 "text/plain");
  }
  return Reply(connection, MHD_HTTP_OK, listener->Body(), kTextFormat);
}

}  // namespace

// A listening socket bound to `address`, or Unavailable with the reason.
absl::StatusOr<int> BindListenSocket(const std::string& address, absl::string_view what,
                                     bool* ipv6) {
  std::string host, port;
  if (absl::Status s = SplitHostPort(address, what, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " listen address \"", address,
                     "\": cannot resolve host: ", gai_strerror(rc)));
  }
  std::string reason = "no address";
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) {
      reason = absl::StrCat("socket: ", std::strerror(errno));
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        listen(fd, kListenBacklog) != 0) {
      reason = std::strerror(errno);
      close(fd);
      fd = -1;
      continue;
    }
    *ipv6 = ai->ai_family == AF_INET6;
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve ", what, " on ", address, ": ", reason));
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Start(
    const HttpListenerOptions& options, BodyFn body) {
  if (options.idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics listener idle_timeout must be positive, got ",
                     absl::FormatDuration(options.idle_timeout)));
  }
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics listener max_connections must be at least 1, "
                     "got ", options.max_connections));
  }
  bool ipv6 = false;
  absl::StatusOr<int> fd = BindListenSocket(options.address, "/metrics", &ipv6);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<HttpListener> listener(
      new HttpListener(std::move(body), BoundPort(*fd)));
  const auto timeout_s = static_cast<unsigned int>(
      std::ceil(absl::ToDoubleSeconds(options.idle_timeout)));
  unsigned int flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
  if (ipv6) flags |= MHD_USE_IPv6;
  listener->daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &HandleRequest, listener.get(),
      // First, so that it receives the messages about the other options.
      MHD_OPTION_EXTERNAL_LOGGER, &LogFromDaemon, nullptr,
      MHD_OPTION_LISTEN_SOCKET, static_cast<MHD_socket>(*fd),
      MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,
      MHD_OPTION_CONNECTION_LIMIT,
      static_cast<unsigned int>(options.max_connections), MHD_OPTION_END);
  if (listener->daemon_ == nullptr) {
    close(*fd);
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on ", options.address,
                     ": libmicrohttpd did not start (see the log)"));
  }
  return listener;
}

HttpListener::~HttpListener() {
  // Closes the listening socket and every connection, joins the thread.
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace metalserve
