#include "server/service/rest_server.h"

#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <unistd.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"
#include "server/metrics/http_listener.h"
#include "server/service/kserve_codec.h"
#include "server/service/rest_call.h"
#include "server/service/rest_codec.h"
#include "server/service/rpc_task.h"
#include "server/service/status_util.h"

namespace metalserve {

using Json = nlohmann::json;

namespace {

constexpr absl::string_view kServerLive = "http_ServerLive";
constexpr absl::string_view kServerReady = "http_ServerReady";
constexpr absl::string_view kServerMetadata = "http_ServerMetadata";
constexpr absl::string_view kModelMetadata = "http_ModelMetadata";
constexpr absl::string_view kModelReady = "http_ModelReady";

void LogFromDaemon(void* /*cls*/, const char* format, va_list ap) {
  char line[512];
  std::vsnprintf(line, sizeof(line), format, ap);
  LOG(WARNING) << "http: " << line;
}

MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url,
                     const char* method, const char* /*version*/, const char* upload_data,
                     size_t* upload_data_size, void** con_cls) {
  return static_cast<MHD_Result>(static_cast<RestServer*>(cls)->HandleRequest(
      connection, url, method, upload_data, upload_data_size, con_cls));
}

void OnCompleted(void* /*cls*/, MHD_Connection* /*connection*/, void** con_cls,
                 MHD_RequestTerminationCode /*why*/) {
  delete static_cast<RestServer::Call*>(*con_cls);
  *con_cls = nullptr;
}

RestAnswer JsonAnswer(const Json& j) {
  RestAnswer a;
  a.body = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  return a;
}

// OK, or 403 when the client presented no certificate its CA signed.
absl::Status CheckClientCertificate(MHD_Connection* connection) {
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (info == nullptr || info->tls_session == nullptr) {
    return absl::PermissionDeniedError("no TLS session");
  }
  auto session = static_cast<gnutls_session_t>(info->tls_session);
  unsigned int listed = 0;
  unsigned int verdict = 0;
  if (gnutls_certificate_get_peers(session, &listed) == nullptr || listed == 0) {
    return absl::PermissionDeniedError("a client certificate is required");
  }
  if (gnutls_certificate_verify_peers2(session, &verdict) != 0 || verdict != 0) {
    return absl::PermissionDeniedError(
        "the client certificate is not signed by the server's client CA");
  }
  return absl::OkStatus();
}

}  // namespace

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return MHD_HTTP_OK;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return MHD_HTTP_BAD_REQUEST;
    case absl::StatusCode::kNotFound: return MHD_HTTP_NOT_FOUND;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated: return MHD_HTTP_FORBIDDEN;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kResourceExhausted: return MHD_HTTP_SERVICE_UNAVAILABLE;
    case absl::StatusCode::kDeadlineExceeded: return MHD_HTTP_GATEWAY_TIMEOUT;
    case absl::StatusCode::kUnimplemented: return MHD_HTTP_NOT_IMPLEMENTED;
    default: return MHD_HTTP_INTERNAL_SERVER_ERROR;
  }
}

RestAnswer ErrorAnswer(const absl::Status& status) {
  RestAnswer a;
  a.status = HttpStatusOf(status.code());
  a.body = RestErrorBody(Truncated(status.message(), kMaxStatusMessageBytes));
  return a;
}

