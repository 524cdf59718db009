// Triton's model-repository extension over REST, answered from the same
// ModelRepository calls as the gRPC handlers (kserve_repository.cc):
//
//   POST /v2/repository/index                 body optional {"ready": bool}
//   POST /v2/repository/models/{name}/load    body optional; "parameters"
//   POST /v2/repository/models/{name}/unload  refused, naming them
//
// The index is read on the polling thread (a folder scan, no load). A load
// takes seconds (read, verify, warm up), so it runs on one worker thread
// while its connection is suspended; a second load or unload while one runs
// is refused 503 (the repository runs them one at a time anyway).
#include <microhttpd.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/repository/model_repository.h"
#include "server/service/repository_errors.h"
#include "server/service/rest_call.h"
#include "server/service/rest_server.h"
#include "server/service/status_util.h"

namespace metalserve {
namespace {

using Json = nlohmann::json;

constexpr absl::string_view kRepositoryIndex = "http_RepositoryIndex";
constexpr absl::string_view kRepositoryModelLoad = "http_RepositoryModelLoad";
constexpr absl::string_view kRepositoryModelUnload = "http_RepositoryModelUnload";

// The request body as a JSON object; an empty body is {}. INVALID_ARGUMENT
// naming the path for anything else.
absl::StatusOr<Json> BodyObject(absl::string_view path, const std::string& body) {
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return Json::object();
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the request body must be a JSON object, got '", ClientText(body), "'"));
  }
  return j;
}

// INVALID_ARGUMENT for "parameters" that is not an object, and naming every
// parameter a load or unload sets (RefuseRepositoryParameters).
absl::Status RefuseParameters(absl::string_view rpc, const Json& body) {
  const auto it = body.find("parameters");
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        rpc, " parameters must be an object, got ", ClientText(it->dump())));
  }
  std::vector<std::string> names;
  for (const auto& [name, value] : it->items()) names.push_back(name);
  return RefuseRepositoryParameters(rpc, std::move(names));
}

Json IndexJson(const std::vector<IndexEntry>& index) {
  Json out = Json::array();
  for (const IndexEntry& e : index) {
    out.push_back({{"name", e.model}, {"version", e.version}, {"state", e.state},
                   {"reason", ClientText(e.reason)}});
  }
  return out;
}

RestAnswer JsonOk(const Json& j) {
  RestAnswer a;
  a.body = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  return a;
}

}  // namespace

int RestServer::RepositoryIndex(MHD_Connection* connection, Call* call) {
  auto answer = [&](const absl::Status& s, const RestAnswer& a) {
    call->answered = true;
    if (metrics_ != nullptr) {
      metrics_->RequestStarted(kRepositoryIndex);
      metrics_->RequestFinished(kRepositoryIndex, s.code(), clock_->TimeNow() - call->start);
    }
    return QueueAnswer(connection, a);
  };
  absl::StatusOr<Json> body = BodyObject("RepositoryIndex", call->body);
  if (!body.ok()) return answer(body.status(), ErrorAnswer(body.status()));
  bool ready = false;
  if (const auto it = body->find("ready"); it != body->end()) {
    if (!it->is_boolean()) {
      const absl::Status s = absl::InvalidArgumentError(absl::StrCat(
          "RepositoryIndex: \"ready\" must be true or false, got ", ClientText(it->dump())));
      return answer(s, ErrorAnswer(s));
    }
    ready = it->get<bool>();
  }
  if (options_.repository != nullptr) {
    return answer(absl::OkStatus(), JsonOk(IndexJson(options_.repository->Index(ready))));
  }
  std::vector<IndexEntry> index;  // --model: the one model, ready
  for (const ServableHandle& h : models_->Served()) {
    index.push_back({ServableOf(h).info().name, ServableOf(h).info().version, "READY", ""});
  }
  return answer(absl::OkStatus(), JsonOk(IndexJson(index)));
}

int RestServer::RepositoryControl(MHD_Connection* connection, Call* call, bool load,
                                  const std::string& name) {
  const absl::string_view label = load ? kRepositoryModelLoad : kRepositoryModelUnload;
  const absl::string_view rpc = label.substr(5);  // without "http_"
  if (metrics_ != nullptr) metrics_->RequestStarted(label);
  auto fail = [&](const absl::Status& s) {
    call->answered = true;
    if (metrics_ != nullptr) {
      metrics_->RequestFinished(label, s.code(), clock_->TimeNow() - call->start);
    }
    return QueueAnswer(connection, ErrorAnswer(s));
  };
  absl::StatusOr<Json> body = BodyObject(rpc, call->body);
  if (!body.ok()) return fail(body.status());
  if (absl::Status s = RefuseParameters(rpc, *body); !s.ok()) return fail(s);
  if (options_.repository == nullptr) {
    return fail(NoRepositoryError(rpc));
  }
  if (stopping_.load()) {
    return fail(absl::UnavailableError("the server is shutting down; retry elsewhere"));
  }
  bool idle = false;
  if (!repository_busy_.compare_exchange_strong(idle, true)) {
    return fail(RepositoryBusyError(rpc, name));
  }
  // Suspended before the worker can resume it, so that the resume follows.
  call->submitted = true;
  Suspended();
  MHD_suspend_connection(connection);
  absl::MutexLock l(&worker_mu_);
  if (repository_worker_.joinable()) repository_worker_.join();  // done: it cleared busy
  repository_worker_ = std::thread([this, connection, call, load, name, label] {
    const absl::Status s = load ? options_.repository->LoadModel(name)
                                : options_.repository->UnloadModel(name);
    if (metrics_ != nullptr) {
      metrics_->RequestFinished(label, s.code(), clock_->TimeNow() - call->start);
    }
    call->answer = s.ok() ? JsonOk(Json::object()) : ErrorAnswer(s);
    repository_busy_.store(false);
    MHD_resume_connection(connection);  // the last touch of the Call
    Resumed();
  });
  return MHD_YES;
}

void RestServer::JoinRepositoryWorker() {
  absl::MutexLock l(&worker_mu_);
  if (repository_worker_.joinable()) repository_worker_.join();
}

}  // namespace metalserve
