// RestServer: the Open Inference Protocol (KServe v2) REST API beside gRPC,
// over the same model lookup (model_lookup.h) and metrics: a request takes
// its model version's handle when it is admitted, as on gRPC.
//
//   GET  /v2/health/live                       200 {"live": true}
//   GET  /v2/health/ready                      200 {"ready": true}, 503 once
//                                              the server drains (the state
//                                              grpc.health.v1 reports)
//   GET  /v2                                   server metadata
//   GET  /v2/models/{name}[/versions/{v}]      model metadata
//   GET  /v2/models/{name}[/versions/{v}]/ready
//   POST /v2/models/{name}[/versions/{v}]/infer  JSON or binary tensors
//                                              (rest_codec.h)
//   POST /v2/repository/index                  [{name, version, state, reason}]
//   POST /v2/repository/models/{name}/load     Triton's model-repository
//   POST /v2/repository/models/{name}/unload   extension (rest_repository.cc)
//
// Errors are {"error": "..."} with the HTTP status of the gRPC code
// (HttpStatusOf); the messages are the gRPC path's (kserve_codec.h).
//
// Served by libmicrohttpd (docs/rest.md says why): a pool of `threads`
// polling threads (epoll) multiplexes at most `max_connections`
// connections, with keep-alive. A connection silent for `read_timeout`
// (a slow or stalled client, a body shorter than its Content-Length) is
// closed; it held a socket and a buffer, never an executor. An infer request
// is decoded and validated on the polling thread, handed to the batcher, and
// its connection suspended (it takes no polling time) until the executor
// answers it and resumes it: no thread waits on a batch. A repository load
// or unload runs on one worker thread (a second while one runs is refused
// 503), its connection suspended the same way. A body above
// `max_body_bytes` is refused 413 from its Content-Length before it is
// read; chunked bodies are refused 411.
//
// Ownership: does not own the lookup or metrics; they must outlive it. Thread-safety: StopAccepting() and the destructor may be called from
// any thread (not concurrently with each other). Destruction waits until
// every request handed to the batcher is answered (call it after the
// batcher's Shutdown, which answers them) and a running repository load or
// unload is done, then closes every connection and
// joins the polling threads.
#ifndef METALSERVE_SERVER_SERVICE_REST_SERVER_H_
#define METALSERVE_SERVER_SERVICE_REST_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/metrics/metrics.h"
#include "server/service/model_lookup.h"

struct MHD_Daemon;
struct MHD_Connection;

namespace metalserve {
class AccessLog;
class ModelRepository;
struct RestAnswer;  // rest_call.h
}  // namespace metalserve

namespace metalserve {

struct RestOptions {
  // host:port ("127.0.0.1:8000", "[::1]:8000", "0.0.0.0:8000"); port 0
  // picks a free one (see RestServer::port()). Empty: no REST server
  // (InferenceServer starts none; metalserve's --http_address defaults to
  // 127.0.0.1:8000).
  std::string address;
  // Polling threads. Default 2: the handlers only decode and enqueue.
  int threads = 2;
  // Connections served at once; more are accepted and closed at once.
  int max_connections = 256;
  // A connection with no traffic for this long is closed (whole seconds,
  // rounded up). Suspended connections (an infer in the batcher) do not
  // count down. Default 30 s.
  absl::Duration read_timeout = absl::Seconds(30);
  // Largest request body, bytes (the gRPC max_message_bytes).
  int64_t max_body_bytes = 64 << 20;
  // Request body bytes held at once over all connections (announced by
  // Content-Length, from the headers until the answer is sent); a request
  // that would pass it is refused 503 before its body is read. 0: no
  // bound. InferenceServer sets it to the gRPC memory quota.
  int64_t max_buffered_bytes = 0;
  // TLS: PEM contents (not paths). Empty cert: plaintext. A client CA
  // requires clients to present a certificate signed by it.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_client_ca_pem;
  std::string server_version = "0.0.0";
  // Where each infer outcome is logged (method http_ModelInfer, the
  // client's address as peer); null: nowhere. Not owned.
  AccessLog* access_log = nullptr;
  // Served by /v2/repository/...; null (--model=FILE): the index lists the
  // one model and load/unload are refused FAILED_PRECONDITION. Not owned.
  ModelRepository* repository = nullptr;
};

// The HTTP status for a gRPC-style code: 400 bad input, 404 not found, 503
// unavailable (queue full, draining), 504 deadline, 501 unimplemented, 500
// otherwise.
int HttpStatusOf(absl::StatusCode code);

class RestServer {
 public:
  // `ready` reports the readiness grpc.health.v1 serves; called on polling
  // threads. `metrics` may be null; `clock` null means the real clock.
  // INVALID_ARGUMENT naming the option for bad options; UNAVAILABLE naming
  // the address when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<RestServer>> Start(
      const RestOptions& options, const ModelLookup* models, Metrics* metrics,
      Clock* clock, std::function<bool()> ready);
  ~RestServer();

