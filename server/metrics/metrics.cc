#include "server/metrics/metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/common/status_macros.h"
#include "server/metrics/http_listener.h"
#include "server/metrics/monitor.h"

namespace metalserve {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

constexpr int kNumCodes = 17;  // absl::StatusCode / grpc::StatusCode 0..16
constexpr int kMaxLearnedLabelValues = 16;
constexpr char kOverflowLabelValue[] = "other";

// 1-2.5-5 per decade from 100 us to 10 s.
Histogram::BucketBoundaries LatencyBuckets() {
  Histogram::BucketBoundaries b;
  for (double decade = 1e-4; decade < 10; decade *= 10) {
    b.push_back(decade);
    b.push_back(decade * 2.5);
    b.push_back(decade * 5);
  }
  b.push_back(10);
  return b;
}

// Powers of two, 1..1024 rows: allowed batch sizes are usually among them.
Histogram::BucketBoundaries RowBuckets() {
  Histogram::BucketBoundaries b;
  for (double rows = 1; rows <= 1024; rows *= 2) b.push_back(rows);
  return b;
}

int CodeIndex(absl::StatusCode code) {
  const int i = static_cast<int>(code);
  return (i >= 0 && i < kNumCodes) ? i
                                   : static_cast<int>(absl::StatusCode::kUnknown);
}

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
  std::array<Counter*, kNumCodes> requests{};
  Histogram* duration = nullptr;
};

struct TriggerSeries {
  Counter* clears = nullptr;
  Histogram* duration = nullptr;
};

// Exposes the rolling monitor as gauges computed at collection time, so the
// hot path never sorts the window.
class MonitorCollectable final : public prometheus::Collectable {
 public:
  explicit MonitorCollectable(const RollingMonitor* monitor)
      : monitor_(monitor) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const MonitorSnapshot s = monitor_->Snapshot();
    std::vector<prometheus::MetricFamily> families;
    families.push_back(Single("metalserve_monitor_latency_p50_seconds",
                              "Median request latency over the rolling "
                              "monitor window.",
                              s.p50_seconds));
    families.push_back(Single("metalserve_monitor_latency_p95_seconds",
                              "95th percentile request latency over the "
                              "rolling monitor window.",
                              s.p95_seconds));
    families.push_back(Single("metalserve_monitor_latency_mean_seconds",
                              "Mean request latency over the rolling monitor "
                              "window.",
                              s.mean_seconds));
    families.push_back(Single("metalserve_monitor_error_ratio",
                              "Share of requests in the rolling monitor window "
                              "that failed on the server's side (codes other "
                              "than OK and the caller's errors).",
                              s.error_ratio));
    families.push_back(Single("metalserve_monitor_caller_error_ratio",
                              "Share of requests in the rolling monitor window "
                              "refused for the caller's error (INVALID_ARGUMENT, "
                              "NOT_FOUND, CANCELLED, FAILED_PRECONDITION, "
                              "OUT_OF_RANGE).",
                              s.caller_error_ratio));
    families.push_back(Single("metalserve_monitor_window_requests",
                              "Requests currently in the rolling monitor "
                              "window.",
                              static_cast<double>(s.count)));
    return families;
  }

 private:
  static prometheus::MetricFamily Single(const char* name, const char* help,
                                         double value) {
    prometheus::ClientMetric metric;
    metric.gauge.value = value;
    return {name, help, prometheus::MetricType::Gauge, {metric}};
  }

  const RollingMonitor* const monitor_;
};

absl::Status ValidateOptions(const MetricsOptions& options) {
  if (options.monitor_window < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "monitor_window must be at least 1 request, got ",
        options.monitor_window));
  }
  if (options.monitor_max_age <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("monitor_max_age must be positive, got ",
                     absl::FormatDuration(options.monitor_max_age)));
  }
  if (options.monitor_log_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("monitor_log_interval must not be negative, got ",
                     absl::FormatDuration(options.monitor_log_interval)));
  }
  if (options.queue_capacity_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue_capacity_rows must not be negative, got ",
                     options.queue_capacity_rows));
  }
  if (options.listen_address.empty()) return absl::OkStatus();
  const size_t colon = options.listen_address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(
          absl::string_view(options.listen_address).substr(colon + 1),
          &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics listen address must be host:port, got \"",
                     options.listen_address, "\""));
  }
  return absl::OkStatus();
}

