// The series of one model version in the [model] families of metrics.h:
// requests_total and request_duration_seconds for the three inference
// methods, and every batching family (metrics_families.h's BatchFamilies),
// all labelled {model,version}. Internal to the metrics target.
//
// ModelSeriesSet counts the holders of each (model, version): the first
// Acquire creates its series (at zero), the last Release removes them, so a
// version loaded again while its old copy still drains shares the series
// instead of having them removed under it.
//
// Thread-safety: ModelSeriesSet is thread-safe. A ModelSeries is immutable
// once acquired except its per-device series (devices, forwards), added
// under its devices_mu; its children are prometheus-cpp's thread-safe
// metrics and stay valid until the matching Release. Lock order:
// ModelSeriesSet::mu_, then ModelSeries::devices_mu, then prometheus-cpp's
// family mutex. Ownership: the families (and so
// the children) live in the registry, which must outlive the set.
// Destruction: the set removes nothing; every Acquire must have been
// released before (the Metrics outlives every ModelMetrics).
#ifndef METALSERVE_SERVER_METRICS_MODEL_SERIES_H_
#define METALSERVE_SERVER_METRICS_MODEL_SERIES_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/metrics/metrics_families.h"

namespace metalserve {
namespace metrics_internal {

// The methods whose requests are counted per model version.
inline constexpr std::array<const char*, 3> kInferenceMethods = {"Predict", "ModelInfer",
                                                                 "http_ModelInfer"};
// The batcher's close reasons (batch_queue.h's CloseReasonName), then the
// one any other reason is counted under.
inline constexpr std::array<const char*, 7> kBatchReasons = {
    "full", "delay_expired", "no_delay", "draining", "no_gain", "priority_cap",
    kOverflowLabelValue};
// The compute stages (runner.h's ComputeStages), in ModelMetrics::BatchStages'
// argument order.
inline constexpr std::array<const char*, 4> kComputeStages = {"assemble", "wait", "device",
                                                              "outputs"};

struct ModelSeries {
  std::array<MethodSeries, kInferenceMethods.size()> methods{};
  prometheus::Histogram* queue_duration = nullptr;
  prometheus::Histogram* compute_duration = nullptr;
  prometheus::Histogram* rows = nullptr;
  prometheus::Counter* padding_rows = nullptr;
  prometheus::Counter* cut_batches = nullptr;
  prometheus::Counter* cut_rows = nullptr;
  prometheus::Counter* inline_batches = nullptr;
  std::array<prometheus::Counter*, kComputeStages.size()> stage_seconds{};
  prometheus::Counter* stage_batches = nullptr;
  prometheus::Counter* staging_reused = nullptr;
  std::array<prometheus::Counter*, kBatchReasons.size()> reasons{};
  prometheus::Gauge* queue_depth = nullptr;
  prometheus::Gauge* queue_capacity = nullptr;  // null: no capacity given

  // The series of `method`; null when it is not an inference method.
  const MethodSeries* Method(absl::string_view method) const;
  // The counter of `reason`, or "other"'s.
  prometheus::Counter* Reason(absl::string_view reason) const;

  // The device_* counters of one device, created by its first batch.
  struct DeviceSeries {
    prometheus::Counter* batches = nullptr;
    prometheus::Counter* rows = nullptr;
    prometheus::Counter* busy = nullptr;
  };
  // `device`'s series, created (at zero) in `families` on first use; they
  // stay until the set removes this version's series. Thread-safe.
  const DeviceSeries& Device(absl::string_view device, BatchFamilies* families) const;

  // Sets `device`'s forward time at `batch_size` (device_forward_seconds),
  // creating the gauge on first use; it stays until the set removes this
  // version's series. Thread-safe.
  void SetDeviceForward(absl::string_view device, int64_t batch_size, double seconds,
                        BatchFamilies* families) const;

  std::string model;
  std::string version;
  mutable absl::Mutex devices_mu;
  // node_hash_map: references handed out stay valid across inserts.
  mutable absl::node_hash_map<std::string, DeviceSeries> devices ABSL_GUARDED_BY(devices_mu);
  // By (device, batch size).
  mutable absl::flat_hash_map<std::pair<std::string, int64_t>, prometheus::Gauge*> forwards
      ABSL_GUARDED_BY(devices_mu);
};

class ModelSeriesSet {
 public:
  // `requests` and `batches` must outlive the set.
  ModelSeriesSet(RequestFamilies* requests, BatchFamilies* batches)
      : requests_(requests), batches_(batches) {}

  BatchFamilies* batches() const { return batches_; }

  // The series of (model, version), created at zero by the first holder.
  // `queue_capacity_rows` > 0 sets queue_capacity_rows (the latest holder's
  // figure wins). Valid until the matching Release.
  const ModelSeries* Acquire(absl::string_view model, absl::string_view version,
                             int64_t queue_capacity_rows);
  // Drops one holder; the last removes the series from their families.
  void Release(absl::string_view model, absl::string_view version);

 private:
  struct Entry {
    int holders = 0;
    std::unique_ptr<ModelSeries> series;
  };
  using Key = std::pair<std::string, std::string>;

  std::unique_ptr<ModelSeries> Create(const Key& key) const;
  void Remove(const ModelSeries& series) const;

  RequestFamilies* const requests_;
  BatchFamilies* const batches_;
  absl::Mutex mu_;
  absl::flat_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metrics_internal
}  // namespace metalserve

#endif  // METALSERVE_SERVER_METRICS_MODEL_SERIES_H_
