// CallTransport: how the load generator sends one inference call, so that one
// generator (closed and open loop, phases, reports) drives every protocol:
// native gRPC Predict, KServe gRPC ModelInfer (grpc_transport.h) and KServe
// REST over HTTP/1.1 (http_transport.h).
//
// Ownership: a transport owns its connections and the one request every call
// sends. Thread-safety: Start() may be called from any thread, including from
// inside a `done` callback. Lifetime: the destructor may run only once every
// started call has reported `done` (the generator waits for that).
#ifndef METALSERVE_CLIENT_CALL_TRANSPORT_H_
#define METALSERVE_CLIENT_CALL_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/support/status.h"

namespace metalserve::client {

// The outcome of one call: a gRPC code (HTTP statuses are mapped to the code
// of the same meaning), the server's message on error, and the server-side
// figures a successful answer carried (0 when absent), among them the model
// version that answered (empty when the server does not say).
struct CallResult {
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string message;
  int64_t queue_us = 0;
  int64_t compute_us = 0;
  int64_t batch_rows = 0;
  std::string model_version;
};

using CallDone = std::function<void(CallResult)>;

class CallTransport {
 public:
  virtual ~CallTransport() = default;
  // Independent lanes (channels, or target addresses) calls are spread over.
  virtual size_t lanes() const = 0;
  // Rows (the batch dimension) each call carries.
  virtual int64_t rows_per_request() const = 0;
  // Starts one call on lane `lane % lanes()`, ended by the client after
  // `deadline` (InfiniteDuration: none). `done` runs exactly once, on a
  // transport thread.
  virtual void Start(size_t lane, absl::Duration deadline, CallDone done) = 0;
};

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_CALL_TRANSPORT_H_