// The one implementation of Metrics. Owns the registry, the optional HTTP
// listener (which serves from its own thread) and the monitor log thread;
// the destructor stops the listener first, then joins the thread.
class MetricsImpl final : public Metrics {
 public:
  explicit MetricsImpl(const MetricsOptions& options);
  ~MetricsImpl() override;

  // Starts the HTTP listener; Unavailable naming the address when it cannot.
  absl::Status Listen(const MetricsOptions& options);
  void StartLogThread();

  int port() const override;
  std::string Scrape() const override;

  void RequestStarted(absl::string_view method) override;
  void RequestFinished(absl::string_view method, absl::StatusCode code,
                       absl::Duration latency) override;
  void QueueWait(absl::Duration wait) override;
  void AccessLogLinesDropped(int64_t lines) override {
    access_log_dropped_.Increment(static_cast<double>(lines));
  }
  void BatchCompleted(int64_t rows, int64_t padding_rows,
                      absl::string_view reason,
                      absl::Duration compute) override;
  void SetQueueDepth(int64_t rows) override;
  void SetMemory(const MemoryFigures& memory) override;
  void CacheCleared(absl::string_view trigger,
                    absl::Duration duration) override;
  void SetModelTimes(absl::Duration load, absl::Duration warmup) override;
  void SetBuildInfo(absl::string_view version, absl::string_view torch_version,
                    absl::string_view device,
                    absl::string_view model) override;
  void SetReady(bool ready) override;
  MonitorSnapshot Monitor() const override { return monitor_.Snapshot(); }

 private:
  // Sets the child of `family` labelled {kind=`kind`} to `value`, or removes
  // it when `value` < 0.
  void SetOptionalGauge(Family<Gauge>& family, Gauge*& child,
                        const prometheus::Labels& labels, int64_t value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slow_mu_);
  // Blocks until the clock reaches `t` or the destructor asks to stop;
  // returns false on stop.
  bool WaitForLogTime(absl::Time t);
  void LogLoop();

  const MetricsOptions options_;
  Clock* const clock_;
  const std::shared_ptr<prometheus::Registry> registry_;
  RollingMonitor monitor_;
  const std::shared_ptr<MonitorCollectable> monitor_collectable_;

  Family<Counter>& requests_family_;
  Family<Histogram>& request_duration_family_;
  Family<Counter>& batches_family_;
  Family<Counter>& cache_clears_family_;
  Family<Histogram>& cache_clear_duration_family_;
  Family<Gauge>& device_memory_family_;
  Family<Gauge>& resident_family_;
  Family<Gauge>& build_info_family_;

  BoundedChildren<MethodSeries> methods_;
  BoundedChildren<Counter*> batch_reasons_;
  BoundedChildren<TriggerSeries> cache_triggers_;

  Histogram& queue_duration_;
  Histogram& compute_duration_;
  Histogram& batch_rows_;
  Counter& padding_rows_;
  Counter& access_log_dropped_;
  Gauge& queue_depth_;
  Gauge& inflight_;
  Gauge& model_load_;
  Gauge& model_warmup_;
  Gauge& ready_;

  // Guards the series that come and go: memory figures and build info.
  absl::Mutex slow_mu_;
  Gauge* allocated_ ABSL_GUARDED_BY(slow_mu_) = nullptr;
  Gauge* reserved_ ABSL_GUARDED_BY(slow_mu_) = nullptr;
  Gauge* limit_ ABSL_GUARDED_BY(slow_mu_) = nullptr;
  Gauge* resident_ ABSL_GUARDED_BY(slow_mu_) = nullptr;
  Gauge* build_info_ ABSL_GUARDED_BY(slow_mu_) = nullptr;

  absl::Mutex log_mu_;
  bool stop_ ABSL_GUARDED_BY(log_mu_) = false;
  std::thread log_thread_;

