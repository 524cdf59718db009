// InferenceServer: the gRPC server with the native Inference service, the
// KServe service, the standard health service and reflection, and the REST
// front end, serving the model versions a ModelLookup (model_lookup.h) hands
// out: the models of a repository, or one runner behind its own batcher.
//
// Lifecycle: Start() binds and reports SERVING (the models are already
// loaded and warmed up). Shutdown(): health NOT_SERVING, stop accepting,
// answer every accepted request (every served version's batcher drains
// through its model), then end what is still open (streams such as
// health Watch and reflection, requests whose message is still arriving) and
// return; the REST server stops accepting with gRPC and stops once the
// batcher has answered what it accepted; only an accepted request still running at the timeout is cut off.
// The destructor calls Shutdown().
//
// Thread-safety: Shutdown() and SetServing() may be called from any thread.
// Does not own the runner, lookup, repository or metrics.
#ifndef METALSERVE_SERVER_SERVICE_SERVER_H_
#define METALSERVE_SERVER_SERVICE_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/batcher/batcher.h"
#include "common/clock.h"
#include "common/unix_socket_buffers.h"
#include "server/metrics/metrics.h"
#include "server/repository/model_repository.h"
#include "server/runtime/runner.h"
#include "server/service/accepted_calls.h"
#include "server/service/async_unary.h"
#include "server/service/unread_responses.h"
#include "server/service/model_lookup.h"
#include "server/service/rest_server.h"
#include "server/service/shared_memory.h"

namespace grpc {
class Server;
class ServerBuilder;
class ServerCredentials;
class Service;
}  // namespace grpc

namespace metalserve {

class AccessLog;
class HeldBytesBudget;
class InferenceService;
class KServeService;
class RestServer;

struct ServerOptions {
  // Where to listen: host:port (IPv6 hosts in brackets, "[::1]:8500"),
  // unix:/path or unix:///path (a Unix domain socket), or several of these
  // separated by commas ("127.0.0.1:8500,unix:///run/metalserve.sock"). A
  // port is required, in [0, 65535]; 0 picks a free one (see port()). Bound
  // exclusively: a second server on a port or a live socket fails to start;
  // a stale socket file (no server answers on it) is removed with a log
  // line, and the server removes its socket files on shutdown
  // (listen_address.h).
  std::string address = "127.0.0.1:8500";
  // Largest gRPC message accepted or sent, bytes. Default 64 MiB: a batch of
  // 100 fp32 3x224x224 images (602,112 bytes each) fits.
  int64_t max_message_bytes = 64 << 20;
  // The batcher of the one-runner Start; a repository's models take theirs
  // from the servable factory (servable_factory.h).
  BatcherOptions batching;
  // Batches handed to the runner at once. A torch runner serialises device
  // work on its own thread, so 2 lets the next batch's host copy overlap the
  // current compute. Default 1 (metalserve's flag defaults to 2).
  int device_concurrency = 1;
  // > 0: a model whose runner is on CUDA gets this many executors and device
  // slots instead of batching.num_executors and device_concurrency
  // (ModelServable::Options::cuda_slots; metalserve's --executors=0).
  int cuda_slots = 0;
  // >= 0: a model whose runner is on an accelerator (CUDA, MPS) runs a call
  // inline (BatcherOptions::inline_max_cost) when its cost is at most this
  // instead of batching.inline_max_cost, taking no follow-ons
  // (ModelServable::Options::accelerator_inline_max_cost); < 0: off.
  absl::Duration accelerator_inline_max_cost = absl::Seconds(-1);
  std::string version = "0.0.0";
  // TLS: PEM files. Empty cert/key: plaintext. A client CA turns on mutual
  // TLS (clients must present a certificate signed by it).
  std::string tls_cert_path;
  std::string tls_key_path;
  std::string tls_client_ca_path;
  // Where each Predict/ModelInfer outcome is logged; null: nowhere. Not
  // owned; must outlive the server.
  AccessLog* access_log = nullptr;
  // Accept gzip/deflate-compressed requests. Off by default: gRPC 1.51
  // inflates a whole message before checking max_message_bytes, so one
  // small compressed message can cost a thousand times its size in memory
  // (docs/reliability.md). When off, such a request gets UNIMPLEMENTED.
  bool accept_compression = false;
  // Global bound, bytes, on the memory gRPC's transport holds for all
  // connections (read buffers and requests still being received); beyond it
  // gRPC shrinks flow-control windows and then cancels streams. 0: sized
  // from the other options, see MemoryQuotaBytes().
  int64_t memory_quota_bytes = 0;
  // Bounds on answers handed to gRPC whose sending has not completed, i.e.
  // answers a client does not read (unread_response_guard.h): past the
  // connection's or the server's bound, or when older than the timeout, the
  // connection's oldest such calls are cancelled (RESOURCE_EXHAUSTED). 0:
  // derived, per connection 2 x max_message_bytes, in all the larger of that
  // and MemoryQuotaBytes(). Timeout default 30 s.
  int64_t max_unread_response_bytes_per_connection = 0;
  int64_t max_unread_response_bytes = 0;
  absl::Duration unread_response_timeout = absl::Seconds(30);
  // HTTP/2 streams (calls) one connection may have open at once; a client
  // opening more waits for one to end. 0: gRPC's default (no limit).
  int max_concurrent_streams = 0;
  // SO_SNDBUF and SO_RCVBUF for each connection accepted on a Unix socket
  // address (common/unix_socket_buffers.h); TCP connections keep the
  // kernel's tuning. 0: the kernel's defaults.
  int64_t unix_socket_buffer_bytes = kDefaultUnixSocketBufferBytes;
  // Which gRPC API serves Predict and ModelInfer (async_unary.h): the
  // callback API, or completion queues polled by `grpc_cq_threads` threads
  // of the server's own (0: AsyncUnaryServer::kDefaultQueues). Every other
  // method keeps the callback API.
  GrpcApi grpc_api = GrpcApi::kCallback;
  int grpc_cq_threads = 0;
  // Which peers may register system shared-memory regions and name them in
  // ModelInfer inputs instead of sending the bytes (shared_memory.h): off
  // (the default), unix (calls over a Unix socket address) or local (those
  // and loopback TCP).
  SharedMemoryAccess shared_memory = SharedMemoryAccess::kOff;
  // The KServe v2 REST API (rest_server.h); http.address empty: off. Start()
  // fills its body limit, TLS files and version from the fields above.
  RestOptions http;

