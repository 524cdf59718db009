// The load generator's KServe v2 REST transport: POST
// /v2/models/{name}/infer over HTTP/1.1 keep-alive connections, with JSON
// tensors or Triton's binary tensor extension (http_codec.h), on libcurl's
// multi interface.
//
// One thread (owned, joined by the destructor) runs every transfer: Start()
// queues a call and wakes it. Each call in flight uses its own connection
// (HTTP/1.1 has one request at a time per connection); finished connections
// stay open in the multi handle's cache and the next call reuses one, so a
// closed loop of N calls keeps N connections. Calls go to the targets in
// turn by lane. The client-side deadline is libcurl's transfer timeout
// (DEADLINE_EXCEEDED); a connection that fails is UNAVAILABLE naming the URL
// and libcurl's reason.
//
// Thread-safety and lifetime: as CallTransport (call_transport.h); calls
// still in flight when it is destroyed end CANCELLED.
#ifndef METALSERVE_CLIENT_HTTP_TRANSPORT_H_
#define METALSERVE_CLIENT_HTTP_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/call_transport.h"
#include "client/http_codec.h"
#include "inference/grpc_service.pb.h"

namespace metalserve::client {

struct HttpOptions {
  // host:port ("127.0.0.1:8000", "[::1]:8000", "name:8000"), or a base URL
  // "http://host:port" / "https://host:port". At least one.
  std::vector<std::string> targets;
  // The model the path names; required (REST has no default model).
  std::string model_name;
  HttpTensorFormat format = HttpTensorFormat::kBinary;
  // TLS (https) when tls_ca is set: PEM roots; tls_cert/tls_key for mutual
  // TLS.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
};

// The base URLs of `options.targets`; InvalidArgument for an empty list, a
// unix: target or an empty model name, naming the value.
absl::StatusOr<std::vector<std::string>> HttpBaseUrls(const HttpOptions& options);

// GET {first target}/v2/models/{name}, waiting at most 10 s. Errors name the
// URL: UNAVAILABLE with libcurl's reason when nothing answers, the HTTP
// status's code and the server's message otherwise.
absl::StatusOr<inference::ModelMetadataResponse> FetchHttpMetadata(
    const HttpOptions& options);

// A transport sending `request` as `options.format` says.
absl::StatusOr<std::unique_ptr<CallTransport>> NewHttpTransport(
    const HttpOptions& options, const inference::ModelInferRequest& request);

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_HTTP_TRANSPORT_H_
