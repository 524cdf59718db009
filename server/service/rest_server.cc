#include "server/service/rest_server.h"

#include <arpa/inet.h>
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
#include "glog/logging.h"
#include "nlohmann/json.hpp"
#include "proto/dtype/dtype_map.h"
#include "server/metrics/http_listener.h"
#include "server/service/device_choice_json.h"
#include "server/service/kserve_codec.h"
#include "server/service/rest_call.h"
#include "server/service/rest_codec.h"
#include "server/service/rest_route.h"
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
constexpr absl::string_view kModelConfig = "http_ModelConfig";

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

void OnCompleted(void* cls, MHD_Connection* /*connection*/, void** con_cls,
                 MHD_RequestTerminationCode /*why*/) {
  auto* call = static_cast<RestServer::Call*>(*con_cls);
  auto* server = static_cast<RestServer*>(cls);
  if (call != nullptr) server->ReleaseBodyBytes(call->reserved);
  const bool submitted = call != nullptr && call->submitted;
  delete call;
  if (submitted) server->Completed();
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

// For absl::Condition: a count that has come down to zero.
bool IsZero(std::atomic<int64_t>* n) { return n->load() == 0; }

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

std::string PeerOf(MHD_Connection* connection) {
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  if (info == nullptr || info->client_addr == nullptr) return "unknown";
  char host[INET6_ADDRSTRLEN] = {};
  const sockaddr* a = info->client_addr;
  if (a->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(a);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
    return absl::StrCat("ipv4:", host, ":", ntohs(v4->sin_port));
  }
  if (a->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a);
    inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
    return absl::StrCat("ipv6:[", host, "]:", ntohs(v6->sin6_port));
  }
  return "unknown";
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

RestServer::RestServer(const RestOptions& options, const ModelLookup* models,
                       Metrics* metrics, Clock* clock, std::function<bool()> ready)
    : options_(options),
      models_(models),
      metrics_(metrics),
      clock_(clock != nullptr ? clock : Clock::RealClock()),
      ready_(std::move(ready)) {}

absl::StatusOr<std::unique_ptr<RestServer>> RestServer::Start(
    const RestOptions& o, const ModelLookup* models, Metrics* metrics, Clock* clock,
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
      new RestServer(o, models, metrics, clock, std::move(ready)));
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
      {MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&OnCompleted), s.get()}};
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

absl::Status RestServer::ReserveBodyBytes(int64_t n) {
  const int64_t limit = options_.max_buffered_bytes;
  int64_t held = buffered_bytes_.load();
  do {
    if (limit > 0 && held + n > limit) {
      return absl::UnavailableError(absl::StrCat(
          "the server holds ", held, " bytes of request bodies; ", n,
          " more would pass its limit of ", limit, " (--memory_quota_bytes); retry later"));
    }
  } while (!buffered_bytes_.compare_exchange_weak(held, held + n));
  return absl::OkStatus();
}

void RestServer::Resumed() {
  absl::MutexLock l(&mu_);
  suspended_.fetch_sub(1);
}

void RestServer::Completed() {
  absl::MutexLock l(&mu_);
  submitted_open_.fetch_sub(1);
}

RestServer::~RestServer() {
  if (daemon_ == nullptr) return;
  {
    // Every suspended connection must be resumed before the daemon stops.
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(&IsZero, &suspended_));
  }
  JoinRepositoryWorker();  // it has resumed its connection: it is done
  {
    // A resumed connection's answer is written by the daemon's thread after
    // the resume; stopping first would close it unsent. Bounded by the
    // connection timeout.
    absl::MutexLock l(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&IsZero, &submitted_open_),
                              options_.read_timeout + absl::Seconds(1))) {
      LOG(WARNING) << "http: " << submitted_open_.load()
                   << " answered request(s) still unsent at shutdown; closing";
    }
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
    if (options_.access_log != nullptr) call->peer = PeerOf(connection);
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
    if (n > 0) {
      if (absl::Status s = ReserveBodyBytes(static_cast<int64_t>(n)); !s.ok()) {
        call->answered = true;
        return QueueAnswer(connection, ErrorAnswer(s));
      }
      call->reserved = static_cast<int64_t>(n);
      call->body.reserve(static_cast<size_t>(n));
    }
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

