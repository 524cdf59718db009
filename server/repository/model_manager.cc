#include "server/repository/model_manager.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"

namespace metalserve {
namespace {

// Gives the heap's free pages back to the system (every arena, pages in the
// middle of a heap too), after a servable freed its model; returns what it
// did, for the "released" log line. The process keeps large freed blocks in
// the heap on purpose (process_setup.cc), so without this a version's
// weights and warm-up buffers stayed resident after its unload. One walk of
// the free lists, on the release thread, never on a request's path. Nothing
// to do where there is no glibc (macOS returns large freed blocks itself).
std::string ReturnFreedHeap() {
#ifdef __GLIBC__
  const absl::Time start = absl::Now();
  const int returned = malloc_trim(0);
  return absl::StrCat("; heap trimmed in ", absl::FormatDuration(absl::Now() - start),
                      returned ? "" : " (nothing to return)");
#else
  return "";
#endif
}

}  // namespace

struct ModelManager::Loaded {
  const VersionEntry* version = nullptr;
  uint64_t instance = 0;
  ServableHandle handle;  // set once the factory has loaded it
};

std::string ServableId::ToString() const { return absl::StrCat(model, " version ", version); }

absl::string_view ServableStateName(ServableState state) {
  switch (state) {
    case ServableState::kLoading:
      return "LOADING";
    case ServableState::kReady:
      return "READY";
    case ServableState::kUnloading:
      return "UNLOADING";
    case ServableState::kUnavailable:
      return "UNAVAILABLE";
  }
  return "UNKNOWN";
}

absl::StatusOr<std::unique_ptr<ModelManager>> ModelManager::Create(const Options& options) {
  if (options.factory == nullptr) {
    return absl::InvalidArgumentError("ModelManager::Options::factory is required");
  }
  return std::unique_ptr<ModelManager>(new ModelManager(options));
}

ModelManager::ModelManager(const Options& options) : options_(options) {
  release_thread_ = std::thread([this] { ReleaseLoop(); });
}

ModelManager::~ModelManager() {
  {
    absl::MutexLock control(&control_mu_);
    std::vector<ServableHandle> released;  // dropped after mu_ is unlocked
    absl::MutexLock lock(&mu_);
    for (auto& [model, versions] : served_) {
      for (auto& [version, served] : versions) {
        instances_[served.instance].state = ServableState::kUnloading;
        released.push_back(std::move(served.handle));
      }
    }
    served_.clear();
  }
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int64_t* live) { return *live == 0; }, &live_));
  }
  {
    absl::MutexLock lock(&release_mu_);
    stopping_ = true;
  }
  release_thread_.join();
}

ServableHandle ModelManager::Adopt(uint64_t instance, ServableId id,
                                   std::unique_ptr<Servable> servable) {
  {
    absl::MutexLock lock(&mu_);
    ++live_;
  }
  auto* loaded = new LoadedServable{std::move(id), std::move(servable)};
  return ServableHandle(std::shared_ptr<const LoadedServable>(
      loaded, [this, instance](const LoadedServable* last) {
        Retire(instance, const_cast<LoadedServable*>(last));
      }));
}

void ModelManager::Retire(uint64_t instance, LoadedServable* loaded) {
  absl::MutexLock lock(&release_mu_);
  to_release_.emplace_back(instance, loaded);
}

