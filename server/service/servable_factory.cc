#include "server/service/servable_factory.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/repository/repository_scan.h"
#include "server/service/model_servable.h"

namespace metalserve {

absl::StatusOr<BatcherOptions> BatchingFor(const BatcherOptions& flags,
                                           const ModelSettings& settings,
                                           const std::string& config_path) {
  BatcherOptions b = flags;
  if (settings.max_batch_size.has_value()) {
    b.max_batch_size = *settings.max_batch_size;
    if (settings.allowed_batch_sizes.empty() && !b.allowed_batch_sizes.empty()) {
      std::vector<int64_t> kept;
      for (int64_t s : b.allowed_batch_sizes) {
        if (s < b.max_batch_size) kept.push_back(s);
      }
      kept.push_back(b.max_batch_size);
      b.allowed_batch_sizes = std::move(kept);
    }
  }
  if (!settings.allowed_batch_sizes.empty()) b.allowed_batch_sizes = settings.allowed_batch_sizes;
  if (settings.max_queue_delay.has_value()) b.max_queue_delay = *settings.max_queue_delay;
  if (settings.max_queue_size.has_value()) b.max_queue_size = *settings.max_queue_size;
  if (settings.latency_target.has_value()) b.latency_target = *settings.latency_target;
  if (settings.default_priority.has_value()) b.default_priority = *settings.default_priority;
  if (settings.rows_per_slot.has_value()) b.rows_per_slot = *settings.rows_per_slot;
  if (absl::Status s = b.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        config_path, ": its settings do not fit the server's flags: ", s.message()));
  }
  return b;
}

absl::StatusOr<std::unique_ptr<ModelServableFactory>> ModelServableFactory::Create(
    Options options) {
  if (!options.make_runner) {
    return absl::InvalidArgumentError("ModelServableFactory: make_runner is required");
  }
  RETURN_IF_ERROR(options.batching.Validate());
  return std::unique_ptr<ModelServableFactory>(new ModelServableFactory(std::move(options)));
}

absl::StatusOr<std::unique_ptr<Servable>> ModelServableFactory::Load(const LoadSpec& spec) {
  absl::StatusOr<std::unique_ptr<Servable>> s = LoadVersion(spec);
  if (options_.metrics != nullptr) options_.metrics->ModelLoadFinished(spec.id.model, s.ok());
  return s;
}

absl::StatusOr<std::unique_ptr<Servable>> ModelServableFactory::LoadVersion(
    const LoadSpec& spec) {
  if (spec.config == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(spec.id.ToString(), ": no config"));
  }
  const RepositoryModelConfig& config = *spec.config;
  // DIR/<model>/<version>/model.pt -> DIR/<model>/config.json
  const std::string config_path =
      (std::filesystem::path(spec.model_path).parent_path().parent_path() / kModelConfigFile)
          .string();
  ASSIGN_OR_RETURN(BatcherOptions batching,
                   BatchingFor(options_.batching, config.settings, config_path));
  RunnerSpec r{.id = spec.id, .model_path = spec.model_path, .config_path = config_path};
  r.signature = config.signature;
  r.signature.name = spec.id.model;
  r.signature.version = absl::StrCat(spec.id.version);
  r.settings = config.settings;
  r.warmup_batch_sizes = batching.allowed_batch_sizes;
  if (r.warmup_batch_sizes.empty()) {
    r.warmup_batch_sizes = {1};
    if (batching.max_batch_size > 1) r.warmup_batch_sizes.push_back(batching.max_batch_size);
  }
  if (options_.memory_budget == nullptr) {
    ASSIGN_OR_RETURN(std::unique_ptr<ModelServable> servable,
                     LoadServable(r, std::move(batching)));
    return std::unique_ptr<Servable>(std::move(servable));
  }
  return LoadWithinBudget(r, std::move(batching));
}

absl::StatusOr<std::unique_ptr<ModelServable>> ModelServableFactory::LoadServable(
    const RunnerSpec& r, BatcherOptions batching) {
  ASSIGN_OR_RETURN(std::unique_ptr<Runner> runner, options_.make_runner(r));
  const ModelInfo& info = runner->info();
  LOG(INFO) << "loaded " << r.id.ToString() << " on " << info.device << " ("
            << info.precision << ", optimize=" << info.optimization << ") in "
            << absl::FormatDuration(info.load_time) << ", warmed up in "
            << absl::FormatDuration(info.warmup_time) << "; max_batch_size="
            << batching.max_batch_size;
  ModelServable::Options mo{.batching = std::move(batching),
                            .device_concurrency = options_.device_concurrency,
                            .cuda_slots = options_.cuda_slots,
                            .accelerator_inline_max_cost = options_.accelerator_inline_max_cost,
                            .metrics = options_.metrics, .clock = options_.clock};
  return ModelServable::Create(std::shared_ptr<Runner>(std::move(runner)), mo);
}

absl::StatusOr<std::unique_ptr<Servable>> ModelServableFactory::LoadWithinBudget(
    const RunnerSpec& r, BatcherOptions batching) {
  MemoryBudget* budget = options_.memory_budget;
  // A hybrid model is counted under its first device (the accelerator,
  // listed first).
  const std::string device = !r.settings.devices.empty()
                                 ? r.settings.devices.front()
                                 : r.settings.device.value_or(options_.device);
  const std::string precision = r.settings.precision.value_or(options_.precision);
  std::error_code error;
  const auto file_size = std::filesystem::file_size(r.model_path, error);
  const int64_t file_bytes = error ? 0 : static_cast<int64_t>(file_size);
  const int64_t from_file = EstimateLoadBytes(file_bytes, precision, r.signature.inputs,
                                              r.signature.outputs, batching.max_batch_size);
  // What this model's last load counted, when that is more: it includes the
  // activations the file-size estimate cannot see.
  const int64_t estimate = std::max(from_file, budget->LastFigure(r.id.model, device));
  ASSIGN_OR_RETURN(const uint64_t ticket, budget->Reserve(r.id, device, estimate));
  const int64_t rss_before = ResidentBytes();
  absl::StatusOr<std::unique_ptr<ModelServable>> servable = LoadServable(r, std::move(batching));
  if (!servable.ok()) {
    budget->Release(ticket);
    return servable.status();
  }
  const int64_t rss_after = ResidentBytes();
  int64_t figure = estimate;
  std::string measured = "not measured on this device";
  const int64_t reserved_grew = (*servable)->info().load_reserved_bytes;
  if ((*servable)->info().device == "cpu" && rss_before >= 0 && rss_after >= 0) {
    figure = std::max(from_file, rss_after - rss_before);
    measured = absl::StrCat("resident set grew ", FormatMiB(rss_after - rss_before));
  } else if (reserved_grew >= 0) {
    // The accelerator's reserved memory over the load and warm-up (the
    // runner measured it around its own phases).
    figure = std::max(from_file, reserved_grew);
    measured = absl::StrCat("device reserved memory grew ", FormatMiB(reserved_grew));
  }
  budget->Correct(ticket, figure);
  LOG(INFO) << "memory of " << r.id.ToString() << " on " << device << ": estimated "
            << FormatMiB(estimate) << ", " << measured << "; counted " << FormatMiB(figure)
            << "; device " << device << " holds " << FormatMiB(budget->Used(device))
            << " of its " << FormatMiB(budget->budget_bytes()) << " budget";
  (*servable)->RunWhenFreed([budget, ticket] { budget->Release(ticket); });
  return std::unique_ptr<Servable>(*std::move(servable));
}

}  // namespace metalserve