namespace {

Json ModelMetadata(const ModelInfo& info) {
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
  // Extension (device_choice_json.h); KServe clients ignore unknown fields.
  if (Json choice = DeviceChoiceJson(info); !choice.is_null()) meta["device_choice"] = choice;
  return meta;
}

// Triton's /config body: the ModelConfig message's fields by their proto
// names, dims as numbers (protobuf's JSON would print int64 as strings).
Json ModelConfigJson(const inference::ModelConfig& config) {
  Json j = {{"name", config.name()}, {"platform", config.platform()},
            {"max_batch_size", config.max_batch_size()}};
  auto tensors = [](const auto& list) {
    Json out = Json::array();
    for (const auto& t : list) {
      out.push_back({{"name", t.name()},
                     {"data_type", inference::DataType_Name(t.data_type())},
                     {"dims", std::vector<int64_t>(t.dims().begin(), t.dims().end())}});
    }
    return out;
  };
  j["input"] = tensors(config.input());
  j["output"] = tensors(config.output());
  if (!config.parameters().empty()) {
    Json parameters = Json::object();
    for (const auto& [key, value] : config.parameters()) {
      parameters[key] = {{"string_value", value.string_value()}};
    }
    j["parameters"] = std::move(parameters);
  }
  return j;
}

}  // namespace

// Queues `answer`, counting it under `label` (none when empty).
int RestServer::Answer(MHD_Connection* connection, Call* call, absl::string_view label,
                       absl::StatusCode code, const RestAnswer& answer) {
  call->answered = true;
  if (metrics_ != nullptr && !label.empty()) {
    metrics_->RequestStarted(label);
    metrics_->RequestFinished(label, code, clock_->TimeNow() - call->start);
  }
  return QueueAnswer(connection, answer);
}

// Routes a fully received request.
int RestServer::Dispatch(MHD_Connection* connection, Call* call, const char* url,
                         const char* method) {
  const Route route = ParseRoute(url);
  if (route.kind == Route::kNone) {
    return Answer(connection, call, "", absl::StatusCode::kNotFound,
                  ErrorAnswer(absl::NotFoundError(absl::StrCat(
                      "no such path: ", ClientText(url),
                      "; see /v2, /v2/health/{live,ready}, /v2/models/{name}, /v2/repository/index"))));
  }
  const bool post = std::strcmp(method, MHD_HTTP_METHOD_POST) == 0;
  const bool get = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                   std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  if (route.post() ? !post : !get) {
    RestAnswer a = ErrorAnswer(absl::InvalidArgumentError(
        absl::StrCat("method ", ClientText(method), " is not allowed on ", ClientText(url),
                     "; use ", route.post() ? "POST" : "GET")));
    a.status = MHD_HTTP_METHOD_NOT_ALLOWED;
    return Answer(connection, call, "", absl::StatusCode::kInvalidArgument, a);
  }
  if (route.kind == Route::kInfer) return Infer(connection, call, route.name, route.version);
  if (route.kind == Route::kRepositoryIndex) return RepositoryIndex(connection, call);
  if (route.kind == Route::kRepositoryLoad || route.kind == Route::kRepositoryUnload) {
    return RepositoryControl(connection, call, route.kind == Route::kRepositoryLoad,
                             route.name);
  }
  const bool ready = ready_() && !stopping_.load();
  switch (route.kind) {
    case Route::kLive:
      return Answer(connection, call, kServerLive, absl::StatusCode::kOk,
                    JsonAnswer({{"live", true}}));
    case Route::kReady: {
      RestAnswer a = JsonAnswer({{"ready", ready}});
      if (!ready) a.status = MHD_HTTP_SERVICE_UNAVAILABLE;
      return Answer(connection, call, kServerReady, absl::StatusCode::kOk, a);
    }
    case Route::kServer:
      return Answer(connection, call, kServerMetadata, absl::StatusCode::kOk,
                    JsonAnswer({{"name", "metalserve"},
                                {"version", options_.server_version},
                                {"extensions", {"model_configuration", "binary_tensor_data", "model_repository"}}}));
    default: break;
  }
  const absl::StatusOr<ServableHandle> model =
      LookUpModel(*models_, "model name", route.name, route.version);
  const absl::string_view label = route.kind == Route::kModel         ? kModelMetadata
                                  : route.kind == Route::kModelConfig ? kModelConfig
                                                                      : kModelReady;
  if (!model.ok()) {
    return Answer(connection, call, label, model.status().code(), ErrorAnswer(model.status()));
  }
  ModelServable& servable = ServableOf(*model);
  const ModelInfo& info = servable.info();
  if (route.kind == Route::kModel) {
    return Answer(connection, call, label, absl::StatusCode::kOk,
                  JsonAnswer(ModelMetadata(info)));
  }
  if (route.kind == Route::kModelConfig) {
    return Answer(connection, call, label, absl::StatusCode::kOk,
                  JsonAnswer(ModelConfigJson(
                      KServeModelConfig(info, servable.batcher().options().max_batch_size))));
  }
  RestAnswer a = JsonAnswer({{"name", info.name}, {"ready", ready}});
  if (!ready) a.status = MHD_HTTP_SERVICE_UNAVAILABLE;
  return Answer(connection, call, label, absl::StatusCode::kOk, a);
}

}  // namespace metalserve
