// A fake ServableFactory for the model manager's tests: it "loads" a version
// by making a FakeServable, fails the versions it is told to fail, can hold a
// load until the test lets it go, and records every load and every
// destruction (with the destroying thread) for the test to inspect.
//
// Thread-safety: thread-safe; the manager calls Load from control threads and
// destroys servables on its release thread.
#ifndef METALSERVE_TESTS_REPOSITORY_FAKE_SERVABLE_H_
#define METALSERVE_TESTS_REPOSITORY_FAKE_SERVABLE_H_

#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/repository/servable.h"

namespace metalserve::testing {

class FakeFactory;

class FakeServable : public Servable {
 public:
  FakeServable(ServableId id, FakeFactory* factory) : id_(std::move(id)), factory_(factory) {}
  ~FakeServable() override;
  const ServableId& id() const { return id_; }

 private:
  const ServableId id_;
  FakeFactory* const factory_;
};

class FakeFactory : public ServableFactory {
 public:
  struct Destroyed {
    ServableId id;
    std::thread::id thread;
  };

  absl::StatusOr<std::unique_ptr<Servable>> Load(const LoadSpec& spec) override {
    Gate gate;
    absl::Status failure;
    {
      absl::MutexLock l(&mu_);
      loads_.push_back(spec.id);
      if (auto it = gates_.find(spec.id.version); it != gates_.end()) gate = it->second;
      if (auto it = failures_.find(spec.id.version); it != failures_.end()) failure = it->second;
    }
    if (gate.entered != nullptr) {
      gate.entered->Notify();
      gate.proceed->WaitForNotification();
    }
    if (!failure.ok()) return failure;
    return std::make_unique<FakeServable>(spec.id, this);
  }

  // Loads of `version` (of any model) fail with `status`.
  void Fail(int64_t version, absl::Status status) {
    absl::MutexLock l(&mu_);
    failures_[version] = std::move(status);
  }
  // Loads of `version` notify `entered`, then wait for `proceed`.
  void Hold(int64_t version, absl::Notification* entered, absl::Notification* proceed) {
    absl::MutexLock l(&mu_);
    gates_[version] = Gate{entered, proceed};
  }

  std::vector<ServableId> loads() const {
    absl::MutexLock l(&mu_);
    return loads_;
  }
  std::vector<Destroyed> destroyed() const {
    absl::MutexLock l(&mu_);
    return destroyed_;
  }
  void OnDestroyed(const ServableId& id) {
    absl::MutexLock l(&mu_);
    destroyed_.push_back({id, std::this_thread::get_id()});
  }

 private:
  struct Gate {
    absl::Notification* entered = nullptr;
    absl::Notification* proceed = nullptr;
  };
  mutable absl::Mutex mu_;
  std::map<int64_t, absl::Status> failures_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Gate> gates_ ABSL_GUARDED_BY(mu_);
  std::vector<ServableId> loads_ ABSL_GUARDED_BY(mu_);
  std::vector<Destroyed> destroyed_ ABSL_GUARDED_BY(mu_);
};

inline FakeServable::~FakeServable() { factory_->OnDestroyed(id_); }

}  // namespace metalserve::testing

#endif  // METALSERVE_TESTS_REPOSITORY_FAKE_SERVABLE_H_
