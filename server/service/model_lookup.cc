#include "server/service/model_lookup.h"

#include <utility>

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

absl::StatusOr<ServableHandle> SingleModelLookup::Find(absl::string_view model,
                                                       absl::string_view version,
                                                       LookupMiss* miss) const {
  LookupMiss ignored;
  if (miss == nullptr) miss = &ignored;
  *miss = LookupMiss::kNone;
  const ModelInfo& info = ServableOf(handle_).info();
  if (!model.empty() && model != info.name) {
    *miss = LookupMiss::kModel;
    return absl::NotFoundError(absl::StrCat("'", ClientText(model),
                                            "' is not served here; this server serves '",
                                            info.name, "'"));
  }
  if (!version.empty() && version != info.version) {
    *miss = LookupMiss::kVersion;
    return absl::NotFoundError(absl::StrCat(
        "version '", ClientText(version), "' of model '", info.name,
        "' is not served here; this server serves version '", info.version, "'"));
  }
  return handle_;
}

absl::StatusOr<ServableHandle> ManagerLookup::Find(absl::string_view model,
                                                   absl::string_view version,
                                                   LookupMiss* miss) const {
  return manager_->Get(model, version, miss);  // "" is the only model served
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
  LookupMiss miss = LookupMiss::kNone;
  absl::StatusOr<ServableHandle> h = lookup.Find(model, version, &miss);
  if (h.ok() || miss != LookupMiss::kModel) return h;
  absl::string_view message = h.status().message();
  absl::ConsumePrefix(&message, "model ");  // the manager's: model "x" is not loaded
  return absl::NotFoundError(absl::StrCat(field, " ", message));
}

}  // namespace metalserve
