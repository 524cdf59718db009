// Creates the gRPC channels a load run uses.
//
// Several targets ("10.0.0.1:8500,10.0.0.2:8500") become one
// "ipv4:///a,b" (or "ipv6:///") channel target; every channel carries a
// service config selecting round_robin, so calls spread over all addresses
// (a single "dns:///name:port" resolving to several addresses spreads too).
// `connections` > 1 opens that many independent channels (each with its own
// subchannels, hence its own HTTP/2 connections) and the load generator
// spreads calls over them.
//
// Thread-safety: free functions; the returned channels are thread-safe.
#ifndef METALSERVE_CLIENT_CHANNEL_FACTORY_H_
#define METALSERVE_CLIENT_CHANNEL_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/channel.h"

namespace metalserve::client {

struct ChannelOptions {
  // host:port entries; one entry may also be any gRPC target URI.
  std::vector<std::string> targets;
  int connections = 1;
  // TLS: PEM file paths. TLS is on when any of them is set.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  // Overrides the name checked against the server certificate.
  std::string tls_server_name;
  // Attempts per call (first try included) under gRPC's retry policy, which
  // retries a call refused with UNAVAILABLE (e.g. a server that went away)
  // on another address, and one ended CANCELLED by the server's gRPC (a
  // request still arriving when a server starts to shut down; gRPC never
  // retries a call the client cancelled itself). 1 = no retries. gRPC caps
  // it at 5.
  int max_attempts = 1;
  // SO_SNDBUF and SO_RCVBUF of each connection to a unix: target
  // (common/unix_socket_buffers.h); TCP connections keep the kernel's
  // tuning. 0: the kernel's defaults.
  int64_t unix_socket_buffer_bytes = 0;
};

// The service config JSON: round_robin, plus a retry policy on UNAVAILABLE
// and CANCELLED when max_attempts > 1.
std::string ServiceConfigJson(int max_attempts);

// The gRPC target string for `targets` (see the file comment).
absl::StatusOr<std::string> ChannelTarget(const std::vector<std::string>& targets);

absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> CreateChannels(
    const ChannelOptions& options);

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_CHANNEL_FACTORY_H_
