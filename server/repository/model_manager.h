// The model manager: which versions of which models are served, as
// ref-counted servable handles (servable.h). It is the one place that
// decides what a lookup returns; requests never hold a raw pointer to a
// model across calls.
//
// Behaviour (after TF Serving's AspiredVersionsManager and Triton's model
// lifecycle):
// - Load(entry) makes entry.selected (a scan's choice under the version
//   policy) the model's served versions. Versions not yet ready are loaded
//   first, through the factory, on the calling thread, while the versions
//   already served keep answering. When every one has loaded, the served set
//   switches at one point (one critical section): a lookup sees the old set
//   or the new one, never neither. Versions that left the set are unloaded.
// - A load that fails (any version) changes nothing that is served: the
//   versions that did load are discarded, the failed one is recorded as
//   UNAVAILABLE with the reason, and the error names the version, its file,
//   the factory's message and what keeps serving.
// - Unload(model) stops serving every version of it at once; later lookups
//   get NOT_FOUND listing what is loaded.
// - An unloaded or replaced version drains: requests that took a handle
//   before keep it alive and finish on it; it is UNLOADING until the last
//   handle is released, then destroyed on the manager's release thread and
//   forgotten. With glibc, that thread then calls malloc_trim(0), so the
//   heap pages the version freed go back to the system (the server keeps
//   large freed blocks in its heap for reuse, server/process_setup.cc;
//   without the trim an unload returned no resident memory on CPU).
// - Get(model, version): "" is the newest (highest-numbered) ready version.
//
// States per loaded instance, for metrics and the repository index: LOADING
// (the factory is running), READY (served), UNLOADING (no longer served,
// handles outstanding), UNAVAILABLE (the last load of that version failed;
// kept with its reason until the model is next loaded or unloaded, so the
// list stays bounded by what is in the repository).
//
// Cost: Get is a reader-locked map lookup and one shared_ptr copy; it never
// waits for a load (the factory runs without the lookup lock).
//
// Thread-safety: thread-safe. Get and States may be called from any thread
// at any time. Load and Unload may be called from several threads; they run
// one at a time (the device serialises loads anyway, and a model's served set
// must change in order), while lookups go on.
//
// Destruction: the destructor unloads every model, then blocks until every
// handle has been released and every servable destroyed, then joins the
// release thread. Destroy the manager after the server has stopped admitting
// and has finished its requests.
#ifndef METALSERVE_SERVER_REPOSITORY_MODEL_MANAGER_H_
#define METALSERVE_SERVER_REPOSITORY_MODEL_MANAGER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/repository/repository_scan.h"
#include "server/repository/servable.h"

namespace metalserve {

enum class ServableState { kLoading, kReady, kUnloading, kUnavailable };
// "LOADING", "READY", "UNLOADING", "UNAVAILABLE" (Triton's names).
absl::string_view ServableStateName(ServableState state);

struct VersionStatus {
  ServableId id;
  ServableState state = ServableState::kUnavailable;
  std::string reason;  // why UNAVAILABLE; "" otherwise
};

// Which part of a lookup (ModelManager::Get, ModelLookup::Find) named
// nothing that is served, so that callers word the NotFound without reading
// its text.
enum class LookupMiss { kNone, kModel, kVersion };

class ModelManager {
 public:
  struct Options {
    // Loads versions. Required; not owned; must outlive the manager.
    ServableFactory* factory = nullptr;
    // Optional: told States() after every change (a load or unload ended, a
    // drained version was freed), on the thread that made it, with no lock
    // held. For the model_state metric; must be quick.
    std::function<void(const std::vector<VersionStatus>&)> on_states;
    // Optional: told each Unload's outcome, with the model's name when it
    // was loaded (ok) and "" when it was not (the name is the caller's, so
    // it never becomes a label). For model_unloads_total; must be quick.
    std::function<void(const std::string& model, bool ok)> on_unload;
  };

  // InvalidArgument without a factory. Starts the release thread.
  static absl::StatusOr<std::unique_ptr<ModelManager>> Create(const Options& options);
  ~ModelManager();
  ModelManager(const ModelManager&) = delete;
  ModelManager& operator=(const ModelManager&) = delete;

