#include "server/service/model_lookup.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/service/status_util.h"

namespace metalserve {

SingleModelLookup::SingleModelLookup(std::unique_ptr<ModelServable> servable) {
  const ModelInfo& info = servable->info();
  ServableId id{.model = info.name};
  if (!absl::SimpleAtoi(info.version, &id.version)) id.version = 0;
  handle_ = ServableHandle(std::make_shared<const LoadedServable>(
      LoadedServable{std::move(id), std::move(servable)}));
}

absl::StatusOr<ServableHandle> SingleModelLookup::Get(absl::string_view model,
                                                      absl::string_view version) const {
  const ModelInfo& info = ServableOf(handle_).info();
  if (!model.empty() && model != info.name) {
    return absl::NotFoundError(absl::StrCat("'", ClientText(model),
                                            "' is not served here; this server serves '",
                                            info.name, "'"));
  }
  if (!version.empty() && version != info.version) {
    return absl::NotFoundError(absl::StrCat(
        "version '", ClientText(version), "' of model '", info.name,
        "' is not served here; this server serves version '", info.version, "'"));
  }
  return handle_;
}

absl::StatusOr<ServableHandle> ManagerLookup::Get(absl::string_view model,
                                                  absl::string_view version) const {
  if (model.empty()) {  // the only model served, if there is one
    std::vector<ServableHandle> served = Served();
    if (served.size() == 1) return manager_->Get(served.front().id().model, version);
    return manager_->Get("", version);  // NotFound listing what is loaded
  }
  return manager_->Get(model, version);
}

std::vector<ServableHandle> ManagerLookup::Served() const {
  std::vector<ServableHandle> out;
  for (const VersionStatus& v : manager_->States()) {
    if (v.state != ServableState::kReady) continue;
    absl::StatusOr<ServableHandle> h = manager_->Get(v.id.model, absl::StrCat(v.id.version));
    if (h.ok()) out.push_back(*std::move(h));
  }
  return out;
}

ServableHandle OnlyModel(const ModelLookup& lookup) {
  absl::StatusOr<ServableHandle> h = lookup.Get("", "");
  return h.ok() ? *std::move(h) : ServableHandle();
}

const ModelInfo& NoModelInfo() {
  static const ModelInfo* const kNone = new ModelInfo();
  return *kNone;
}

absl::StatusOr<ServableHandle> LookUpModel(const ModelLookup& lookup, absl::string_view field,
                                           absl::string_view model, absl::string_view version) {
  absl::StatusOr<ServableHandle> h = lookup.Get(model, version);
  if (h.ok() || h.status().code() != absl::StatusCode::kNotFound) return h;
  absl::string_view message = h.status().message();
  if (absl::StartsWith(message, "version ") || absl::StrContains(message, "no ready version")) {
    return h;
  }
  absl::ConsumePrefix(&message, "model ");  // the manager's: model "x" is not loaded
  return absl::NotFoundError(absl::StrCat(field, " ", message));
}

}  // namespace metalserve