  // Last: destroyed first, so no scrape runs against a half-destroyed object.
  std::unique_ptr<HttpListener> listener_;
};

MetricsImpl::MetricsImpl(const MetricsOptions& options)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::RealClock()),
      registry_(std::make_shared<prometheus::Registry>()),
      monitor_(options.monitor_window, options.monitor_max_age, clock_),
      monitor_collectable_(std::make_shared<MonitorCollectable>(&monitor_)),
      requests_family_(prometheus::BuildCounter()
                           .Name("metalserve_requests_total")
                           .Help("RPCs finished, by method and gRPC code.")
                           .Register(*registry_)),
      request_duration_family_(
          prometheus::BuildHistogram()
              .Name("metalserve_request_duration_seconds")
              .Help("RPC latency from arrival to finish, by method.")
              .Register(*registry_)),
      batches_family_(prometheus::BuildCounter()
                          .Name("metalserve_batches_total")
                          .Help("Batches run, by the reason the batch closed.")
                          .Register(*registry_)),
      cache_clears_family_(prometheus::BuildCounter()
                               .Name("metalserve_cache_clears_total")
                               .Help("Device cache clears, by trigger.")
                               .Register(*registry_)),
      cache_clear_duration_family_(
          prometheus::BuildHistogram()
              .Name("metalserve_cache_clear_duration_seconds")
              .Help("Time one device cache clear took, by trigger.")
              .Register(*registry_)),
      device_memory_family_(
          prometheus::BuildGauge()
              .Name("metalserve_device_memory_bytes")
              .Help("Device memory as the runtime reports it: allocated by "
                    "tensors, reserved by the allocator or driver, and the "
                    "limit (high watermark).")
              .Register(*registry_)),
      resident_family_(prometheus::BuildGauge()
                           .Name("metalserve_process_resident_memory_bytes")
                           .Help("Resident set size of the server process.")
                           .Register(*registry_)),
      build_info_family_(prometheus::BuildGauge()
                             .Name("metalserve_build_info")
                             .Help("Always 1; labels name the server version, "
                                   "torch version, device and model.")
                             .Register(*registry_)),
      methods_({"Predict", "GetModelMetadata"},
               [this](const std::string& method) {
                 MethodSeries s;
                 for (int i = 0; i < kNumCodes; ++i) {
                   s.requests[i] = &requests_family_.Add(
                       {{"method", method},
                        {"code", absl::StatusCodeToString(
                                     static_cast<absl::StatusCode>(i))}});
                 }
                 s.duration = &request_duration_family_.Add(
                     {{"method", method}}, LatencyBuckets());
                 return s;
               }),
      batch_reasons_({"full", "delay_expired"},
                     [this](const std::string& reason) {
                       return &batches_family_.Add({{"reason", reason}});
                     }),
      cache_triggers_({"every_n", "interval", "watermark", "oom"},
                      [this](const std::string& trigger) {
                        return TriggerSeries{
                            &cache_clears_family_.Add({{"trigger", trigger}}),
                            &cache_clear_duration_family_.Add(
                                {{"trigger", trigger}}, LatencyBuckets())};
                      }),
      queue_duration_(
          prometheus::BuildHistogram()
              .Name("metalserve_queue_duration_seconds")
              .Help("Time a request waited in the batcher queue.")
              .Register(*registry_)
              .Add({}, LatencyBuckets())),
      compute_duration_(
          prometheus::BuildHistogram()
              .Name("metalserve_compute_duration_seconds")
              .Help("Time of one batch's forward pass, copies included.")
              .Register(*registry_)
              .Add({}, LatencyBuckets())),
      batch_rows_(prometheus::BuildHistogram()
                      .Name("metalserve_batch_size_rows")
                      .Help("Request rows per batch, padding excluded.")
                      .Register(*registry_)
                      .Add({}, RowBuckets())),
      padding_rows_(prometheus::BuildCounter()
                        .Name("metalserve_batch_padding_rows_total")
                        .Help("Rows added to batches to reach an allowed "
                              "batch size.")
                        .Register(*registry_)
                        .Add({})),
      access_log_dropped_(prometheus::BuildCounter()
                              .Name("metalserve_access_log_dropped_lines_total")
                              .Help("Access log lines dropped because the "
                                    "writer's queue was full.")
                              .Register(*registry_)
                              .Add({})),
      queue_depth_(prometheus::BuildGauge()
                       .Name("metalserve_queue_depth_rows")
                       .Help("Rows waiting in the batcher queue.")
                       .Register(*registry_)
                       .Add({})),
      inflight_(prometheus::BuildGauge()
                    .Name("metalserve_inflight_requests")
                    .Help("RPCs started and not yet finished.")
                    .Register(*registry_)
                    .Add({})),
      model_load_(prometheus::BuildGauge()
                      .Name("metalserve_model_load_duration_seconds")
                      .Help("Time the model took to load.")
                      .Register(*registry_)
                      .Add({})),
      model_warmup_(prometheus::BuildGauge()
                        .Name("metalserve_model_warmup_duration_seconds")
                        .Help("Time the model warm-up took.")
                        .Register(*registry_)
                        .Add({})),
      ready_(prometheus::BuildGauge()
                 .Name("metalserve_ready")
                 .Help("1 when the server accepts Predict calls, else 0.")
                 .Register(*registry_)
                 .Add({})) {
  if (options.queue_capacity_rows > 0) {
    prometheus::BuildGauge()
        .Name("metalserve_queue_capacity_rows")
        .Help("Rows the batcher queue holds before refusing requests.")
        .Register(*registry_)
        .Add({})
        .Set(static_cast<double>(options.queue_capacity_rows));
  }
}