  // memory_quota_bytes, or when 0: max(256 MiB, 4 x max_message_bytes), room
  // for four largest requests arriving at once.
  int64_t MemoryQuotaBytes() const;
  // The unread-answer bounds above with the defaults filled in.
  UnreadResponsesOptions UnreadLimits() const;
  // OK, or INVALID_ARGUMENT naming the field and its value: an address
  // without a port or with one outside [0, 65535], an empty or repeated entry
  // in the address list, a socket path too long or in a missing folder, max_message_bytes outside
  // [1, 2^31 - 1], device_concurrency < 1, invalid batching options, TLS
  // files that cannot be read or parsed, or a key that does not match the
  // certificate, grpc_cq_threads outside [0, 64]. Reads the TLS files. Start() calls it; main calls it first
  // so that a bad flag exits before the model loads.
  absl::Status Validate() const;
};

// The contents of the TLS file at `path` (PEM); INVALID_ARGUMENT naming
// `flag` and the path when it cannot be read.
absl::StatusOr<std::string> ReadTlsFile(const std::string& path, absl::string_view flag);

class InferenceServer {
 public:
  // Serves the versions `models` hands out (not owned; must outlive the
  // server). `repository` (may be null: --model) answers the KServe
  // repository RPCs; not owned.
  static absl::StatusOr<std::unique_ptr<InferenceServer>> Start(
      const ServerOptions& options, const ModelLookup* models, ModelRepository* repository,
      Metrics* metrics, Clock* clock = nullptr);
  // Serves one runner (not owned; must outlive the server) behind a batcher
  // made from options.batching: a repository of one, under the runner's own
  // name and version string.
  static absl::StatusOr<std::unique_ptr<InferenceServer>> Start(
      const ServerOptions& options, Runner* runner, Metrics* metrics,
      Clock* clock = nullptr);
  ~InferenceServer();

  // The port bound for the first host:port address; 1 when every address is
  // a Unix socket (gRPC's answer for a bound socket).
  int port() const { return port_; }
  // The REST port; 0 when http.address is empty.
  int http_port() const;
  // Health status of "" and "metalserve.v1.Inference", and the KServe
  // ServerReady/ModelReady answers.
  void SetServing(bool serving);
  // Graceful stop; requests still running after `timeout` are cancelled.
  // Returns as soon as every accepted request is answered, whatever streams
  // are open.
  void Shutdown(absl::Duration timeout = absl::Seconds(30));

 private:
  InferenceServer() = default;
  void StopGrpc(absl::Time deadline);
  // Adds every address of `options` to `builder`, first checking each Unix
  // socket path (PrepareUnixSocket); records the socket files to remove.
  absl::Status AddListeningPorts(const ServerOptions& options,
                                 const std::shared_ptr<grpc::ServerCredentials>& creds,
                                 grpc::ServerBuilder* builder);
  // Builds and starts the gRPC server on every address; on failure the
  // socket files are removed.
  absl::Status StartGrpc(const ServerOptions& options,
                         const std::shared_ptr<grpc::ServerCredentials>& creds);

  Metrics* metrics_ = nullptr;
  std::unique_ptr<ModelLookup> own_models_;  // the one-runner Start's
  const ModelLookup* models_ = nullptr;
  // Bytes of queued requests held as gRPC's slices; outlives both services.
  std::unique_ptr<HeldBytesBudget> held_bytes_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<SharedMemoryRegions> shared_memory_;  // null when off; outlives kserve_
  std::unique_ptr<KServeService> kserve_;  // inference.GRPCInferenceService
  std::shared_ptr<AcceptedCalls::State> accepted_;  // unary calls in handlers
  // --grpc_api=async: Predict's and ModelInfer's queues and pollers; joined
  // by Shutdown once the server is shut down and the batchers drained.
  std::unique_ptr<AsyncUnaryServer> async_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<RestServer> rest_;  // stopped before the servables are freed
  int port_ = 0;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<int>> bound_ports_;  // one per address, set by gRPC
  std::vector<std::string> socket_files_;  // removed on shutdown
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_SERVER_H_
