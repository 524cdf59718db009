#include "server/service/server.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "common/status_macros.h"
#include "server/service/accepted_calls.h"
#include "server/service/inference_service.h"
#include "server/service/kserve_service.h"
#include "server/service/listen_address.h"
#include "server/service/unread_response_guard.h"

namespace metalserve {
namespace {

constexpr char kServiceName[] = "metalserve.v1.Inference";
constexpr char kKServeServiceName[] = "inference.GRPCInferenceService";

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(
    const ServerOptions& o) {
  if (o.tls_cert_path.empty() && o.tls_key_path.empty()) {
    if (!o.tls_client_ca_path.empty()) {
      return absl::InvalidArgumentError(
          "tls_client_ca needs tls_cert and tls_key as well");
    }
    return grpc::InsecureServerCredentials();
  }
  if (o.tls_cert_path.empty() || o.tls_key_path.empty()) {
    return absl::InvalidArgumentError("tls_cert and tls_key must be given together");
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.private_key, ReadTlsFile(o.tls_key_path, "tls_key"));
  ASSIGN_OR_RETURN(pair.cert_chain, ReadTlsFile(o.tls_cert_path, "tls_cert"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!o.tls_client_ca_path.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadTlsFile(o.tls_client_ca_path, "tls_client_ca"));
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

// Installs the AcceptedCalls interceptor and `guard` on `builder`; returns
// the counter of accepted calls.
std::shared_ptr<AcceptedCalls::State> InstallInterceptors(
    grpc::ServerBuilder* builder, std::unique_ptr<UnreadResponseGuard> guard) {
  auto accepted = std::make_unique<AcceptedCalls>();
  std::shared_ptr<AcceptedCalls::State> state = accepted->state();
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> v;
  v.push_back(std::move(accepted));
  v.push_back(std::move(guard));
  builder->experimental().SetInterceptorCreators(std::move(v));
  return state;
}

// Message size limits, exclusive port, compression and the memory quota.
void ConfigureTransport(const ServerOptions& options, grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder->SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  // The port is ours alone: with gRPC's default SO_REUSEPORT a second server
  // on the same port starts silently and connections split between the two.
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Compression off unless asked for: only "identity" is enabled, so a
  // compressed request is refused before it is inflated. When on, gRPC does
  // not inflate: Predict/ModelInfer inflate their raw bodies under
  // max_message_bytes (inflate_body.h); methods parsed by gRPC fail to parse
  // a compressed message instead of inflating it.
  if (!options.accept_compression) {
    builder->AddChannelArgument(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET,
                                1 << GRPC_COMPRESS_NONE);
  } else {
    builder->AddChannelArgument(GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION, 0);
  }
  // A bound on the calls one connection holds open (answers it does not read
  // included); further ones wait in the client.
  if (options.max_concurrent_streams > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                                options.max_concurrent_streams);
  }
  // Larger buffers on Unix-socket connections: fewer writes and wake-ups
  // per large message (common/unix_socket_buffers.h).
  if (options.unix_socket_buffer_bytes > 0) {
    builder->SetOption(UnixSocketBufferOption(options.unix_socket_buffer_bytes));
  }
  grpc::ResourceQuota quota("metalserve");
  quota.Resize(static_cast<size_t>(options.MemoryQuotaBytes()));
  builder->SetResourceQuota(quota);
}

// The REST server's options: http's own, plus the body limit, TLS and
// version the gRPC server uses.
absl::StatusOr<RestOptions> RestOptionsOf(const ServerOptions& o) {
  RestOptions r = o.http;
  r.max_body_bytes = o.max_message_bytes;
  r.max_buffered_bytes = o.MemoryQuotaBytes();
  r.server_version = o.version;
  r.access_log = o.access_log;
  if (!o.tls_cert_path.empty()) {
    ASSIGN_OR_RETURN(r.tls_cert_pem, ReadTlsFile(o.tls_cert_path, "tls_cert"));
    ASSIGN_OR_RETURN(r.tls_key_pem, ReadTlsFile(o.tls_key_path, "tls_key"));
  }
  if (!o.tls_client_ca_path.empty()) {
    ASSIGN_OR_RETURN(r.tls_client_ca_pem, ReadTlsFile(o.tls_client_ca_path, "tls_client_ca"));
  }
  return r;
}

}  // namespace

absl::Status InferenceServer::StartGrpc(const ServerOptions& options,
                                        const std::shared_ptr<grpc::ServerCredentials>& creds) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  RETURN_IF_ERROR(AddListeningPorts(options, creds, &builder));
  builder.RegisterService(service_.get());
  builder.RegisterService(kserve_.get());
  ConfigureTransport(options, &builder);
  // The steady clock, not the server's: the guard's sweeper must not wait on
  // a test's simulated clock.
  absl::StatusOr<std::unique_ptr<UnreadResponseGuard>> guard =
      UnreadResponseGuard::Create(options.UnreadLimits(), metrics_, Clock::SteadyClock());
  if (!guard.ok()) return guard.status();
  accepted_ = InstallInterceptors(&builder, std::move(*guard));
  if (options.grpc_api == GrpcApi::kAsync) {
    async_ = std::make_unique<AsyncUnaryServer>(
        &builder, AsyncUnaryServer::QueuesFor(options.grpc_cq_threads),
        std::vector<AsyncUnaryMethod>{service_->AsyncMethod(), kserve_->AsyncMethod()});
  }
  server_ = builder.BuildAndStart();
  if (server_ != nullptr && async_ != nullptr) async_->Start();
  for (size_t i = 0; i < addresses_.size(); ++i) {
    if (server_ != nullptr && *bound_ports_[i] != 0) continue;
    for (const std::string& f : socket_files_) RemoveUnixSocket(f);
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on '", addresses_[i],
        "': the port is in use (another server on it?), the host is not an "
        "address of this machine, or the socket's folder is not writable"));
  }
  for (size_t i = 0; i < addresses_.size(); ++i) {
    if (UnixSocketPath(addresses_[i]).has_value()) continue;
    if (port_ == 0) port_ = *bound_ports_[i];
    // Port 0 asked for any free port: say which one it got.
    if (absl::EndsWith(addresses_[i], ":0")) {
      LOG(INFO) << "gRPC on " << addresses_[i] << " bound port " << *bound_ports_[i];
    }
  }
  if (port_ == 0) port_ = *bound_ports_.front();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<InferenceServer>> InferenceServer::Start(
    const ServerOptions& options, Runner* runner, Metrics* metrics, Clock* clock) {
  RETURN_IF_ERROR(options.Validate());
  ModelServable::Options mo{.batching = options.batching,
                            .device_concurrency = options.device_concurrency,
                            .cuda_slots = options.cuda_slots,
                            .accelerator_inline_max_cost = options.accelerator_inline_max_cost,
                            .metrics = metrics, .clock = clock};
  // Not owned: the caller's runner outlives the server.
  std::shared_ptr<Runner> shared(runner, [](Runner*) {});
  ASSIGN_OR_RETURN(std::unique_ptr<ModelServable> servable,
                   ModelServable::Create(std::move(shared), mo));
  auto models = std::make_unique<SingleModelLookup>(std::move(servable));
  ASSIGN_OR_RETURN(std::unique_ptr<InferenceServer> s,
                   Start(options, models.get(), nullptr, metrics, clock));
  s->own_models_ = std::move(models);
  return s;
}

