#include "server/model_loading.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/runtime/hybrid_runner.h"

namespace metalserve {

std::shared_ptr<DeviceThread> DeviceThreads::For(const std::string& device) {
  absl::MutexLock l(&mu_);
  std::shared_ptr<DeviceThread>& t = threads_[device];
  if (t == nullptr) {
    t = DeviceThread::Create(device, DeviceThread::ForDevice(device, order_, spin_));
    LOG(INFO) << "repository: device thread for " << device << " started; every model on "
              << device << " shares it";
  }
  return t;
}

RunnerMaker TorchRunnerMaker(RuntimeOptions defaults, DeviceThreads* threads) {
  return [defaults = std::move(defaults),
          threads](const RunnerSpec& spec) -> absl::StatusOr<std::unique_ptr<Runner>> {
    RuntimeOptions ro = defaults;
    ro.model_path = spec.model_path;
    // The signature comes from config.json, already read by the scan.
    ro.signature_path = spec.config_path;
    const ModelSignature signature = spec.signature;
    ro.signature_codec.read = [signature](const std::string&) { return signature; };
    ro.write_inferred_signature = false;
    ro.input_shapes.clear();
    ro.input_dtypes.clear();
    ro.warmup_batch_sizes = spec.warmup_batch_sizes;
    const ModelSettings& s = spec.settings;
    if (s.precision.has_value()) ro.precision = *s.precision;
    if (s.channels_last.has_value()) ro.channels_last = *s.channels_last;
    if (s.optimize.has_value()) ro.optimize = *s.optimize;
    if (s.device.has_value()) ro.device = *s.device;
    // Keyed by the device the choice lands on, asked once it is known.
    ro.device_thread = nullptr;
    ro.device_thread_for = [threads](const std::string& device) { return threads->For(device); };
    ro.device_key = absl::StrCat(spec.id.model, ":", spec.id.version);
    ro.cache_policies = threads->cache_policies();
    if (s.devices.empty()) return CreateTorchRunner(ro);
    // Hybrid: a runner per device, each on that device's shared thread
    // (device_thread_for above).
    return CreateHybridTorchRunner(ro, s.devices);
  };
}

Rescanner::Rescanner(ModelRepository* repository)
    : repository_(repository), thread_([this] { Loop(); }) {}

Rescanner::~Rescanner() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void Rescanner::Request() {
  absl::MutexLock l(&mu_);
  pending_ = true;
}

void Rescanner::Loop() {
  while (true) {
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](Rescanner* r) ABSL_NO_THREAD_SAFETY_ANALYSIS { return r->pending_ || r->stopping_; },
          this));
      if (stopping_) return;
      pending_ = false;
    }
    LOG(INFO) << "SIGHUP: rescanning the model repository " << repository_->options().root;
    if (absl::Status s = repository_->Rescan(); !s.ok()) {
      LOG(WARNING) << "rescan: " << s;
    } else {
      LOG(INFO) << "rescan done";
    }
  }
}

std::function<void(const std::vector<VersionStatus>&)> ModelStatesToMetrics(Metrics* metrics) {
  return [metrics](const std::vector<VersionStatus>& states) {
    std::vector<Metrics::ModelState> m;
    m.reserve(states.size());
    for (const VersionStatus& v : states) {
      m.push_back({v.id.model, absl::StrCat(v.id.version),
                   std::string(ServableStateName(v.state))});
    }
    metrics->SetModelStates(m);
  };
}

absl::StatusOr<std::unique_ptr<RepositoryServing>> StartRepository(
    ModelRepository::Options options, ModelServableFactory::Options factory,
    const RuntimeOptions& runtime, int64_t device_memory_budget) {
  auto r = std::make_unique<RepositoryServing>();
  r->threads.set_order(runtime.device_order);
  r->threads.set_accelerator_spin(runtime.accelerator_spin);
  ASSIGN_OR_RETURN(r->memory_budget,
                   MemoryBudget::Create({.budget_bytes = device_memory_budget}));
  factory.memory_budget = r->memory_budget.get();
  factory.device = runtime.device;
  factory.precision = runtime.precision;
  factory.make_runner = TorchRunnerMaker(runtime, &r->threads);
  ASSIGN_OR_RETURN(r->factory, ModelServableFactory::Create(std::move(factory)));
  options.factory = r->factory.get();
  ASSIGN_OR_RETURN(r->repository, ModelRepository::Create(options));
  r->lookup = std::make_unique<ManagerLookup>(r->repository->manager());
  r->rescanner = std::make_unique<Rescanner>(r->repository.get());
  for (const IndexEntry& e : r->repository->Index(/*ready_only=*/false)) {
    LOG(INFO) << "repository: " << e.model << " version " << e.version << " " << e.state
              << (e.reason.empty() ? "" : ": ") << e.reason;
  }
  return r;
}

absl::StatusOr<std::unique_ptr<Runner>> CreateHybridTorchRunner(
    const RuntimeOptions& runtime, const std::vector<std::string>& devices) {
  auto make = [&runtime](const std::string& device) {
    RuntimeOptions one = runtime;
    one.device = device;
    one.device_thread = nullptr;  // each device its own thread
    return CreateTorchRunner(one);
  };
  ASSIGN_OR_RETURN(std::unique_ptr<HybridRunner> hybrid,
                   HybridRunner::Create(devices, make, runtime.warmup_batch_sizes,
                                        runtime.verify_tolerance, nullptr));
  const ModelInfo& info = hybrid->info();
  LOG(INFO) << "hybrid: " << info.name << " on " << info.device
            << ", outputs agree at the warm-up sizes; each batch to the device expected to "
               "finish it first";
  return std::unique_ptr<Runner>(std::move(hybrid));
}

}  // namespace metalserve