MHD_Result QueueAnswer(MHD_Connection* connection, const RestAnswer& answer) {
  MHD_Response* response = MHD_create_response_from_buffer(
      answer.body.size(), const_cast<char*>(answer.body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                          answer.binary ? "application/octet-stream"
                                        : answer.content_type.c_str());
  if (answer.binary) {
    MHD_add_response_header(response, kInferenceHeaderContentLength,
                            std::to_string(answer.json_length).c_str());
  }
  const MHD_Result result =
      MHD_queue_response(connection, static_cast<unsigned int>(answer.status), response);
  MHD_destroy_response(response);
  return result;
}

RestServer::RestServer(const RestOptions& options, Runner* runner, Batcher* batcher,
                       Metrics* metrics, Clock* clock, std::function<bool()> ready)
    : options_(options),
      runner_(runner),
      batcher_(batcher),
      metrics_(metrics),
      clock_(clock != nullptr ? clock : Clock::RealClock()),
      ready_(std::move(ready)) {}

absl::StatusOr<std::unique_ptr<RestServer>> RestServer::Start(
    const RestOptions& o, Runner* runner, Batcher* batcher, Metrics* metrics, Clock* clock,
    std::function<bool()> ready) {
  if (o.threads < 1 || o.max_connections < 1 || o.max_body_bytes < 1 ||
      o.read_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "http options: threads (", o.threads, "), max_connections (", o.max_connections,
        "), max_body_bytes (", o.max_body_bytes, ") and read_timeout (",
        absl::FormatDuration(o.read_timeout), ") must be positive"));
  }
  if (o.tls_cert_pem.empty() != o.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("http TLS needs both a certificate and a key");
  }
  bool ipv6 = false;
  absl::StatusOr<int> fd = BindListenSocket(o.address, "http", &ipv6);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<RestServer> s(
      new RestServer(o, runner, batcher, metrics, clock, std::move(ready)));
  s->listen_fd_ = *fd;
  s->port_ = BoundPort(*fd);
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
                       MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  if (ipv6) flags |= MHD_USE_IPv6;
  if (!o.tls_cert_pem.empty()) flags |= MHD_USE_TLS;
  const auto timeout_s =
      static_cast<unsigned int>(std::ceil(absl::ToDoubleSeconds(o.read_timeout)));
  std::vector<MHD_OptionItem> opts = {
      {MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&LogFromDaemon), nullptr},
      {MHD_OPTION_LISTEN_SOCKET, *fd, nullptr},
      {MHD_OPTION_THREAD_POOL_SIZE, o.threads, nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, o.max_connections, nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT, timeout_s, nullptr},
      {MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&OnCompleted), nullptr}};
  if (!o.tls_cert_pem.empty()) {
    opts.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(s->options_.tls_cert_pem.c_str())});
    opts.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(s->options_.tls_key_pem.c_str())});
    if (!o.tls_client_ca_pem.empty()) {
      opts.push_back({MHD_OPTION_HTTPS_MEM_TRUST, 0,
                      const_cast<char*>(s->options_.tls_client_ca_pem.c_str())});
    }
  }
  opts.push_back({MHD_OPTION_END, 0, nullptr});
  s->daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &OnRequest, s.get(),
                                MHD_OPTION_ARRAY, opts.data(), MHD_OPTION_END);
  if (s->daemon_ == nullptr) {
    close(*fd);
    s->listen_fd_ = -1;
    return absl::UnavailableError(absl::StrCat(
        "cannot serve http on ", o.address, ": libmicrohttpd did not start (see the log)"));
  }
  LOG(INFO) << "serving KServe v2 REST on " << o.address << " (port " << s->port_ << ")"
            << (o.tls_cert_pem.empty() ? "" : " with TLS")
            << (o.tls_client_ca_pem.empty() ? "" : " (mutual)") << ", threads=" << o.threads
            << " max_connections=" << o.max_connections
            << " read_timeout=" << absl::FormatDuration(o.read_timeout);
  return s;
}

void RestServer::StopAccepting() {
  stopping_.store(true);
  if (daemon_ == nullptr || listen_fd_ < 0) return;
  const MHD_socket fd = MHD_quiesce_daemon(daemon_);
  if (fd != MHD_INVALID_SOCKET) close(fd);
  listen_fd_ = -1;
}

void RestServer::Resumed() {
  absl::MutexLock l(&mu_);
  suspended_.fetch_sub(1);
}

RestServer::~RestServer() {
  if (daemon_ == nullptr) return;
  {
    // Every suspended connection must be resumed before the daemon stops.
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](std::atomic<int64_t>* n) { return n->load() == 0; }, &suspended_));
  }
  MHD_stop_daemon(daemon_);
  if (listen_fd_ >= 0) close(listen_fd_);
}

