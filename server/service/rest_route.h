// The KServe v2 REST paths the server answers (rest_server.cc routes by
// them): a URL path parsed into what it names. Pure; thread-safe.
#ifndef METALSERVE_SERVER_SERVICE_REST_ROUTE_H_
#define METALSERVE_SERVER_SERVICE_REST_ROUTE_H_

#include <string>

namespace metalserve {

// A parsed /v2 path.
struct Route {
  enum Kind {
    kNone, kLive, kReady, kServer, kModel, kModelReady, kModelConfig, kInfer,
    kRepositoryIndex, kRepositoryLoad, kRepositoryUnload
  };
  // The routes answered to POST; the others to GET.
  bool post() const { return kind == kInfer || kind >= kRepositoryIndex; }
  Kind kind = kNone;
  std::string name;     // model name
  std::string version;  // empty: any
};

// /v2, /v2/health/{live,ready}, /v2/repository/index,
// /v2/repository/models/NAME/{load,unload} and
// /v2/models/NAME[/versions/V][/ready|/config|/infer]; empty segments are
// skipped (`//v2/` is /v2). Anything else is kNone.
Route ParseRoute(const char* url);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_REST_ROUTE_H_