  // Serves entry.selected of entry.name (see the class comment). With
  // `reload_ready`, versions already ready are loaded anew too (their file
  // changed) and switched like new ones. Returns entry.status when it is not
  // OK, without touching the model; otherwise the first failed version's
  // factory status code with the message described above.
  absl::Status Load(const ModelEntry& entry, bool reload_ready = false);

  // Stops serving every version of `model`; they drain and are freed as the
  // class comment says. NotFound listing what is loaded for a model that is
  // not loaded.
  absl::Status Unload(absl::string_view model);

  // A handle to a ready version: `version` "" for the newest, else its
  // decimal number; `model` "" for the only model served when exactly one
  // is (one map lookup, as for a name). NotFound naming the value and
  // listing what is loaded (for an unknown model, or "" with none or several
  // served) or the model's ready versions (for an unknown version); then
  // `*miss`, when given, says which of the two it was.
  absl::StatusOr<ServableHandle> Get(absl::string_view model, absl::string_view version,
                                     LookupMiss* miss = nullptr) const;

  // Every instance the manager knows, by model, then version, then state.
  std::vector<VersionStatus> States() const;

  // Waits until no unloaded or replaced version of `model` is left undestroyed
  // (its last handle released and the servable destroyed), or `timeout`
  // passes; true when none is left. For drain reports and tests.
  bool WaitUntilReleased(absl::string_view model, absl::Duration timeout) const;

 private:
  struct Instance {
    ServableId id;
    ServableState state = ServableState::kLoading;
    std::string reason;
  };
  struct Loaded;  // one version Load is loading, before the switch
  struct Served {
    ServableHandle handle;
    uint64_t instance = 0;
  };

  explicit ModelManager(const Options& options);
  absl::Status LoadAndSwitch(const ModelEntry& entry, bool reload_ready);
  absl::Status UnloadServed(absl::string_view model);
  void NotifyStates() const;

  // Records a LOADING instance for each version of entry.selected to load.
  std::vector<Loaded> StartLoading(const ModelEntry& entry, bool reload_ready);
  // Runs the factory for one version (no lock held) and adopts the result.
  absl::Status LoadOne(const std::string& model,
                       const std::shared_ptr<const RepositoryModelConfig>& config,
                       Loaded* loaded);
  // Wraps a servable from the factory in a handle whose last release hands
  // it to the release thread.
  ServableHandle Adopt(uint64_t instance, ServableId id, std::unique_ptr<Servable> servable);
  // The one point where a model's served set changes after a load; the
  // versions leaving it are moved to `released`.
  void Switch(const ModelEntry& entry, std::vector<Loaded>* pending,
              std::vector<ServableHandle>* released) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After pending[failed] failed: discards the others, records the failure,
  // and returns the error for Load.
  absl::Status Abandon(const std::string& model, const absl::Status& failure, size_t failed,
                       std::vector<Loaded>* pending, std::vector<ServableHandle>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetUnavailable(absl::string_view model) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static std::string VersionList(const std::map<int64_t, Served>& versions);
  std::string LoadedList() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A handle's deleter: queues the servable for the release thread.
  void Retire(uint64_t instance, LoadedServable* loaded);
  void ReleaseLoop();

  const Options options_;

  // Serialises Load and Unload; never held by Get.
  absl::Mutex control_mu_;

  mutable absl::Mutex mu_;
  // The served versions of each model, by version; a model with none is
  // absent.
  std::map<std::string, std::map<int64_t, Served>, std::less<>> served_
      ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Instance> instances_ ABSL_GUARDED_BY(mu_);
  uint64_t next_instance_ ABSL_GUARDED_BY(mu_) = 1;
  // Servables adopted and not yet destroyed.
  int64_t live_ ABSL_GUARDED_BY(mu_) = 0;

  // Servables whose last handle was released, waiting for the release
  // thread. A separate lock: a handle may be released anywhere, also by code
  // that holds mu_.
  absl::Mutex release_mu_;
  std::deque<std::pair<uint64_t, LoadedServable*>> to_release_ ABSL_GUARDED_BY(release_mu_);
  bool stopping_ ABSL_GUARDED_BY(release_mu_) = false;
  std::thread release_thread_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_REPOSITORY_MODEL_MANAGER_H_
