// A servable is one loaded version of one model: everything a request of
// that version uses (in the server: the runner, its batch queue, executor and
// statistics). The model manager (model_manager.h) owns servables and hands
// them out as ServableHandles; a ServableFactory, which the server
// implements, loads them. This header knows nothing of torch, gRPC or
// tensors, so the manager is tested with fake servables.
//
// Lifetime: a servable lives while the manager serves it or any handle to it
// is held. A request takes a handle when it is admitted and keeps it until it
// is finished, so nothing it uses is freed under it; when the version has
// been unloaded or replaced and the last handle is released, the manager
// destroys the servable on its own release thread (never on the thread that
// released the handle, so a servable may join its own worker threads in its
// destructor).
//
// Thread-safety: ServableId and ServableHandle are values; copying and
// destroying handles is thread-safe (a std::shared_ptr underneath). A
// Servable is used from many request threads at once and must be
// thread-safe itself; the factory is called from control threads (load
// requests, the start-up scan, the poller), possibly several at once for
// different models.
#ifndef METALSERVE_SERVER_REPOSITORY_SERVABLE_H_
#define METALSERVE_SERVER_REPOSITORY_SERVABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/model_config/repository_config.h"

namespace metalserve {

struct ServableId {
  std::string model;
  int64_t version = 0;

  // "resnet18 version 2", for logs and errors.
  std::string ToString() const;
  friend bool operator==(const ServableId&, const ServableId&) = default;
};

class Servable {
 public:
  // Runs on the manager's release thread once no handle is left: a servable
  // with a queue finds it empty by then (every queued request held a handle).
  // Then runs the hook set by RunWhenFreed, if any.
  virtual ~Servable() {
    if (when_freed_) when_freed_();
  }

  // `hook` runs once the servable has been destroyed (after the derived
  // class's destructor freed the model): the factory gives the version's
  // memory back to the device budget this way. Set it before handing the
  // servable to the manager.
  void RunWhenFreed(std::function<void()> hook) { when_freed_ = std::move(hook); }

 private:
  std::function<void()> when_freed_;
};

// A servable together with the version it is, as the manager shares it.
struct LoadedServable {
  ServableId id;
  std::unique_ptr<Servable> servable;
};

// A counted reference to one loaded version: copy it to share, drop it to
// release. Empty when default-constructed.
class ServableHandle {
 public:
  ServableHandle() = default;
  explicit ServableHandle(std::shared_ptr<const LoadedServable> loaded)
      : loaded_(std::move(loaded)) {}

  explicit operator bool() const { return loaded_ != nullptr; }
  // The version this handle holds. Requires a non-empty handle.
  const ServableId& id() const { return loaded_->id; }
  Servable* get() const { return loaded_ ? loaded_->servable.get() : nullptr; }
  // The servable as the factory's type; nullptr when it is another type.
  template <typename T>
  T* As() const {
    return dynamic_cast<T*>(get());
  }

 private:
  std::shared_ptr<const LoadedServable> loaded_;
};

// What a factory needs to load one version.
struct LoadSpec {
  ServableId id;
  std::string model_path;  // DIR/<model>/<version>/model.pt
  // The model's config.json: signature, settings overriding the flags.
  std::shared_ptr<const RepositoryModelConfig> config;
};

class ServableFactory {
 public:
  virtual ~ServableFactory() = default;
  // Loads, verifies and warms up one version, blocking the calling thread
  // until it can serve. The status names the file and the reason: NotFound
  // for an unreadable file, InvalidArgument for a model that fails
  // verification, ResourceExhausted for device memory. A failed load must
  // leave nothing behind (the manager keeps serving what it served).
  virtual absl::StatusOr<std::unique_ptr<Servable>> Load(const LoadSpec& spec) = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_REPOSITORY_SERVABLE_H_
