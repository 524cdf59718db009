// The KServe model-repository extension on inference.GRPCInferenceService:
// RepositoryIndex, RepositoryModelLoad and RepositoryModelUnload (Triton's
// messages), over the ModelRepository (server/repository/model_repository.h).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/service/kserve_service.h"
#include "server/service/repository_errors.h"
#include "server/service/status_util.h"

namespace metalserve {
namespace {

// The names of the parameters a load or unload request sets.
template <typename Map>
std::vector<std::string> NamesOf(const Map& parameters) {
  std::vector<std::string> names;
  for (const auto& [name, value] : parameters) names.push_back(name);
  return names;
}

}  // namespace

grpc::ServerUnaryReactor* KServeService::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  return Answer(context, "RepositoryIndex", [&]() -> absl::Status {
    if (repository_ == nullptr) {  // --model: the one model, ready
      for (const ServableHandle& h : models_->Served()) {
        auto* m = response->add_models();
        m->set_name(ServableOf(h).info().name);
        m->set_version(ServableOf(h).info().version);
        m->set_state("READY");
      }
      return absl::OkStatus();
    }
    // repository_name is ignored: this server has one repository.
    for (const IndexEntry& e : repository_->Index(request->ready())) {
      auto* m = response->add_models();
      m->set_name(e.model);
      m->set_version(e.version);
      m->set_state(e.state);
      m->set_reason(ClientText(e.reason));
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::RepositoryModelLoad(
    grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse*) {
  return RepositoryControl(context, "RepositoryModelLoad", request->model_name(),
                           RefuseRepositoryParameters("RepositoryModelLoad", NamesOf(request->parameters())),
                           /*load=*/true);
}

grpc::ServerUnaryReactor* KServeService::RepositoryModelUnload(
    grpc::CallbackServerContext* context,
    const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  return RepositoryControl(context, "RepositoryModelUnload", request->model_name(),
                           RefuseRepositoryParameters("RepositoryModelUnload", NamesOf(request->parameters())),
                           /*load=*/false);
}

// A load takes seconds (read, verify, warm up): it runs on the repository
// worker, which finishes the call; this handler returns at once.
grpc::ServerUnaryReactor* KServeService::RepositoryControl(
    grpc::CallbackServerContext* context, absl::string_view rpc, const std::string& model,
    const absl::Status& parameters, bool load) {
  const absl::Time start = clock_->TimeNow();
  if (metrics_ != nullptr) metrics_->RequestStarted(rpc);
  const UnaryCall call{.context = context, .reactor = context->DefaultReactor(),
                       .method = rpc, .metrics = metrics_, .start = start};
  absl::Status refused = parameters;
  if (refused.ok() && repository_ == nullptr) refused = NoRepositoryError(rpc);
  if (refused.ok() && model.empty()) {
    refused = absl::InvalidArgumentError(absl::StrCat(rpc, ": model_name is empty"));
  }
  if (refused.ok()) {
    refused = control_worker_.TryRun(
        rpc, model,
        [this, model, load] {
          return load ? repository_->LoadModel(model) : repository_->UnloadModel(model);
        },
        [this, call](const absl::Status& s) {
          FinishCall(call, s, s.code(), 0, RunStats{}, clock_->TimeNow());
        });
  }
  if (!refused.ok()) return FinishInHandler(call, refused, clock_->TimeNow());
  return call.reactor;
}

}  // namespace metalserve
