#include "server/service/rest_route.h"

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace metalserve {

Route ParseRoute(const char* url) {
  std::vector<std::string> p = absl::StrSplit(url, '/', absl::SkipEmpty());
  Route r;
  if (p.empty() || p[0] != "v2") return r;
  if (p.size() == 1) r.kind = Route::kServer;
  if (p.size() == 3 && p[1] == "health" && p[2] == "live") r.kind = Route::kLive;
  if (p.size() == 3 && p[1] == "health" && p[2] == "ready") r.kind = Route::kReady;
  if (p.size() == 3 && p[1] == "repository" && p[2] == "index") r.kind = Route::kRepositoryIndex;
  if (p.size() == 5 && p[1] == "repository" && p[2] == "models") {
    r.name = p[3];
    if (p[4] == "load") r.kind = Route::kRepositoryLoad;
    if (p[4] == "unload") r.kind = Route::kRepositoryUnload;
  }
  if (p.size() < 3 || p[1] != "models") return r;
  r.name = p[2];
  size_t next = 3;
  if (p.size() >= 5 && p[3] == "versions") {
    r.version = p[4];
    next = 5;
  }
  if (p.size() == next) r.kind = Route::kModel;
  if (p.size() == next + 1 && p[next] == "ready") r.kind = Route::kModelReady;
  if (p.size() == next + 1 && p[next] == "config") r.kind = Route::kModelConfig;
  if (p.size() == next + 1 && p[next] == "infer") r.kind = Route::kInfer;
  return r;
}

}  // namespace metalserve