  RestServer(const RestServer&) = delete;
  RestServer& operator=(const RestServer&) = delete;

  int port() const { return port_; }
  // Stops accepting connections; requests on open connections are refused
  // 503 from now on, except those already handed to the batcher.
  void StopAccepting();

  // --- for the handlers (rest_handlers.cc) ---------------------------------
  struct Call;  // one request on one connection
  int HandleRequest(MHD_Connection* connection, const char* url, const char* method,
                    const char* upload_data, size_t* upload_data_size, void** con_cls);
  // An infer request handed to the batcher: its connection is suspended
  // until Resumed(), and its request open until MHD reports it completed
  // (its answer written, or the connection gone): Completed().
  void Suspended() {
    suspended_.fetch_add(1);
    submitted_open_.fetch_add(1);
  }
  void Resumed();
  void Completed();
  // Accounts `n` body bytes against max_buffered_bytes; UNAVAILABLE when
  // they do not fit. ReleaseBodyBytes gives them back.
  absl::Status ReserveBodyBytes(int64_t n);
  void ReleaseBodyBytes(int64_t n) { buffered_bytes_.fetch_sub(n); }

 private:
  RestServer(const RestOptions& options, const ModelLookup* models,
             Metrics* metrics, Clock* clock, std::function<bool()> ready);
  int Dispatch(MHD_Connection* connection, Call* call, const char* url, const char* method);
  int Answer(MHD_Connection* connection, Call* call, absl::string_view label,
             absl::StatusCode code, const RestAnswer& answer);
  int Infer(MHD_Connection* connection, Call* call, absl::string_view name,
            absl::string_view version);
  // rest_repository.cc: the index on the polling thread; a load or unload
  // on repository_worker_, the connection suspended until it is done.
  int RepositoryIndex(MHD_Connection* connection, Call* call);
  int RepositoryControl(MHD_Connection* connection, Call* call, bool load,
                        const std::string& name);
  void JoinRepositoryWorker();

  const RestOptions options_;
  const ModelLookup* const models_;
  Metrics* const metrics_;
  Clock* const clock_;
  const std::function<bool()> ready_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> suspended_{0};
  // Requests handed to a batcher (or the repository worker) whose answer MHD
  // has not yet finished writing: the destructor waits for them, so that a
  // resumed connection's answer is not cut off by the daemon's stop.
  std::atomic<int64_t> submitted_open_{0};
  std::atomic<int64_t> buffered_bytes_{0};
  absl::Mutex mu_;  // for waiting on suspended_ to reach 0
  std::atomic<bool> repository_busy_{false};  // a load or unload is running
  absl::Mutex worker_mu_;
  std::thread repository_worker_ ABSL_GUARDED_BY(worker_mu_);
  MHD_Daemon* daemon_ = nullptr;
  int listen_fd_ = -1;
  int port_ = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_REST_SERVER_H_