MetricsImpl::~MetricsImpl() {
  listener_.reset();
  {
    absl::MutexLock lock(&log_mu_);
    stop_ = true;
  }
  if (log_thread_.joinable()) log_thread_.join();
}

absl::Status MetricsImpl::Listen(const MetricsOptions& options) {
  HttpListenerOptions lo;
  lo.address = options.listen_address;
  lo.idle_timeout = options.listen_idle_timeout;
  lo.max_connections = options.listen_max_connections;
  ASSIGN_OR_RETURN(listener_,
                   HttpListener::Start(lo, [this] { return Scrape(); }));
  LOG(INFO) << "metrics listening on " << options.listen_address
            << " port=" << port();
  return absl::OkStatus();
}

void MetricsImpl::StartLogThread() {
  if (options_.monitor_log_interval <= absl::ZeroDuration()) return;
  log_thread_ = std::thread([this] { LogLoop(); });
}

int MetricsImpl::port() const {
  return listener_ == nullptr ? 0 : listener_->port();
}

std::string MetricsImpl::Scrape() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (auto& family : monitor_collectable_->Collect()) {
    families.push_back(std::move(family));
  }
  return prometheus::TextSerializer().Serialize(families);
}

void MetricsImpl::RequestStarted(absl::string_view /*method*/) {
  inflight_.Increment();
}

void MetricsImpl::RequestFinished(absl::string_view method,
                                  absl::StatusCode code,
                                  absl::Duration latency) {
  const MethodSeries& series = methods_.Get(method);
  series.requests[CodeIndex(code)]->Increment();
  series.duration->Observe(absl::ToDoubleSeconds(latency));
  inflight_.Decrement();
  monitor_.Record(latency, code);
}

void MetricsImpl::QueueWait(absl::Duration wait) {
  queue_duration_.Observe(absl::ToDoubleSeconds(wait));
}

void MetricsImpl::BatchCompleted(int64_t rows, int64_t padding_rows,
                                 absl::string_view reason,
                                 absl::Duration compute) {
  batch_rows_.Observe(static_cast<double>(rows));
  if (padding_rows > 0) padding_rows_.Increment(static_cast<double>(padding_rows));
  batch_reasons_.Get(reason)->Increment();
  compute_duration_.Observe(absl::ToDoubleSeconds(compute));
}

void MetricsImpl::SetQueueDepth(int64_t rows) {
  queue_depth_.Set(static_cast<double>(rows));
}