void ModelManager::ReleaseLoop() {
  for (;;) {
    std::pair<uint64_t, LoadedServable*> next;
    {
      absl::MutexLock lock(&release_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(release_mu_) {
        return stopping_ || !to_release_.empty();
      };
      release_mu_.Await(absl::Condition(&ready));
      if (to_release_.empty()) return;  // stopping, and nothing is left
      next = to_release_.front();
      to_release_.pop_front();
    }
    const std::string released = next.second->id.ToString();
    delete next.second;  // the servable's destructor: no lock held
    LOG(INFO) << "released " << released << ReturnFreedHeap();
    {
      absl::MutexLock lock(&mu_);
      instances_.erase(next.first);
      --live_;
    }
    NotifyStates();
  }
}

std::vector<ModelManager::Loaded> ModelManager::StartLoading(const ModelEntry& entry,
                                                            bool reload_ready) {
  absl::MutexLock lock(&mu_);
  ForgetUnavailable(entry.name);
  const auto served = served_.find(entry.name);
  std::vector<Loaded> pending;
  for (const VersionEntry& v : entry.selected) {
    if (!reload_ready && served != served_.end() && served->second.contains(v.version)) {
      continue;
    }
    const uint64_t instance = next_instance_++;
    instances_[instance] = Instance{{entry.name, v.version}, ServableState::kLoading, ""};
    pending.push_back(Loaded{&v, instance, {}});
  }
  return pending;
}

absl::Status ModelManager::LoadOne(const std::string& model,
                                   const std::shared_ptr<const RepositoryModelConfig>& config,
                                   Loaded* loaded) {
  LoadSpec spec{{model, loaded->version->version}, loaded->version->model_path, config};
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Servable>> servable = options_.factory->Load(spec);
  if (servable.ok() && *servable == nullptr) {
    servable = absl::InternalError("the factory returned no servable");
  }
  if (!servable.ok()) return servable.status();
  LOG(INFO) << "loaded " << spec.id.ToString() << " from " << spec.model_path << " in "
            << absl::FormatDuration(absl::Now() - start);
  loaded->handle = Adopt(loaded->instance, spec.id, *std::move(servable));
  return absl::OkStatus();
}

void ModelManager::NotifyStates() const {
  if (options_.on_states) options_.on_states(States());
}

absl::Status ModelManager::Load(const ModelEntry& entry, bool reload_ready) {
  absl::Status s = LoadAndSwitch(entry, reload_ready);
  NotifyStates();
  return s;
}

absl::Status ModelManager::Unload(absl::string_view model) {
  absl::Status s = UnloadServed(model);
  NotifyStates();
  if (options_.on_unload) options_.on_unload(s.ok() ? std::string(model) : std::string(), s.ok());
  return s;
}

absl::Status ModelManager::LoadAndSwitch(const ModelEntry& entry, bool reload_ready) {
  if (!entry.status.ok()) return entry.status;
  if (entry.selected.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model \"", entry.name, "\": no version selected to load"));
  }
  absl::MutexLock control(&control_mu_);
  std::vector<Loaded> pending = StartLoading(entry, reload_ready);
  const auto config = std::make_shared<const RepositoryModelConfig>(entry.config);
  absl::Status status;
  size_t done = 0;
  for (; done < pending.size() && status.ok(); ++done) {
    status = LoadOne(entry.name, config, &pending[done]);
  }
  std::vector<ServableHandle> released;  // dropped after mu_ is unlocked
  absl::MutexLock lock(&mu_);
  if (!status.ok()) return Abandon(entry.name, status, done - 1, &pending, &released);
  Switch(entry, &pending, &released);
  return absl::OkStatus();
}

void ModelManager::Switch(const ModelEntry& entry, std::vector<Loaded>* pending,
                          std::vector<ServableHandle>* released) {
  std::map<int64_t, Served>& served = served_[entry.name];
  std::map<int64_t, Served> next;
  for (Loaded& l : *pending) {
    instances_[l.instance].state = ServableState::kReady;
    next[l.version->version] = Served{std::move(l.handle), l.instance};
  }
  for (auto& [version, s] : served) {
    const bool kept = std::any_of(entry.selected.begin(), entry.selected.end(),
                                  [v = version](const VersionEntry& e) { return e.version == v; });
    if (kept && !next.contains(version)) {
      next[version] = std::move(s);
      continue;
    }
    instances_[s.instance].state = ServableState::kUnloading;
    released->push_back(std::move(s.handle));
  }
  std::vector<int64_t> versions;
  for (const auto& [version, s] : next) versions.push_back(version);
  LOG(INFO) << "serving model " << entry.name << " versions [" << absl::StrJoin(versions, ",")
            << "]" << (released->empty() ? "" : absl::StrCat("; ", released->size(),
                                                               " version(s) draining"));
  served = std::move(next);
}

