#include "server/service/server.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "server/common/status_macros.h"
#include "server/service/batch_executor.h"
#include "server/service/inference_service.h"
#include "server/service/kserve_service.h"

namespace metalserve {
namespace {

constexpr char kServiceName[] = "metalserve.v1.Inference";
constexpr char kKServeServiceName[] = "inference.GRPCInferenceService";

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " file '", path, "' cannot be read"));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

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
  ASSIGN_OR_RETURN(pair.private_key, ReadFile(o.tls_key_path, "tls_key"));
  ASSIGN_OR_RETURN(pair.cert_chain, ReadFile(o.tls_cert_path, "tls_cert"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!o.tls_client_ca_path.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile(o.tls_client_ca_path, "tls_client_ca"));
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

// Message size limits, exclusive port, compression and the memory quota.
void ConfigureTransport(const ServerOptions& options, grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder->SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  // The port is ours alone: with gRPC's default SO_REUSEPORT a second server
  // on the same port starts silently and connections split between the two.
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Compression off unless asked for: only "identity" is enabled, so a
  // compressed request is refused before it is inflated.
  if (!options.accept_compression) {
    builder->AddChannelArgument(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET,
                                1 << GRPC_COMPRESS_NONE);
  }
  grpc::ResourceQuota quota("metalserve");
  quota.Resize(static_cast<size_t>(options.MemoryQuotaBytes()));
  builder->SetResourceQuota(quota);
}

}  // namespace

absl::StatusOr<std::unique_ptr<InferenceServer>> InferenceServer::Start(
    const ServerOptions& options, Runner* runner, Metrics* metrics,
    Clock* clock) {
  if (clock == nullptr) clock = Clock::RealClock();
  RETURN_IF_ERROR(options.Validate());
  ASSIGN_OR_RETURN(auto creds, Credentials(options));
  std::unique_ptr<InferenceServer> s(new InferenceServer());
  s->metrics_ = metrics;
  s->executor_ = std::make_unique<BatchExecutor>(
      runner, options.batching, options.device_concurrency, metrics, clock);
  BatchExecutor* executor = s->executor_.get();
  // The queue depth gauge follows the queue as batches are taken, not only
  // as requests arrive. Only the processor reads batcher_: it runs after a
  // request was submitted, so after batcher_ is set (on_idle may run before).
  InferenceServer* self = s.get();
  auto update_depth = [self, metrics] {
    if (metrics != nullptr) metrics->SetQueueDepth(self->batcher_->queued_rows());
  };
  auto on_idle = [runner, metrics] {
    runner->BetweenBatches(/*idle=*/true);
    if (metrics != nullptr) {
      const MemoryStats m = runner->Memory();
      metrics->SetMemory({m.allocated_bytes, m.reserved_bytes, m.limit_bytes,
                          m.resident_bytes});
    }
  };
  ASSIGN_OR_RETURN(
      s->batcher_,
      Batcher::Create(options.batching, clock,
                      [executor, update_depth](Batch b) {
                        update_depth();
                        executor->Process(std::move(b));
                      },
                      on_idle));
  s->service_ = std::make_unique<InferenceService>(
      runner, s->batcher_.get(), metrics, clock, options.version);
  s->kserve_ = std::make_unique<KServeService>(
      runner, s->batcher_.get(), metrics, clock, options.version);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, creds, &s->port_);
  builder.RegisterService(s->service_.get());
  builder.RegisterService(s->kserve_.get());
  ConfigureTransport(options, &builder);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    s->batcher_->Shutdown();
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on '", options.address,
        "': the port is in use (another server on it?) or the host is not an "
        "address of this machine"));
  }
  s->SetServing(true);
  LOG(INFO) << "serving " << runner->info().name << " on " << options.address
            << " (port " << s->port_ << ")"
            << (options.tls_cert_path.empty() ? "" : " with TLS")
            << (options.tls_client_ca_path.empty() ? "" : " (mutual)")
            << ", max_message_bytes=" << options.max_message_bytes
            << " memory_quota_bytes=" << options.MemoryQuotaBytes()
            << " compression=" << (options.accept_compression ? "accepted" : "refused");
  return s;
}

InferenceServer::~InferenceServer() { Shutdown(); }

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
  if (server_ != nullptr) {
    // Stops accepting; waits for accepted RPCs, which the batcher (still
    // running) completes; cancels what remains after the timeout.
    server_->Shutdown(absl::ToChronoTime(absl::Now() + timeout));
  }
  if (batcher_ != nullptr) batcher_->Shutdown();
  if (server_ != nullptr) server_->Wait();
  LOG(INFO) << "server stopped";
}

}  // namespace metalserve
