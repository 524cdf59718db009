// The metric families behind Metrics (metrics.h), built in small groups, one
// per edge of the server that records into them: requests (the handlers),
// priority levels (the same handlers), batching (batcher and executor), runtime (device memory, cache clears,
// model load), server state (build info, readiness, access log) and the
// rolling monitor (gauges computed when scraped). Internal to the metrics
// target: only metrics.cc includes this header.
//
// Ownership: every family and child lives in the prometheus::Registry handed
// to a group's constructor; a group holds references into it, so the
// registry must outlive the group. Thread-safety: the groups are immutable
// after construction except BoundedChildren, whose Get() is thread-safe, and
// PriorityFamilies, whose Record() is;
// prometheus-cpp's counters, gauges and histograms are thread-safe.
// Destruction: nothing to stop; the registry frees the families.
#ifndef METALSERVE_SERVER_METRICS_METRICS_FAMILIES_H_
#define METALSERVE_SERVER_METRICS_METRICS_FAMILIES_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/metrics/monitor.h"

namespace metalserve {
namespace metrics_internal {

inline constexpr int kNumCodes = 17;  // absl::StatusCode / grpc::StatusCode 0..16
inline constexpr size_t kMaxLearnedLabelValues = 16;
inline constexpr char kOverflowLabelValue[] = "other";

// 1-2.5-5 per decade from 100 us to 10 s.
prometheus::Histogram::BucketBoundaries LatencyBuckets();
// Powers of two, 1..1024 rows: allowed batch sizes are usually among them.
prometheus::Histogram::BucketBoundaries RowBuckets();
// `code`'s index in a MethodSeries; kUnknown's for a code outside 0..16.
int CodeIndex(absl::StatusCode code);

// The children of one family for one label: values known up front are
// created at construction and found by a short linear scan with no lock;
// others are learned under a mutex, at most kMaxLearnedLabelValues of them,
// and the rest share the "other" child. `T` is a small value type of
// pointers into the family (owned by the registry).
//
// Thread-safety: Get() is thread-safe. The factory runs under mu_ and must
// not call back into this object.
template <typename T>
class BoundedChildren {
 public:
  using Factory = std::function<T(const std::string& value)>;

  BoundedChildren(const std::vector<std::string>& known, Factory factory)
      : factory_(std::move(factory)) {
    for (const std::string& value : known) {
      known_.emplace_back(value, factory_(value));
    }
  }

  const T& Get(absl::string_view value) {
    for (const auto& [name, child] : known_) {
      if (name == value) return child;
    }
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = learned_.find(value);
      if (it != learned_.end()) return it->second;
    }
    absl::MutexLock lock(&mu_);
    auto it = learned_.find(value);
    if (it != learned_.end()) return it->second;
    std::string key(value);
    if (learned_.size() >= kMaxLearnedLabelValues) key = kOverflowLabelValue;
    it = learned_.find(key);
    if (it == learned_.end()) {
      it = learned_.emplace(key, factory_(key)).first;
    }
    return it->second;
  }

 private:
  const Factory factory_;
  std::vector<std::pair<std::string, T>> known_;  // immutable after the ctor
  absl::Mutex mu_;
  // node_hash_map: references handed out stay valid across inserts.
  absl::node_hash_map<std::string, T> learned_ ABSL_GUARDED_BY(mu_);
};

struct MethodSeries {
  std::array<prometheus::Counter*, kNumCodes> requests{};
  prometheus::Histogram* duration = nullptr;
};

struct TriggerSeries {
  prometheus::Counter* clears = nullptr;
  prometheus::Histogram* duration = nullptr;
};

// The request edge: requests_total{method,code},
// request_duration_seconds{method}, inflight_requests.
struct RequestFamilies {
  explicit RequestFamilies(prometheus::Registry& registry);

  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Family<prometheus::Histogram>& duration;
  prometheus::Gauge& inflight;
  BoundedChildren<MethodSeries> methods;  // after the two families it fills
};

// The priority edge: priority_requests_total{priority,code},
// priority_request_duration_seconds{priority}. Record() is thread-safe.
class PriorityFamilies {
 public:
  explicit PriorityFamilies(prometheus::Registry& registry);

  // One admitted request of priority `level` finished with `code`.
  void Record(int level, absl::StatusCode code, double seconds);

