// Internal to the REST front end (rest_server.cc, rest_infer.cc): the state
// of one HTTP request and the helpers that answer it.
//
// Ownership: libmicrohttpd's per-request pointer owns the Call from the
// first call of the access handler until the request-completed callback.
// While an infer request is in the batcher its connection is suspended and
// its task writes `answer` and then resumes the connection, its last touch
// of the Call; the polling thread reads `answer` only after the resume.
#ifndef METALSERVE_SERVER_SERVICE_REST_CALL_H_
#define METALSERVE_SERVER_SERVICE_REST_CALL_H_

#include <microhttpd.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/service/rest_server.h"

namespace metalserve {

// An HTTP answer ready to be queued.
struct RestAnswer {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  size_t json_length = 0;  // with binary data: Inference-Header-Content-Length
  bool binary = false;
};

struct RestServer::Call {
  absl::Time start;
  std::string peer;  // "ipv4:127.0.0.1:52814", as gRPC writes peers
  std::string body;
  int64_t reserved = 0;     // body bytes accounted in ReserveBodyBytes
  bool submitted = false;   // handed to the batcher; the connection suspended
  bool answered = false;    // a response was queued (413, 411, ...)
  absl::string_view method;  // metrics label, a literal; empty: unrouted
  RestAnswer answer;        // written by the task before it resumes
};

// The answer for a failed request: {"error": message} with its HTTP status.
RestAnswer ErrorAnswer(const absl::Status& status);

// The client's address as gRPC writes peers ("ipv4:127.0.0.1:52814",
// "ipv6:[::1]:52814"); "unknown" when MHD cannot tell.
std::string PeerOf(MHD_Connection* connection);

// Queues `answer` on `connection`; MHD_YES or MHD_NO as the handler returns.
MHD_Result QueueAnswer(MHD_Connection* connection, const RestAnswer& answer);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_REST_CALL_H_
