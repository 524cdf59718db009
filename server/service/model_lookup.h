// ModelLookup: the one seam through which every front end (native gRPC,
// KServe gRPC, REST) finds the model version a request is for, as a
// ref-counted ServableHandle (server/repository/servable.h) whose servable
// is a ModelServable (model_servable.h). A request takes its handle right
// after reading the model name and version and keeps it until it is
// answered; no front end holds a runner across requests.
//
// Two implementations:
//   - ManagerLookup: the models of a ModelManager (--model_repository).
//   - SingleModelLookup: one servable (--model=FILE, and tests that start a
//     server around one runner); it answers exactly as the one-model server
//     always did: the model's own name and version string.
//
// Thread-safety: implementations are thread-safe; Get and Served may be
// called from any thread at any time.
#ifndef METALSERVE_SERVER_SERVICE_MODEL_LOOKUP_H_
#define METALSERVE_SERVER_SERVICE_MODEL_LOOKUP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/repository/model_manager.h"
#include "server/repository/servable.h"
#include "server/service/model_servable.h"

namespace metalserve {

class ModelLookup {
 public:
  virtual ~ModelLookup() = default;
  // A handle to `model` at `version` ("" is the newest ready version; an
  // empty `model` is the only model when exactly one is served). NotFound
  // naming the value and listing what is loaded otherwise, and then `*miss`
  // (when given) says whether the model or the version was not found. The
  // handle's servable is a ModelServable. Cheap: no list is built, also for
  // an empty `model`.
  virtual absl::StatusOr<ServableHandle> Find(absl::string_view model, absl::string_view version,
                                              LookupMiss* miss) const = 0;
  absl::StatusOr<ServableHandle> Get(absl::string_view model, absl::string_view version) const {
    return Find(model, version, nullptr);
  }
  // Every version served now, by model then version.
  virtual std::vector<ServableHandle> Served() const = 0;
  // The model when this lookup can only ever serve one (--model), at no
  // lookup cost, so that a full queue is refused before a body is parsed;
  // empty otherwise (a repository's request is read up to its model name
  // first).
  virtual ServableHandle SoleModel() const { return {}; }
};

// The ModelServable of a handle from a ModelLookup (never null for those).
// Responses report its runner's name and version (info().version: the
// version folder's number for a repository model).
inline ModelServable& ServableOf(const ServableHandle& handle) {
  return *handle.As<ModelServable>();
}

// lookup.Get(model, version); a NotFound for the model's name (LookupMiss::
// kModel) starts with `field` (the request field that named it, e.g.
// "model_name"), one for its version does not (the same text on every front
// end).
absl::StatusOr<ServableHandle> LookUpModel(const ModelLookup& lookup, absl::string_view field,
                                           absl::string_view model, absl::string_view version);

// The only model served, for logging a call refused before it named one
// that is served; empty when none or several are served.
ServableHandle OnlyModel(const ModelLookup& lookup);
// An empty ModelInfo, for logging a call with no model at all.
const ModelInfo& NoModelInfo();

class SingleModelLookup final : public ModelLookup {
 public:
  // Serves `servable` under its runner's name and version.
  explicit SingleModelLookup(std::unique_ptr<ModelServable> servable);
  absl::StatusOr<ServableHandle> Find(absl::string_view model, absl::string_view version,
                                      LookupMiss* miss) const override;
  std::vector<ServableHandle> Served() const override { return {handle_}; }
  ServableHandle SoleModel() const override { return handle_; }

 private:
  ServableHandle handle_;
};

class ManagerLookup final : public ModelLookup {
 public:
  // `manager` is not owned and must outlive the lookup.
  explicit ManagerLookup(const ModelManager* manager) : manager_(manager) {}
  absl::StatusOr<ServableHandle> Find(absl::string_view model, absl::string_view version,
                                      LookupMiss* miss) const override;
  std::vector<ServableHandle> Served() const override;

 private:
  const ModelManager* const manager_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_MODEL_LOOKUP_H_