int RestServer::HandleRequest(MHD_Connection* connection, const char* url,
                              const char* method, const char* upload_data,
                              size_t* upload_data_size, void** con_cls) {
  auto* call = static_cast<Call*>(*con_cls);
  if (call == nullptr) {  // headers received; the body (if any) not yet read
    call = new Call();
    call->start = clock_->TimeNow();
    *con_cls = call;
    if (!options_.tls_client_ca_pem.empty()) {
      if (absl::Status s = CheckClientCertificate(connection); !s.ok()) {
        call->answered = true;
        return QueueAnswer(connection, ErrorAnswer(s));
      }
    }
    const char* chunked = MHD_lookup_connection_value(
        connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if (chunked != nullptr) {
      call->answered = true;
      RestAnswer a = ErrorAnswer(absl::InvalidArgumentError(
          "chunked request bodies are not accepted; send a Content-Length"));
      a.status = MHD_HTTP_LENGTH_REQUIRED;
      return QueueAnswer(connection, a);
    }
    const char* length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
    uint64_t n = 0;
    if (length != nullptr && absl::SimpleAtoi(length, &n) &&
        n > static_cast<uint64_t>(options_.max_body_bytes)) {
      call->answered = true;
      RestAnswer a = ErrorAnswer(absl::InvalidArgumentError(absl::StrCat(
          "the request body has ", n, " bytes, more than the limit of ",
          options_.max_body_bytes, " (--max_message_bytes)")));
      a.status = MHD_HTTP_CONTENT_TOO_LARGE;
      return QueueAnswer(connection, a);
    }
    if (n > 0) call->body.reserve(static_cast<size_t>(n));
    return MHD_YES;
  }
  if (*upload_data_size > 0) {  // a piece of the body
    if (!call->answered) call->body.append(upload_data, *upload_data_size);
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (call->answered) return MHD_YES;  // an early answer is queued
  if (call->submitted) {                // resumed: the task wrote the answer
    call->answered = true;
    return QueueAnswer(connection, call->answer);
  }
  return Dispatch(connection, call, url, method);
}

// Routes a fully received request.
int RestServer::Dispatch(MHD_Connection* connection, Call* call, const char* url,
                         const char* method) {
  const bool get = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                   std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  const bool post = std::strcmp(method, MHD_HTTP_METHOD_POST) == 0;
  std::vector<std::string> parts = absl::StrSplit(url, '/', absl::SkipEmpty());
  auto answer = [&](absl::string_view label, const absl::Status& s, const Json& j) {
    call->answered = true;
    if (metrics_ != nullptr && !label.empty()) {  // unrouted paths are not counted
      metrics_->RequestStarted(label);
      metrics_->RequestFinished(label, s.code(), clock_->TimeNow() - call->start);
    }
    return QueueAnswer(connection, s.ok() ? JsonAnswer(j) : ErrorAnswer(s));
  };
  const auto not_allowed = [&](const char* allowed) {
    call->answered = true;
    RestAnswer a = ErrorAnswer(absl::InvalidArgumentError(
        absl::StrCat("method ", ClientText(method), " is not allowed on ",
                     ClientText(url), "; use ", allowed)));
    a.status = MHD_HTTP_METHOD_NOT_ALLOWED;
    return QueueAnswer(connection, a);
  };
  if (parts.empty() || parts[0] != "v2") {
    return answer("", absl::NotFoundError(absl::StrCat("no such path: ", ClientText(url))), {});
  }
  const ModelInfo& info = runner_->info();
  if (parts.size() == 3 && parts[1] == "health" &&
      (parts[2] == "live" || parts[2] == "ready")) {
    if (!get) return not_allowed("GET");
    if (parts[2] == "live") return answer(kServerLive, absl::OkStatus(), {{"live", true}});
    const bool ready = ready_() && !stopping_.load();
    RestAnswer a = JsonAnswer({{"ready", ready}});
    if (!ready) a.status = MHD_HTTP_SERVICE_UNAVAILABLE;
    call->answered = true;
    if (metrics_ != nullptr) {
      metrics_->RequestStarted(kServerReady);
      metrics_->RequestFinished(kServerReady, absl::StatusCode::kOk,
                                clock_->TimeNow() - call->start);
    }
    return QueueAnswer(connection, a);
  }
  if (parts.size() == 1) {
    if (!get) return not_allowed("GET");
    return answer(kServerMetadata, absl::OkStatus(),
                  {{"name", "metalserve"},
                   {"version", options_.server_version},
                   {"extensions", {"model_configuration", "binary_tensor_data"}}});
  }
  // /v2/models/{name}[/versions/{v}][/ready|/infer]
  if (parts.size() < 3 || parts[1] != "models") {
    return answer("", absl::NotFoundError(absl::StrCat("no such path: ", ClientText(url))), {});
  }
  size_t next = 3;
  std::string version;
  if (parts.size() >= 5 && parts[3] == "versions") {
    version = parts[4];
    next = 5;
  }
  const std::string verb = parts.size() > next ? parts[next] : "";
  if (parts.size() > next + 1 || (!verb.empty() && verb != "ready" && verb != "infer")) {
    return answer("", absl::NotFoundError(absl::StrCat("no such path: ", ClientText(url))), {});
  }
  if (verb == "infer") {
    if (!post) return not_allowed("POST");
    return Infer(connection, call, parts[2], version);
  }
  if (!get) return not_allowed("GET");
  absl::Status model = CheckModelName("model name", parts[2], info);
  if (model.ok() && !version.empty() && version != info.version) {
    model = absl::NotFoundError(absl::StrCat(
        "version '", ClientText(version), "' of model '", info.name,
        "' is not served here; this server serves version '", info.version, "'"));
  }
  if (verb == "ready") {
    if (!model.ok()) return answer(kModelReady, model, {});
    const bool ready = ready_() && !stopping_.load();
    return answer(kModelReady,
                  ready ? absl::OkStatus() : absl::UnavailableError("the server is not ready"),
                  {{"name", info.name}, {"ready", ready}});
  }
  Json meta = {{"name", info.name}, {"versions", {info.version}},
               {"platform", "pytorch_libtorch"}};
  for (const char* side : {"inputs", "outputs"}) {
    Json tensors = Json::array();
    for (const TensorSpec& t : side[0] == 'i' ? info.inputs : info.outputs) {
      tensors.push_back({{"name", t.name},
                         {"datatype", std::string(KServeDatatype(t.dtype))},
                         {"shape", t.shape}});
    }
    meta[side] = std::move(tensors);
  }
  return answer(kModelMetadata, model, meta);
}

}  // namespace metalserve
