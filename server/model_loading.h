// The repository side of main: the runtime options of one repository model
// (the flags with its config.json settings applied), the device threads
// shared by every model on a device, and the SIGHUP rescan thread. Part of
// the metalserve executable (it sees the torch runtime's options, which the
// torch-free service target does not).
#ifndef METALSERVE_SERVER_MODEL_LOADING_H_
#define METALSERVE_SERVER_MODEL_LOADING_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"
#include "server/repository/model_repository.h"
#include "server/runtime/cache_policy.h"
#include "server/runtime/device_thread.h"
#include "server/runtime/torch_runner.h"
#include "server/service/model_lookup.h"
#include "server/service/servable_factory.h"

namespace metalserve {

// One DeviceThread per device a model landed on ("cpu", "cuda:0", "mps"; the
// name device choice resolved, not the one asked for), shared by every model
// on that device: a model asking "auto" and one asking "cpu" both served by
// the CPU share its thread. Created on first use, with one log line
// ("device thread for cpu started ..."); and the device's one cache
// policy the same way (cache_policies()). Thread-safety: thread-safe.
// Destruction: drops its references; each thread ends with its last runner.
class DeviceThreads {
 public:
  // `device` is a resolved name (RuntimeOptions::device_thread_for).
  std::shared_ptr<DeviceThread> For(const std::string& device);
  // The order across models on threads created from now on (fair_queue.h).
  void set_order(FairQueue::Order order) {
    absl::MutexLock l(&mu_);
    order_ = order;
  }
  // The polling of accelerator threads created from now on
  // (DeviceThread::ForDevice).
  void set_accelerator_spin(absl::Duration spin) {
    absl::MutexLock l(&mu_);
    spin_ = spin;
  }
  // The devices' cache policies, one per device as the threads are
  // (cache_policy.h): every model on a device shares its cache clearing.
  CachePolicies* cache_policies() { return &cache_policies_; }

 private:
  absl::Mutex mu_;
  FairQueue::Order order_ ABSL_GUARDED_BY(mu_) = FairQueue::Order::kFair;
  absl::Duration spin_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::map<std::string, std::shared_ptr<DeviceThread>> threads_ ABSL_GUARDED_BY(mu_);
  CachePolicies cache_policies_;
};

// Makes torch runners for repository models: `defaults` (from the flags)
// with the spec's model file, signature (from config.json), warm-up sizes,
// and precision, channels_last, optimize and device settings, on the
// shared thread of the device it lands on ("auto" measures each model as
// --model does, each device timed on its shared thread). `threads` is not
// owned and must outlive the maker.
RunnerMaker TorchRunnerMaker(RuntimeOptions defaults, DeviceThreads* threads);

// Runs the repository's Rescan() on its own thread when asked (SIGHUP: the
// handler only sets a flag; main's loop calls Request()). Requests while a
// rescan runs fold into one more. Destruction: finishes the running rescan,
// then joins.
class Rescanner {
 public:
  explicit Rescanner(ModelRepository* repository);
  ~Rescanner();
  void Request();

 private:
  void Loop();
  ModelRepository* const repository_;
  absl::Mutex mu_;
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The manager's states as metalserve_model_state (ModelRepository::Options::
// on_states). `metrics` is not owned and must outlive the repository.
std::function<void(const std::vector<VersionStatus>&)> ModelStatesToMetrics(Metrics* metrics);

// A running repository: what main keeps while it serves one, in the order
// it is torn down (the rescanner first, the device threads last).
struct RepositoryServing {
  DeviceThreads threads;
  std::unique_ptr<MemoryBudget> memory_budget;  // outlives every servable
  std::unique_ptr<ModelServableFactory> factory;
  std::unique_ptr<ModelRepository> repository;  // waits for every handle
  std::unique_ptr<ManagerLookup> lookup;
  std::unique_ptr<Rescanner> rescanner;
};

// Loads the repository of `options` (root, control, poll interval; its
// factory is made here from `factory` with TorchRunnerMaker(`runtime`)).
// The repository's errors; a model that fails to load is logged and listed
// by the index while the others serve. `device_memory_budget`: bytes each
// device may hold (memory_budget.h); 0 = no limit.
absl::StatusOr<std::unique_ptr<RepositoryServing>> StartRepository(
    ModelRepository::Options options, ModelServableFactory::Options factory,
    const RuntimeOptions& runtime, int64_t device_memory_budget = 0);

// --devices (hybrid_runner.h): `runtime`'s model on each of `devices`, each
// with its own device thread (or, where runtime.device_thread_for is set,
// the thread it gives for that device: a repository's shared ones), checked
// to agree at the warm-up sizes within the verification tolerance.
absl::StatusOr<std::unique_ptr<Runner>> CreateHybridTorchRunner(
    const RuntimeOptions& runtime, const std::vector<std::string>& devices);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_MODEL_LOADING_H_
