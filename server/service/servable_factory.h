// ModelServableFactory: the server's ServableFactory (servable.h). It loads
// one version of a repository model as a ModelServable: the model's
// settings from config.json applied over the flags' defaults (the batcher's
// here; the runtime's by the RunnerMaker main passes in), the runner made
// and warmed up at the batch sizes its batches will have, then its batcher
// and executor.
//
// Device threads: the RunnerMaker loads every model on its device's one
// DeviceThread, created at server start and shared by every model on that
// device (main's DeviceThreads), so a load, verification and warm-up run on
// the device thread between the batches of the models already serving.
//
// The service target is torch-free, so the runtime's options are filled by
// the RunnerMaker (main), from RunnerSpec.
//
// Memory admission: with Options::memory_budget, a load first reserves its
// estimate (EstimateLoadBytes: the file's size, the precision, the batch
// buffers for max_batch_size rows; or, when more, what the model's last
// load counted on that device, MemoryBudget::LastFigure) on its device and
// is refused with ResourceExhausted naming the figures when the budget would
// be passed. After the load the figure becomes what the load measured: on
// CPU the growth of the process's resident set, but never less than the
// file-size estimate (RSS growth hides pages that the allocator reused from
// an earlier free); on an accelerator the growth of the device's reserved
// memory over the load and warm-up (ModelInfo::load_reserved_bytes), again
// never less than the estimate; where neither was measured the reservation
// stays. Both are logged. The figure is given back when the servable is
// destroyed (its last handle released); the runner's destructor then empties
// the device's cache, so the memory goes back to the device as well.
//
// Metrics: every Load is counted in model_loads_total{model,outcome}.
//
// Thread-safety: Load may be called from several control threads at once
// (the manager serialises them anyway); the options are read-only.
#ifndef METALSERVE_SERVER_SERVICE_SERVABLE_FACTORY_H_
#define METALSERVE_SERVER_SERVICE_SERVABLE_FACTORY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/batcher/batch_queue.h"
#include "server/metrics/metrics.h"
#include "server/model_config/repository_config.h"
#include "server/repository/memory_budget.h"
#include "server/repository/servable.h"
#include "server/runtime/model_signature.h"
#include "server/runtime/runner.h"

namespace metalserve {

class ModelServable;

// What a RunnerMaker needs to load one version.
struct RunnerSpec {
  ServableId id;
  std::string model_path;   // DIR/<model>/<version>/model.pt
  std::string config_path;  // DIR/<model>/config.json
  // config.json's signature, named after the model folder, its version the
  // version folder's number: what responses report.
  ModelSignature signature;
  // The model's settings; unset ones keep the flags (the maker applies
  // precision, channels_last, optimize and device).
  ModelSettings settings;
  // Sizes to verify and warm up at: the batcher's allowed sizes, or 1 and
  // its max_batch_size.
  std::vector<int64_t> warmup_batch_sizes;
};
using RunnerMaker = std::function<absl::StatusOr<std::unique_ptr<Runner>>(const RunnerSpec&)>;

// The flags' batcher options with a model's settings applied. When the
// model sets max_batch_size but no allowed_batch_sizes, the flags' allowed
// sizes above it are dropped and it becomes the last. InvalidArgument naming
// `config_path` and the setting when the result is not valid.
absl::StatusOr<BatcherOptions> BatchingFor(const BatcherOptions& flags,
                                           const ModelSettings& settings,
                                           const std::string& config_path);

class ModelServableFactory final : public ServableFactory {
 public:
  struct Options {
    BatcherOptions batching;  // the flags' defaults
    int device_concurrency = 1;
    int cuda_slots = 0;  // ModelServable::Options::cuda_slots
    // ModelServable::Options::accelerator_inline_max_cost
    absl::Duration accelerator_inline_max_cost = absl::Seconds(-1);
    Metrics* metrics = nullptr;  // may be null; not owned
    Clock* clock = nullptr;      // null: the real clock; not owned
    RunnerMaker make_runner;     // required
    // Device memory admission (memory_budget.h); null: none. Not owned.
    MemoryBudget* memory_budget = nullptr;
    // The flags' device and precision, for models whose config.json sets
    // none: the budget is kept per device name as asked ("auto" included).
    std::string device = "auto";
    std::string precision = "fp32";
  };
  // InvalidArgument without make_runner or with invalid batching.
  static absl::StatusOr<std::unique_ptr<ModelServableFactory>> Create(Options options);

  absl::StatusOr<std::unique_ptr<Servable>> Load(const LoadSpec& spec) override;

 private:
  explicit ModelServableFactory(Options options) : options_(std::move(options)) {}
  // Load without the metrics.
  absl::StatusOr<std::unique_ptr<Servable>> LoadVersion(const LoadSpec& spec);
  // Load without the metrics and the memory admission.
  absl::StatusOr<std::unique_ptr<ModelServable>> LoadServable(const RunnerSpec& r,
                                                              BatcherOptions batching);
  // Reserves the version's estimate on its device (ResourceExhausted naming
  // the figures when it does not fit), loads it, corrects the figure with
  // what the load measured and gives it back when the servable is freed.
  absl::StatusOr<std::unique_ptr<Servable>> LoadWithinBudget(const RunnerSpec& r,
                                                             BatcherOptions batching);
  const Options options_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_SERVABLE_FACTORY_H_