absl::Status ModelManager::Abandon(const std::string& model, const absl::Status& failure,
                                   size_t failed, std::vector<Loaded>* pending,
                                   std::vector<ServableHandle>* released) {
  for (size_t i = 0; i < pending->size(); ++i) {
    Loaded& l = (*pending)[i];
    if (i < failed) {
      instances_[l.instance].state = ServableState::kUnloading;
      released->push_back(std::move(l.handle));
    } else if (i == failed) {
      Instance& instance = instances_[l.instance];
      instance.state = ServableState::kUnavailable;
      instance.reason = std::string(failure.message());
    } else {
      instances_.erase(l.instance);
    }
  }
  const Loaded& f = (*pending)[failed];
  const auto served = served_.find(model);
  const std::string still =
      served == served_.end()
          ? std::string("nothing of it was serving")
          : absl::StrCat("versions [", VersionList(served->second), "] keep serving");
  const absl::Status status(
      failure.code(), absl::StrCat("loading ", ServableId{model, f.version->version}.ToString(),
                                   " from ", f.version->model_path, ": ", failure.message(),
                                   "; ", still));
  LOG(WARNING) << status.message();
  return status;
}

absl::Status ModelManager::UnloadServed(absl::string_view model) {
  absl::MutexLock control(&control_mu_);
  std::vector<ServableHandle> released;  // dropped after mu_ is unlocked
  absl::MutexLock lock(&mu_);
  ForgetUnavailable(model);
  const auto it = served_.find(model);
  if (it == served_.end()) {
    return absl::NotFoundError(
        absl::StrCat("model \"", model, "\" is not loaded; loaded: ", LoadedList()));
  }
  for (auto& [version, s] : it->second) {
    instances_[s.instance].state = ServableState::kUnloading;
    released.push_back(std::move(s.handle));
  }
  served_.erase(it);
  LOG(INFO) << "unloaded model " << model << "; " << released.size() << " version(s) draining";
  return absl::OkStatus();
}

absl::StatusOr<ServableHandle> ModelManager::Get(absl::string_view model,
                                                 absl::string_view version,
                                                 LookupMiss* miss) const {
  LookupMiss ignored;
  if (miss == nullptr) miss = &ignored;
  *miss = LookupMiss::kNone;
  absl::ReaderMutexLock lock(&mu_);
  auto it = served_.find(model);
  if (model.empty() && served_.size() == 1) it = served_.begin();  // the only model
  if (it == served_.end()) {
    *miss = LookupMiss::kModel;
    return absl::NotFoundError(
        absl::StrCat("model \"", model, "\" is not loaded; loaded: ", LoadedList()));
  }
  const std::map<int64_t, Served>& versions = it->second;
  if (version.empty()) return versions.rbegin()->second.handle;
  int64_t number = 0;
  if (absl::SimpleAtoi(version, &number)) {
    const auto found = versions.find(number);
    if (found != versions.end()) return found->second.handle;
  }
  *miss = LookupMiss::kVersion;
  return absl::NotFoundError(absl::StrCat("model \"", it->first, "\" has no ready version \"",
                                          version, "\"; ready: [", VersionList(versions), "]"));
}

std::vector<VersionStatus> ModelManager::States() const {
  std::vector<VersionStatus> states;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [instance, i] : instances_) states.push_back({i.id, i.state, i.reason});
  }
  std::sort(states.begin(), states.end(), [](const VersionStatus& a, const VersionStatus& b) {
    return std::tie(a.id.model, a.id.version, a.state) <
           std::tie(b.id.model, b.id.version, b.state);
  });
  return states;
}

bool ModelManager::WaitUntilReleased(absl::string_view model, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto none_left = [this, model]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::none_of(instances_.begin(), instances_.end(), [model](const auto& entry) {
      return entry.second.id.model == model && entry.second.state == ServableState::kUnloading;
    });
  };
  return mu_.AwaitWithTimeout(absl::Condition(&none_left), timeout);
}

void ModelManager::ForgetUnavailable(absl::string_view model) {
  std::erase_if(instances_, [model](const auto& entry) {
    return entry.second.id.model == model && entry.second.state == ServableState::kUnavailable;
  });
}

std::string ModelManager::VersionList(const std::map<int64_t, Served>& versions) {
  std::vector<int64_t> numbers;
  for (const auto& [version, s] : versions) numbers.push_back(version);
  return absl::StrJoin(numbers, ",");
}

std::string ModelManager::LoadedList() const {
  if (served_.empty()) return "none";
  std::vector<std::string> models;
  for (const auto& [model, versions] : served_) {
    models.push_back(absl::StrCat(model, " [", VersionList(versions), "]"));
  }
  return absl::StrJoin(models, ", ");
}

}  // namespace metalserve