absl::StatusOr<std::unique_ptr<InferenceServer>> InferenceServer::Start(
    const ServerOptions& options, const ModelLookup* models, ModelRepository* repository,
    Metrics* metrics, Clock* clock) {
  if (clock == nullptr) clock = Clock::RealClock();
  RETURN_IF_ERROR(options.Validate());
  ASSIGN_OR_RETURN(auto creds, Credentials(options));
  std::unique_ptr<InferenceServer> s(new InferenceServer());
  s->metrics_ = metrics;
  s->models_ = models;
  // Requests read in place (Predict's and ModelInfer's) keep gRPC's slices,
  // counted in its memory quota: half of it at most, so the transport always
  // has room to read.
  s->held_bytes_ = std::make_unique<HeldBytesBudget>(options.MemoryQuotaBytes() / 2);
  s->service_ = std::make_unique<InferenceService>(models, metrics, clock, options.version,
                                                   options.access_log, s->held_bytes_.get(),
                                                   options.grpc_api);
  s->kserve_ = std::make_unique<KServeService>(models, repository, metrics, clock,
                                               options.version, options.access_log,
                                               s->held_bytes_.get(), options.grpc_api);
  s->service_->set_max_request_bytes(options.max_message_bytes);
  s->kserve_->set_max_request_bytes(options.max_message_bytes);
  if (options.shared_memory != SharedMemoryAccess::kOff) {
    s->shared_memory_ = std::make_unique<SharedMemoryRegions>(options.shared_memory);
    s->kserve_->set_shared_memory(options.shared_memory, s->shared_memory_.get());
  }
  RETURN_IF_ERROR(s->StartGrpc(options, creds));
  if (!options.http.address.empty()) {
    ASSIGN_OR_RETURN(RestOptions rest, RestOptionsOf(options));
    rest.repository = repository;
    KServeService* kserve = s->kserve_.get();
    ASSIGN_OR_RETURN(s->rest_, RestServer::Start(rest, models, metrics, clock,
                                                 [kserve] { return kserve->ready(); }));
  }
  s->SetServing(true);
  std::vector<std::string> served;
  for (const ServableHandle& h : models->Served()) {
    served.push_back(absl::StrCat(ServableOf(h).info().name, " v", ServableOf(h).info().version));
  }
  LOG(INFO) << "serving " << absl::StrJoin(served, ", ") << " on " << options.address
            << " (port " << s->port_ << ")"
            << (options.tls_cert_path.empty() ? "" : " with TLS")
            << (options.tls_client_ca_path.empty() ? "" : " (mutual)")
            << ", max_message_bytes=" << options.max_message_bytes
            << " memory_quota_bytes=" << options.MemoryQuotaBytes()
            << " max_unread_response_bytes_per_connection="
            << options.UnreadLimits().max_bytes_per_connection
            << " max_unread_response_bytes=" << options.UnreadLimits().max_bytes
            << " compression=" << (options.accept_compression ? "accepted" : "refused")
            << " grpc_api=" << GrpcApiName(options.grpc_api);
  if (s->async_ != nullptr) {
    LOG(INFO) << "Predict and ModelInfer served through " << s->async_->queues()
              << " completion queue(s), one thread each";
  }
  return s;
}