void MetricsImpl::SetOptionalGauge(Family<Gauge>& family, Gauge*& child,
                                   const prometheus::Labels& labels,
                                   int64_t value) {
  if (value < 0) {
    if (child != nullptr) family.Remove(child);
    child = nullptr;
    return;
  }
  if (child == nullptr) child = &family.Add(labels);
  child->Set(static_cast<double>(value));
}

void MetricsImpl::SetMemory(const MemoryFigures& memory) {
  absl::MutexLock lock(&slow_mu_);
  SetOptionalGauge(device_memory_family_, allocated_, {{"kind", "allocated"}},
                   memory.allocated_bytes);
  SetOptionalGauge(device_memory_family_, reserved_, {{"kind", "reserved"}},
                   memory.reserved_bytes);
  SetOptionalGauge(device_memory_family_, limit_, {{"kind", "limit"}},
                   memory.limit_bytes);
  SetOptionalGauge(resident_family_, resident_, {}, memory.resident_bytes);
}

void MetricsImpl::CacheCleared(absl::string_view trigger,
                               absl::Duration duration) {
  const TriggerSeries& series = cache_triggers_.Get(trigger);
  series.clears->Increment();
  series.duration->Observe(absl::ToDoubleSeconds(duration));
}

void MetricsImpl::SetModelTimes(absl::Duration load, absl::Duration warmup) {
  model_load_.Set(absl::ToDoubleSeconds(load));
  model_warmup_.Set(absl::ToDoubleSeconds(warmup));
}

void MetricsImpl::SetBuildInfo(absl::string_view version,
                               absl::string_view torch_version,
                               absl::string_view device,
                               absl::string_view model) {
  absl::MutexLock lock(&slow_mu_);
  if (build_info_ != nullptr) build_info_family_.Remove(build_info_);
  build_info_ = &build_info_family_.Add({{"version", std::string(version)},
                                         {"torch_version",
                                          std::string(torch_version)},
                                         {"device", std::string(device)},
                                         {"model", std::string(model)}});
  build_info_->Set(1);
}

void MetricsImpl::SetReady(bool ready) { ready_.Set(ready ? 1 : 0); }

bool MetricsImpl::WaitForLogTime(absl::Time t) {
  absl::MutexLock lock(&log_mu_);
  while (!stop_ && clock_->TimeNow() < t) {
    clock_->AwaitWithDeadline(&log_mu_, absl::Condition(&stop_), t);
  }
  return !stop_;
}

void MetricsImpl::LogLoop() {
  const absl::Duration interval = options_.monitor_log_interval;
  absl::Time next = clock_->TimeNow() + interval;
  bool idle_logged = false;
  while (WaitForLogTime(next)) {
    const MonitorSnapshot s = monitor_.Snapshot();
    const bool log = s.count > 0 || !idle_logged;
    if (s.count > 0) {
      LOG(INFO) << "monitor window_requests=" << s.count
                << " p50_ms=" << s.p50_seconds * 1e3
                << " p95_ms=" << s.p95_seconds * 1e3
                << " mean_ms=" << s.mean_seconds * 1e3
                << " error_ratio=" << s.error_ratio
                << " caller_error_ratio=" << s.caller_error_ratio;
    } else if (!idle_logged) {
      LOG(INFO) << "monitor window_requests=0: no requests in the last "
                << absl::FormatDuration(monitor_.max_age());
    }
    idle_logged = s.count == 0;
    if (log && options_.on_monitor_log) options_.on_monitor_log(s);
    // One line per interval boundary crossed at most; a clock that jumped
    // far ahead gets one line, not a burst.
    next += interval;
    const absl::Time now = clock_->TimeNow();
    if (next <= now) next = now + interval;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(
    const MetricsOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<MetricsImpl> metrics;
  try {
    metrics = std::make_unique<MetricsImpl>(options);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("cannot create metric families: ", e.what()));
  }
  if (!options.listen_address.empty()) {
    RETURN_IF_ERROR(metrics->Listen(options));
  }
  metrics->StartLogThread();
  return metrics;
}

}  // namespace metalserve