 private:
  prometheus::Counter& RequestsChild(int level, absl::StatusCode code);
  prometheus::Histogram& DurationChild(int level);

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& duration_;
  // The children of the first kCachedLevels levels, found once each:
  // Family::Add builds its label map and the histogram's bucket list on every
  // call (8 allocations and the family's lock per request). A racing first
  // use stores the same child twice: Family::Add returns the one it has.
  // Other levels (and codes outside 0..16) go through Family::Add each time.
  static constexpr int kCachedLevels = 16;
  struct LevelSeries {
    std::array<std::atomic<prometheus::Counter*>, kNumCodes> requests{};
    std::atomic<prometheus::Histogram*> duration{nullptr};
  };
  std::array<LevelSeries, kCachedLevels> levels_;
};

// The batching edge, per model version (model_series.h adds the children):
// queue_duration_seconds, compute_duration_seconds, batch_size_rows,
// batch_padding_rows_total, batches_cut_total, batch_cut_rows_total,
// batches_inline_total, compute_stage_seconds_total{stage},
// compute_stage_batches_total, compute_staging_reused_total,
// batches_total{reason}, queue_depth_rows,
// queue_capacity_rows and the device_* counters, every one labelled
// {model,version}.
struct BatchFamilies {
  explicit BatchFamilies(prometheus::Registry& registry);

  prometheus::Family<prometheus::Histogram>& queue_duration;
  prometheus::Family<prometheus::Histogram>& compute_duration;
  prometheus::Family<prometheus::Histogram>& rows;
  prometheus::Family<prometheus::Counter>& padding_rows;
  prometheus::Family<prometheus::Counter>& cut_batches;
  prometheus::Family<prometheus::Counter>& cut_rows;
  prometheus::Family<prometheus::Counter>& inline_batches;
  prometheus::Family<prometheus::Counter>& stage_seconds;  // also {stage}
  prometheus::Family<prometheus::Counter>& stage_batches;
  prometheus::Family<prometheus::Counter>& staging_reused;
  prometheus::Family<prometheus::Counter>& batches;
  prometheus::Family<prometheus::Gauge>& queue_depth;
  prometheus::Family<prometheus::Gauge>& queue_capacity;
  // Per device as well: {model,version,device}.
  prometheus::Family<prometheus::Counter>& device_batches;
  prometheus::Family<prometheus::Counter>& device_rows;
  prometheus::Family<prometheus::Counter>& device_busy;
  // The version's device table: {model,version,device,batch_size}.
  prometheus::Family<prometheus::Gauge>& device_forward;
};

// The runtime edge: device_memory_bytes{device,kind},
// process_resident_memory_bytes, cache_clears_total{trigger},
// cache_clear_duration_seconds{trigger}, model_load_duration_seconds,
// model_warmup_duration_seconds.
struct RuntimeFamilies {
  explicit RuntimeFamilies(prometheus::Registry& registry);

  prometheus::Family<prometheus::Gauge>& device_memory;
  prometheus::Family<prometheus::Gauge>& resident;
  prometheus::Family<prometheus::Counter>& cache_clears;
  prometheus::Family<prometheus::Histogram>& cache_clear_duration;
  BoundedChildren<TriggerSeries> triggers;  // after the two families it fills
  prometheus::Gauge& model_load;
  prometheus::Gauge& model_warmup;
  prometheus::Family<prometheus::Gauge>& load_phase;
  BoundedChildren<prometheus::Gauge*> load_phases;  // after the family it fills
};

// The server's own state: build_info{...}, ready,
// access_log_dropped_lines_total, unread_responses_cut_total,
// unread_response_bytes_cut_total, shared_memory_regions,
// shared_memory_region_bytes, shared_memory_truncations_total.
struct ServerFamilies {
  explicit ServerFamilies(prometheus::Registry& registry);

  prometheus::Family<prometheus::Gauge>& build_info;
  prometheus::Gauge& ready;
  prometheus::Counter& access_log_dropped;
  prometheus::Counter& unread_cut;
  prometheus::Counter& unread_cut_bytes;
  prometheus::Gauge& shm_regions;
  prometheus::Gauge& shm_bytes;
  prometheus::Counter& shm_truncations;
};

// Exposes the rolling monitor as gauges computed at collection time, so the
// hot path never sorts the window. `monitor` must outlive this object.
class MonitorCollectable final : public prometheus::Collectable {
 public:
  explicit MonitorCollectable(const RollingMonitor* monitor)
      : monitor_(monitor) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const RollingMonitor* const monitor_;
};

}  // namespace metrics_internal
}  // namespace metalserve

#endif  // METALSERVE_SERVER_METRICS_METRICS_FAMILIES_H_
