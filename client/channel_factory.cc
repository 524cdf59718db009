#include "client/channel_factory.h"

#include <arpa/inet.h>

#include <algorithm>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/unix_socket_buffers.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "common/status_macros.h"

namespace metalserve::client {
namespace {

constexpr char kRoundRobinConfig[] =
    R"({"loadBalancingConfig": [{"round_robin": {}}]})";

// Splits "host:port" / "[v6]:port" into host and port.
bool SplitHostPort(absl::string_view hp, std::string* host, std::string* port) {
  if (absl::StartsWith(hp, "[")) {
    const size_t close = hp.find(']');
    if (close == absl::string_view::npos || close + 1 >= hp.size() ||
        hp[close + 1] != ':') {
      return false;
    }
    *host = std::string(hp.substr(1, close - 1));
    *port = std::string(hp.substr(close + 2));
    return true;
  }
  const size_t colon = hp.rfind(':');
  if (colon == absl::string_view::npos) return false;
  *host = std::string(hp.substr(0, colon));
  *port = std::string(hp.substr(colon + 1));
  return !host->empty() && !port->empty();
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("--", flag, ": cannot read '", path, "'"));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::string> ChannelTarget(const std::vector<std::string>& targets) {
  if (targets.empty()) return absl::InvalidArgumentError("no --target given");
  if (targets.size() == 1) return targets[0];
  bool all_v4 = true, all_v6 = true;
  std::vector<std::string> v4, v6;
  for (const std::string& t : targets) {
    std::string host, port;
    if (!SplitHostPort(t, &host, &port)) {
      return absl::InvalidArgumentError(
          absl::StrCat("target '", t, "' is not host:port"));
    }
    unsigned char buf[16];
    all_v4 = all_v4 && inet_pton(AF_INET, host.c_str(), buf) == 1;
    all_v6 = all_v6 && inet_pton(AF_INET6, host.c_str(), buf) == 1;
    v4.push_back(absl::StrCat(host, ":", port));
    v6.push_back(absl::StrCat("[", host, "]:", port));
  }
  if (all_v4) return absl::StrCat("ipv4:///", absl::StrJoin(v4, ","));
  if (all_v6) return absl::StrCat("ipv6:///", absl::StrJoin(v6, ","));
  return absl::InvalidArgumentError(absl::StrCat(
      "several targets must all be IPv4 or all IPv6 literals (got ",
      absl::StrJoin(targets, ","),
      "); for host names use one dns:///name:port that resolves to all"));
}

std::string ServiceConfigJson(int max_attempts) {
  if (max_attempts <= 1) return kRoundRobinConfig;
  return absl::StrCat(
      R"({"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": [{)",
      R"("name": [{"service": "metalserve.v1.Inference"}, {"service": "inference.GRPCInferenceService"}],)",
      R"("retryPolicy": {"maxAttempts": )", std::min(max_attempts, 5),
      R"(, "initialBackoff": "0.01s", "maxBackoff": "0.2s", "backoffMultiplier": 2,)",
      R"( "retryableStatusCodes": ["UNAVAILABLE", "CANCELLED"]}}]})");
}

absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> CreateChannels(
    const ChannelOptions& options) {
  ASSIGN_OR_RETURN(const std::string target, ChannelTarget(options.targets));
  if (options.unix_socket_buffer_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unix_socket_buffer_bytes ", options.unix_socket_buffer_bytes, " < 0"));
  }
  if (options.connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("connections ", options.connections, " < 1"));
  }
  std::shared_ptr<grpc::ChannelCredentials> creds;
  const bool tls = !options.tls_ca.empty() || !options.tls_cert.empty() ||
                   !options.tls_key.empty() || !options.tls_server_name.empty();
  if (tls) {
    if (options.tls_cert.empty() != options.tls_key.empty()) {
      return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
    }
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca.empty()) {
      ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(options.tls_ca, "tls_ca"));
    }
    if (!options.tls_cert.empty()) {
      ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(options.tls_cert, "tls_cert"));
      ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(options.tls_key, "tls_key"));
    }
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < options.connections; ++i) {
    grpc::ChannelArguments args;
    args.SetServiceConfigJSON(ServiceConfigJson(options.max_attempts));
    if (options.max_attempts > 1) args.SetInt(GRPC_ARG_ENABLE_RETRIES, 1);
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    // A distinct argument keeps channels from sharing subchannels, so each
    // one opens its own connections.
    args.SetInt("metalserve.client.connection_index", i);
    if (options.unix_socket_buffer_bytes > 0) {
      args.SetSocketMutator(NewUnixSocketBufferMutator(options.unix_socket_buffer_bytes));
    }
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
    channels.push_back(grpc::CreateCustomChannel(target, creds, args));
  }
  return channels;
}

}  // namespace metalserve::client