InferenceServer::~InferenceServer() { Shutdown(); }

int InferenceServer::http_port() const { return rest_ != nullptr ? rest_->port() : 0; }

void InferenceServer::SetServing(bool serving) {
  if (server_ == nullptr) return;
  kserve_->SetReady(serving);
  auto* health = server_->GetHealthCheckService();
  if (health != nullptr) {
    health->SetServingStatus("", serving);
    health->SetServingStatus(kServiceName, serving);
    health->SetServingStatus(kKServeServiceName, serving);
  }
  if (metrics_ != nullptr) metrics_->SetReady(serving);
}

void InferenceServer::Shutdown(absl::Duration timeout) {
  {
    absl::MutexLock l(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  SetServing(false);
  if (rest_ != nullptr) rest_->StopAccepting();
  // A gRPC load or unload running on its worker answers its call while the
  // gRPC server still runs.
  if (kserve_ != nullptr) kserve_->StopRepositoryControl();
  if (server_ != nullptr) StopGrpc(absl::Now() + timeout);
  // Every served version answers what it queued; versions unloaded before
  // drain by themselves (their requests hold them).
  if (models_ != nullptr) {
    for (const ServableHandle& h : models_->Served()) ServableOf(h).Drain();
  }
  rest_.reset();  // every request it handed to a batcher is answered
  if (server_ != nullptr) server_->Wait();
  // Once every call is answered, versions being unloaded included.
  if (async_ != nullptr) async_->Join();
  for (const std::string& f : socket_files_) RemoveUnixSocket(f);
  LOG(INFO) << "server stopped";
}

absl::Status InferenceServer::AddListeningPorts(
    const ServerOptions& options, const std::shared_ptr<grpc::ServerCredentials>& creds,
    grpc::ServerBuilder* builder) {
  addresses_ = SplitAddresses(options.address);
  for (const std::string& address : addresses_) {
    if (std::optional<std::string> path = UnixSocketPath(address)) {
      RETURN_IF_ERROR(PrepareUnixSocket(*path));
      socket_files_.push_back(*path);
    }
    bound_ports_.push_back(std::make_unique<int>(0));
    builder->AddListeningPort(address, creds, bound_ports_.back().get());
  }
  return absl::OkStatus();
}

// gRPC's Server::Shutdown waits for every open call, streams included, until
// its deadline. So: stop accepting first (the core call that Server::Shutdown
// also makes; a second one is allowed), let the batcher (still running)
// answer every accepted unary call, then cancel what is left: only streams
// (health Watch, reflection) and requests whose message had not fully
// arrived, which gRPC 1.51 would end CANCELLED anyway once it does. At
// `deadline` Server::Shutdown cancels whatever still runs.
void InferenceServer::StopGrpc(absl::Time deadline) {
  // A core queue: grpc::CompletionQueue would take the tag for its own type.
  grpc_completion_queue* stopped = grpc_completion_queue_create_for_next(nullptr);
  grpc_server_shutdown_and_notify(server_->c_server(), stopped, nullptr);
  // With --grpc_api=async a call can have arrived while no interceptor has
  // seen it yet (it waits in a busy poller's queue): the async server counts
  // it until it is answered. Once it has none, no new one can appear.
  const bool async_answered = async_ == nullptr || async_->AwaitNoCalls(deadline);
  if (async_answered && accepted_->AwaitNoneOpen(deadline)) {
    LOG(INFO) << "shutdown: every accepted call answered; ending open streams "
                 "and requests still arriving";
    grpc_server_cancel_all_calls(server_->c_server());
  } else {
    LOG(WARNING) << "shutdown: " << accepted_->open()
                 << " accepted call(s) still open at the shutdown timeout; "
                    "gRPC cancels them (clients see UNAVAILABLE)";
    service_->MarkCutOff();
    kserve_->MarkCutOff();
  }
  server_->Shutdown(absl::ToChronoTime(deadline));
  // Server::Shutdown has returned, so the shutdown (and our event) is done.
  grpc_completion_queue_shutdown(stopped);
  while (grpc_completion_queue_next(stopped, gpr_inf_future(GPR_CLOCK_REALTIME), nullptr)
             .type != GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(stopped);
}

}  // namespace metalserve
