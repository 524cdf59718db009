// The KServe model-repository extension on inference.GRPCInferenceService:
// RepositoryIndex, RepositoryModelLoad and RepositoryModelUnload (Triton's
// messages), over the ModelRepository (server/repository/model_repository.h).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/service/kserve_service.h"
#include "server/service/status_util.h"

namespace metalserve {
namespace {

// INVALID_ARGUMENT naming every parameter a load or unload request sets:
// Triton's "config" and "file:..." overrides are not supported.
template <typename Map>
absl::Status RefuseParameters(absl::string_view rpc, const Map& parameters) {
  if (parameters.empty()) return absl::OkStatus();
  std::vector<std::string> names;
  for (const auto& [name, value] : parameters) names.push_back(ClientText(name));
  std::sort(names.begin(), names.end());
  return absl::InvalidArgumentError(absl::StrCat(
      rpc, " parameters [", absl::StrJoin(names, ", "),
      "] are not supported: the model's folder and config.json are its only source"));
}

absl::Status NoRepository(absl::string_view rpc) {
  return absl::FailedPreconditionError(absl::StrCat(
      rpc, ": the server was started with --model (one model); start it with "
           "--model_repository=DIR and --model_control=explicit to load and unload models"));
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
  // Loading blocks this gRPC thread for the load, verification and warm-up;
  // the callback API runs handlers on a pool, and loads are rare.
  return Answer(context, "RepositoryModelLoad", [&]() -> absl::Status {
    RETURN_IF_ERROR(RefuseParameters("RepositoryModelLoad", request->parameters()));
    if (repository_ == nullptr) return NoRepository("RepositoryModelLoad");
    if (request->model_name().empty()) {
      return absl::InvalidArgumentError("RepositoryModelLoad: model_name is empty");
    }
    return repository_->LoadModel(request->model_name());
  });
}

grpc::ServerUnaryReactor* KServeService::RepositoryModelUnload(
    grpc::CallbackServerContext* context,
    const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  return Answer(context, "RepositoryModelUnload", [&]() -> absl::Status {
    RETURN_IF_ERROR(RefuseParameters("RepositoryModelUnload", request->parameters()));
    if (repository_ == nullptr) return NoRepository("RepositoryModelUnload");
    if (request->model_name().empty()) {
      return absl::InvalidArgumentError("RepositoryModelUnload: model_name is empty");
    }
    return repository_->UnloadModel(request->model_name());
  });
}

}  // namespace metalserve
