// The model repository as the server runs it: a folder (repository_scan.h)
// whose models the ModelManager (model_manager.h) serves, kept in step with
// the folder according to the model-control mode, Triton's modes:
//
//   none      every model in the folder is loaded at start; the served set
//             changes only when the operator asks for a rescan (SIGHUP ->
//             Rescan()). RepositoryModelLoad/Unload are refused.
//   explicit  as none, and RepositoryModelLoad/Unload load, reload and
//             unload single models (LoadModel / UnloadModel).
//   poll      as none, and the folder is rescanned every poll_interval: new
//             models and versions load, changed files reload, removed
//             models unload. RepositoryModelLoad/Unload are refused (the
//             folder is the one source of truth).
//
// Unlike Triton's explicit mode, every mode loads the whole folder at start
// (a server that starts serving nothing is rarely wanted; unload what you do
// not want served).
//
// A model is (re)loaded when its selected versions or any of its files
// (config.json, a selected model.pt; size and modification time) differ from
// what was loaded. A model whose config.json turns bad, or whose new version
// fails to load, keeps serving what it served; the error is logged and
// shown in Index().
//
// Thread-safety: thread-safe. Rescan, LoadModel and UnloadModel may be
// called from any thread (the poller, the SIGHUP handler's thread, RPC
// handlers); they run one at a time. manager() lookups never wait on them.
//
// Destruction: stops and joins the poller, then destroys the manager (which
// waits for every handle to be released).
#ifndef METALSERVE_SERVER_REPOSITORY_MODEL_REPOSITORY_H_
#define METALSERVE_SERVER_REPOSITORY_MODEL_REPOSITORY_H_

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
#include "common/clock.h"
#include "server/repository/model_manager.h"
#include "server/repository/repository_scan.h"
#include "server/repository/servable.h"

namespace metalserve {

enum class ModelControl { kNone, kExplicit, kPoll };
// "none", "explicit", "poll"; InvalidArgument naming the value and the
// accepted ones otherwise (for main's --model_control).
absl::StatusOr<ModelControl> ParseModelControl(absl::string_view name);
absl::string_view ModelControlName(ModelControl control);

// One line of the repository index (RepositoryIndex's ModelIndex).
struct IndexEntry {
  std::string model;
  std::string version;  // "" for a model with no version loaded
  std::string state;    // ServableStateName, or "UNAVAILABLE"
  std::string reason;
};

class ModelRepository {
 public:
  struct Options {
    // --model_repository: the repository folder (docs/repository.md).
    // Required; must be a readable folder.
    std::string root;
    // --model_control: none, explicit or poll (above). Default none.
    ModelControl control = ModelControl::kNone;
    // --repository_poll_interval: with poll, the time from the end of one
    // rescan to the start of the next; must be positive. Default 15 s
    // (Triton's default). Not used by the other modes.
    absl::Duration poll_interval = absl::Seconds(15);
    // Loads versions. Required; not owned; must outlive the repository.
    ServableFactory* factory = nullptr;
    // The poller's clock; nullptr: the real clock. Not owned.
    Clock* clock = nullptr;
    // Passed to the manager (ModelManager::Options::on_states).
    std::function<void(const std::vector<VersionStatus>&)> on_states;
    // Passed to the manager (ModelManager::Options::on_unload).
    std::function<void(const std::string& model, bool ok)> on_unload;
  };

  // InvalidArgument naming the field for a missing root or factory or a
  // poll_interval that is not positive under poll; FailedPrecondition naming
  // the path when root cannot be read. Then loads every model of the folder
  // (a model that fails is logged and listed by Index(); the others serve)
  // and, under poll, starts the poller.
  static absl::StatusOr<std::unique_ptr<ModelRepository>> Create(const Options& options);
  ~ModelRepository();
  ModelRepository(const ModelRepository&) = delete;
  ModelRepository& operator=(const ModelRepository&) = delete;

  // Lookups: manager()->Get(model, version).
  ModelManager* manager() { return manager_.get(); }
  const Options& options() const { return options_; }

  // Brings the served set in step with the folder (see the class comment).
  // FailedPrecondition when the folder cannot be read (nothing changes);
  // otherwise OK, or the first model's error, after trying every model.
  absl::Status Rescan();

  // RepositoryModelLoad: loads `model` from its folder, or reloads it when
  // its versions or files changed (nothing to do is OK). FailedPrecondition
  // naming the mode unless control is explicit; NotFound listing the
  // repository's models for a name it has not; the config's or the load's
  // error otherwise (what served keeps serving).
  absl::Status LoadModel(const std::string& model);
  // RepositoryModelUnload. FailedPrecondition unless explicit; NotFound
  // listing what is loaded for a model that is not.
  absl::Status UnloadModel(const std::string& model);

  // Every model of the folder and every model still served, with each
  // version's state; `ready_only` keeps the READY ones. Sorted by model and
  // version.
  std::vector<IndexEntry> Index(bool ready_only) const;

 private:
  // What a model was loaded from, to tell whether its folder changed.
  struct Fingerprint {
    std::vector<int64_t> versions;
    std::string config;                 // size and mtime of config.json
    std::map<int64_t, std::string> files;  // size and mtime of each model.pt
    bool operator==(const Fingerprint&) const = default;
  };

  // The last load attempted for a model, and whether it succeeded: the
  // poller does not retry a failed load until the folder changes.
  struct Attempt {
    Fingerprint fingerprint;
    bool ok = false;
  };

  ModelRepository(const Options& options, std::unique_ptr<ModelManager> manager);
  absl::Status CheckExplicit(absl::string_view rpc) const;
  absl::Status RescanLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // Loads `entry` when it differs from the last attempt (or, with `retry`,
  // when that attempt failed).
  absl::Status Sync(const ModelEntry& entry, bool retry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  static Fingerprint FingerprintOf(const ModelEntry& entry);
  void PollLoop();

  const Options options_;
  Clock* const clock_;
  std::unique_ptr<ModelManager> manager_;

  // Serialises Rescan, LoadModel and UnloadModel.
  absl::Mutex control_mu_;
  std::map<std::string, Attempt> attempted_ ABSL_GUARDED_BY(control_mu_);

  absl::Mutex poll_mu_;
  bool stopping_ ABSL_GUARDED_BY(poll_mu_) = false;
  std::thread poller_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_REPOSITORY_MODEL_REPOSITORY_H_
