// The REST transport of a client built with -DMETALSERVE_HTTP_CLIENT=OFF (no
// libcurl): every entry point refuses, naming the build option, so
// --protocol=http fails at start with that reason instead of at link time.
#include "client/http_transport.h"

#include "absl/status/status.h"

namespace metalserve::client {
namespace {

absl::Status Unavailable() {
  return absl::FailedPreconditionError(
      "--protocol=http: this metalserve-bench was built without libcurl "
      "(-DMETALSERVE_HTTP_CLIENT=OFF); rebuild with it ON");
}

}  // namespace

absl::StatusOr<std::vector<std::string>> HttpBaseUrls(const HttpOptions&) {
  return Unavailable();
}

absl::StatusOr<inference::ModelMetadataResponse> FetchHttpMetadata(
    const HttpOptions&) {
  return Unavailable();
}

absl::StatusOr<std::unique_ptr<CallTransport>> NewHttpTransport(
    const HttpOptions&, const inference::ModelInferRequest&) {
  return Unavailable();
}

}  // namespace metalserve::client
