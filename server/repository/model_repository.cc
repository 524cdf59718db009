#include "server/repository/model_repository.h"

#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "common/status_macros.h"

namespace metalserve {
namespace {

// "size:mtime" of a file; "" when it cannot be read.
std::string FileStamp(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return "";
  const auto mtime = std::filesystem::last_write_time(path, ec);
  if (ec) return "";
  return absl::StrCat(size, ":", mtime.time_since_epoch().count());
}

}  // namespace

absl::StatusOr<ModelControl> ParseModelControl(absl::string_view name) {
  if (name == "none") return ModelControl::kNone;
  if (name == "explicit") return ModelControl::kExplicit;
  if (name == "poll") return ModelControl::kPoll;
  return absl::InvalidArgumentError(
      absl::StrCat("model control '", name, "' is not one of none, explicit, poll"));
}

absl::string_view ModelControlName(ModelControl control) {
  switch (control) {
    case ModelControl::kNone:
      return "none";
    case ModelControl::kExplicit:
      return "explicit";
    case ModelControl::kPoll:
      return "poll";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::Create(
    const Options& options) {
  if (options.root.empty()) {
    return absl::InvalidArgumentError("ModelRepository::Options::root (--model_repository) "
                                      "is required");
  }
  if (options.control == ModelControl::kPoll && options.poll_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("repository_poll_interval ", absl::FormatDuration(options.poll_interval),
                     " must be positive with --model_control=poll"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ModelManager> manager,
                   ModelManager::Create({.factory = options.factory,
                                          .on_states = options.on_states,
                                          .on_unload = options.on_unload}));
  // Readable at all? A folder that is not fails the start; a bad model does not.
  RETURN_IF_ERROR(ScanRepository(options.root).status());
  std::unique_ptr<ModelRepository> repository(new ModelRepository(options, std::move(manager)));
  const absl::Status loaded = repository->Rescan();
  if (!loaded.ok()) LOG(WARNING) << "model repository " << options.root << ": " << loaded;
  if (options.control == ModelControl::kPoll) {
    repository->poller_ = std::thread([r = repository.get()] { r->PollLoop(); });
  }
  return repository;
}

ModelRepository::ModelRepository(const Options& options, std::unique_ptr<ModelManager> manager)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::RealClock()),
      manager_(std::move(manager)) {}

ModelRepository::~ModelRepository() {
  {
    absl::MutexLock lock(&poll_mu_);
    stopping_ = true;
  }
  if (poller_.joinable()) poller_.join();
  manager_.reset();
}

absl::Status ModelRepository::CheckExplicit(absl::string_view rpc) const {
  if (options_.control == ModelControl::kExplicit) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      rpc, " needs --model_control=explicit; this server runs --model_control=",
      ModelControlName(options_.control),
      options_.control == ModelControl::kPoll ? " (the folder decides what is served)"
                                              : " (SIGHUP rescans the folder)"));
}

absl::Status ModelRepository::Rescan() {
  absl::MutexLock lock(&control_mu_);
  return RescanLocked();
}

absl::Status ModelRepository::RescanLocked() {
  ASSIGN_OR_RETURN(RepositoryScan scan, ScanRepository(options_.root));
  absl::Status first;
  std::set<std::string> present;
  for (const ModelEntry& entry : scan.models) {
    present.insert(entry.name);
    const absl::Status synced = Sync(entry, /*retry=*/false);
    if (first.ok()) first = synced;
  }
  for (auto it = attempted_.begin(); it != attempted_.end();) {
    if (present.contains(it->first)) {
      ++it;
      continue;
    }
    LOG(INFO) << "model " << it->first << " is no longer in " << options_.root << "; unloading";
    const absl::Status unloaded = manager_->Unload(it->first);
    if (!unloaded.ok() && !absl::IsNotFound(unloaded)) LOG(WARNING) << unloaded;
    it = attempted_.erase(it);
  }
  return first;
}

ModelRepository::Fingerprint ModelRepository::FingerprintOf(const ModelEntry& entry) {
  Fingerprint f;
  f.config = FileStamp(entry.config_path);
  for (const VersionEntry& v : entry.selected) {
    f.versions.push_back(v.version);
    f.files[v.version] = FileStamp(v.model_path);
  }
  return f;
}

absl::Status ModelRepository::Sync(const ModelEntry& entry, bool retry) {
  const auto last = attempted_.find(entry.name);
  if (!entry.status.ok()) {
    // A model that serves keeps serving; the error shows in Index().
    if (last == attempted_.end() || last->second.ok) LOG(WARNING) << entry.status.message();
    return entry.status;
  }
  const Fingerprint now = FingerprintOf(entry);
  if (last != attempted_.end() && last->second.fingerprint == now &&
      (last->second.ok || !retry)) {
    return last->second.ok ? absl::OkStatus()
                           : absl::FailedPreconditionError(absl::StrCat(
                                 "model ", entry.name, ": its last load failed and its "
                                 "files have not changed since"));
  }
  for (const std::string& note : entry.notes) LOG(INFO) << note;
  // Versions still selected are loaded anew when their file or the config
  // changed; otherwise they keep serving as they are.
  bool reload_ready = false;
  if (last != attempted_.end()) {
    const Fingerprint& before = last->second.fingerprint;
    reload_ready = before.config != now.config;
    for (const auto& [version, stamp] : now.files) {
      const auto was = before.files.find(version);
      if (was != before.files.end() && was->second != stamp) reload_ready = true;
    }
  }
  const absl::Status loaded = manager_->Load(entry, reload_ready);
  attempted_[entry.name] = Attempt{now, loaded.ok()};
  return loaded;
}

absl::Status ModelRepository::LoadModel(const std::string& model) {
  RETURN_IF_ERROR(CheckExplicit("RepositoryModelLoad"));
  absl::MutexLock lock(&control_mu_);
  ASSIGN_OR_RETURN(ModelEntry entry, ScanModel(options_.root, model));
  return Sync(entry, /*retry=*/true);
}

absl::Status ModelRepository::UnloadModel(const std::string& model) {
  RETURN_IF_ERROR(CheckExplicit("RepositoryModelUnload"));
  absl::MutexLock lock(&control_mu_);
  RETURN_IF_ERROR(manager_->Unload(model));
  attempted_.erase(model);
  return absl::OkStatus();
}

std::vector<IndexEntry> ModelRepository::Index(bool ready_only) const {
  std::map<std::string, std::vector<VersionStatus>> states;
  for (VersionStatus& s : manager_->States()) states[s.id.model].push_back(std::move(s));
  std::map<std::string, std::string> unloaded;  // folder models with no state: why
  if (absl::StatusOr<RepositoryScan> scan = ScanRepository(options_.root); scan.ok()) {
    for (const ModelEntry& e : scan->models) {
      if (!states.contains(e.name)) {
        unloaded[e.name] = e.status.ok() ? "not loaded" : std::string(e.status.message());
      }
    }
  }
  std::vector<IndexEntry> index;
  for (const auto& [model, reason] : unloaded) {
    if (!ready_only) index.push_back({model, "", "UNAVAILABLE", reason});
  }
  for (const auto& [model, versions] : states) {
    for (const VersionStatus& s : versions) {
      if (ready_only && s.state != ServableState::kReady) continue;
      index.push_back({model, absl::StrCat(s.id.version),
                       std::string(ServableStateName(s.state)), s.reason});
    }
  }
  std::sort(index.begin(), index.end(), [](const IndexEntry& a, const IndexEntry& b) {
    return std::tie(a.model, a.version) < std::tie(b.model, b.version);
  });
  return index;
}

void ModelRepository::PollLoop() {
  for (;;) {
    {
      absl::MutexLock lock(&poll_mu_);
      const absl::Time next = clock_->TimeNow() + options_.poll_interval;
      clock_->AwaitWithDeadline(&poll_mu_, absl::Condition(&stopping_), next);
      if (stopping_) return;
    }
    const absl::Status rescanned = Rescan();
    if (!rescanned.ok()) VLOG(1) << "repository poll: " << rescanned;
  }
}

}  // namespace metalserve
