#include "server/metrics/metrics.h"

#include <exception>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "common/status_macros.h"
#include "server/metrics/http_listener.h"
#include "server/metrics/metrics_families.h"
#include "server/metrics/model_series.h"
#include "server/metrics/monitor.h"

namespace metalserve {
namespace {

using metrics_internal::BatchFamilies;
using metrics_internal::CodeIndex;
using metrics_internal::MethodSeries;
using metrics_internal::ModelSeries;
using metrics_internal::ModelSeriesSet;
using metrics_internal::PriorityFamilies;
using metrics_internal::MonitorCollectable;
using metrics_internal::RequestFamilies;
using metrics_internal::RuntimeFamilies;
using metrics_internal::ServerFamilies;
using metrics_internal::TriggerSeries;
using prometheus::Family;
using prometheus::Gauge;

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
  void PriorityRequestFinished(int level, absl::StatusCode code,
                               absl::Duration latency) override;
  void AccessLogLinesDropped(int64_t lines) override {
    server_.access_log_dropped.Increment(static_cast<double>(lines));
  }
  void UnreadResponsesCut(int64_t calls, int64_t bytes) override {
    server_.unread_cut.Increment(static_cast<double>(calls));
    server_.unread_cut_bytes.Increment(static_cast<double>(bytes));
  }
  void SetSharedMemoryRegions(int64_t regions, int64_t bytes) override {
    server_.shm_regions.Set(static_cast<double>(regions));
    server_.shm_bytes.Set(static_cast<double>(bytes));
  }
  void SharedMemoryTruncated() override { server_.shm_truncations.Increment(); }
  std::unique_ptr<ModelMetrics> ForModel(absl::string_view model, absl::string_view version,
                                         int64_t queue_capacity_rows) override;
  void SetMemory(const MemoryFigures& memory) override;
  void ForgetDeviceMemory(absl::string_view device) override;
  void CacheCleared(absl::string_view trigger,
                    absl::Duration duration) override;
  void SetModelTimes(absl::Duration load, absl::Duration warmup) override;
  void SetLoadPhase(absl::string_view phase, absl::Duration took) override {
    runtime_.load_phases.Get(phase)->Set(absl::ToDoubleSeconds(took));
  }
  void SetBuildInfo(absl::string_view version, absl::string_view torch_version,
                    absl::string_view device,
                    absl::string_view model) override;
  void SetReady(bool ready) override;
  void SetModelStates(const std::vector<ModelState>& states) override;
  void ModelLoadFinished(absl::string_view model, bool ok) override {
    model_loads_.Add({{"model", std::string(model)}, {"outcome", ok ? "ok" : "failed"}})
        .Increment();
  }
  void ModelUnloadFinished(absl::string_view model, bool ok) override {
    model_unloads_.Add({{"model", std::string(model)}, {"outcome", ok ? "ok" : "failed"}})
        .Increment();
  }
  MonitorSnapshot Monitor() const override { return monitor_.Snapshot(); }

  // The end of a request recorded in a model version's series: what every
  // request's end updates besides its own series.
  void RequestEnded(absl::StatusCode code, absl::Duration latency) {
    requests_.inflight.Decrement();
    monitor_.Record(latency, code);
  }
  ModelSeriesSet& model_series() { return model_series_; }

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

  // The families, one group per edge (metrics_families.h); all live in
  // registry_, declared above them.
  RequestFamilies requests_;
  BatchFamilies batches_;
  RuntimeFamilies runtime_;
  ServerFamilies server_;
  ModelSeriesSet model_series_;  // children of requests_ and batches_
  PriorityFamilies priority_;
  Family<Gauge>& model_state_;
  Family<prometheus::Counter>& model_loads_;
  Family<prometheus::Counter>& model_unloads_;

  // Guards the series that come and go: memory figures and build info.
  absl::Mutex slow_mu_;
  struct DeviceMemorySeries {
    Gauge* allocated = nullptr;
    Gauge* reserved = nullptr;
    Gauge* limit = nullptr;
  };
  absl::flat_hash_map<std::string, DeviceMemorySeries> device_memory_
      ABSL_GUARDED_BY(slow_mu_);
  Gauge* resident_ ABSL_GUARDED_BY(slow_mu_) = nullptr;
  Gauge* build_info_ ABSL_GUARDED_BY(slow_mu_) = nullptr;
  std::vector<Gauge*> model_states_ ABSL_GUARDED_BY(slow_mu_);

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
      requests_(*registry_),
      batches_(*registry_),
      runtime_(*registry_),
      server_(*registry_),
      model_series_(&requests_, &batches_),
      priority_(*registry_),
      model_state_(prometheus::BuildGauge()
                       .Name("metalserve_model_state")
                       .Help("1 for each model version the repository knows, labelled by its "
                             "state: READY, LOADING, UNLOADING or UNAVAILABLE.")
                       .Register(*registry_)),
      model_loads_(prometheus::BuildCounter()
                       .Name("metalserve_model_loads_total")
                       .Help("Model version loads, by model and outcome (ok, failed).")
                       .Register(*registry_)),
      model_unloads_(prometheus::BuildCounter()
                         .Name("metalserve_model_unloads_total")
                         .Help("Model unloads, by model and outcome (ok; failed, model \"\": "
                               "the name was not loaded).")
                         .Register(*registry_)) {}

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
  requests_.inflight.Increment();
}

void MetricsImpl::RequestFinished(absl::string_view method,
                                  absl::StatusCode code,
                                  absl::Duration latency) {
  const MethodSeries& series = requests_.methods.Get(method);
  series.requests[CodeIndex(code)]->Increment();
  series.duration->Observe(absl::ToDoubleSeconds(latency));
  requests_.inflight.Decrement();
  monitor_.Record(latency, code);
}

void MetricsImpl::PriorityRequestFinished(int level, absl::StatusCode code,
                                          absl::Duration latency) {
  priority_.Record(level, code, absl::ToDoubleSeconds(latency));
}

// One model version's handle: records into its series and, for a request's
// end, the server-wide inflight gauge and monitor. Releases its series when
// destroyed.
class ModelMetricsImpl final : public ModelMetrics {
 public:
  ModelMetricsImpl(MetricsImpl* metrics, std::string model, std::string version,
                   int64_t queue_capacity_rows)
      : metrics_(metrics),
        model_(std::move(model)),
        version_(std::move(version)),
        series_(*metrics->model_series().Acquire(model_, version_, queue_capacity_rows)) {}
  ~ModelMetricsImpl() override { metrics_->model_series().Release(model_, version_); }

  void RequestFinished(absl::string_view method, absl::StatusCode code,
                       absl::Duration latency) override {
    const MethodSeries* m = series_.Method(method);
    if (m == nullptr) {  // not an inference method: no model labels
      metrics_->RequestFinished(method, code, latency);
      return;
    }
    m->requests[CodeIndex(code)]->Increment();
    m->duration->Observe(absl::ToDoubleSeconds(latency));
    metrics_->RequestEnded(code, latency);
  }
  void QueueWait(absl::Duration wait) override {
    series_.queue_duration->Observe(absl::ToDoubleSeconds(wait));
  }
  void BatchCompleted(int64_t rows, int64_t padding_rows, absl::string_view reason,
                      absl::Duration compute) override {
    series_.rows->Observe(static_cast<double>(rows));
    if (padding_rows > 0) series_.padding_rows->Increment(static_cast<double>(padding_rows));
    series_.Reason(reason)->Increment();
    series_.compute_duration->Observe(absl::ToDoubleSeconds(compute));
  }
  void BatchCut(int64_t rows_left) override {
    series_.cut_batches->Increment();
    series_.cut_rows->Increment(static_cast<double>(rows_left));
  }
  void BatchInline() override { series_.inline_batches->Increment(); }
  void BatchStages(absl::Duration assemble, absl::Duration wait, absl::Duration device,
                   absl::Duration outputs) override {
    const absl::Duration took[] = {assemble, wait, device, outputs};
    static_assert(std::size(took) == metrics_internal::kComputeStages.size());
    for (size_t i = 0; i < std::size(took); ++i) {
      series_.stage_seconds[i]->Increment(absl::ToDoubleSeconds(took[i]));
    }
    series_.stage_batches->Increment();
  }
  void BatchBufferReused() override { series_.staging_reused->Increment(); }
  void SetQueueDepth(int64_t rows) override {
    series_.queue_depth->Set(static_cast<double>(rows));
  }
  void SetDeviceForward(absl::string_view device, int64_t batch_size,
                        absl::Duration took) override {
    series_.SetDeviceForward(device, batch_size, absl::ToDoubleSeconds(took),
                             metrics_->model_series().batches());
  }
  void AddDevice(absl::string_view device) override {
    series_.Device(device, metrics_->model_series().batches());
  }
  void DeviceBatch(absl::string_view device, int64_t rows, absl::Duration took) override {
    const ModelSeries::DeviceSeries& d = series_.Device(device, metrics_->model_series().batches());
    d.batches->Increment();
    d.rows->Increment(static_cast<double>(rows));
    d.busy->Increment(absl::ToDoubleSeconds(took));
  }

 private:
  MetricsImpl* const metrics_;
  const std::string model_;
  const std::string version_;
  const ModelSeries& series_;
};

std::unique_ptr<ModelMetrics> MetricsImpl::ForModel(absl::string_view model,
                                                    absl::string_view version,
                                                    int64_t queue_capacity_rows) {
  return std::make_unique<ModelMetricsImpl>(this, std::string(model), std::string(version),
                                            queue_capacity_rows);
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
  DeviceMemorySeries& d = device_memory_[memory.device];
  SetOptionalGauge(runtime_.device_memory, d.allocated,
                   {{"device", memory.device}, {"kind", "allocated"}}, memory.allocated_bytes);
  SetOptionalGauge(runtime_.device_memory, d.reserved,
                   {{"device", memory.device}, {"kind", "reserved"}}, memory.reserved_bytes);
  SetOptionalGauge(runtime_.device_memory, d.limit,
                   {{"device", memory.device}, {"kind", "limit"}}, memory.limit_bytes);
  if (d.allocated == nullptr && d.reserved == nullptr && d.limit == nullptr) {
    device_memory_.erase(memory.device);
  }
  SetOptionalGauge(runtime_.resident, resident_, {}, memory.resident_bytes);
}

void MetricsImpl::ForgetDeviceMemory(absl::string_view device) {
  absl::MutexLock lock(&slow_mu_);
  auto it = device_memory_.find(device);
  if (it == device_memory_.end()) return;
  for (Gauge* g : {it->second.allocated, it->second.reserved, it->second.limit}) {
    if (g != nullptr) runtime_.device_memory.Remove(g);
  }
  device_memory_.erase(it);
}

void MetricsImpl::CacheCleared(absl::string_view trigger,
                               absl::Duration duration) {
  const TriggerSeries& series = runtime_.triggers.Get(trigger);
  series.clears->Increment();
  series.duration->Observe(absl::ToDoubleSeconds(duration));
}

void MetricsImpl::SetModelTimes(absl::Duration load, absl::Duration warmup) {
  runtime_.model_load.Set(absl::ToDoubleSeconds(load));
  runtime_.model_warmup.Set(absl::ToDoubleSeconds(warmup));
}

void MetricsImpl::SetBuildInfo(absl::string_view version,
                               absl::string_view torch_version,
                               absl::string_view device,
                               absl::string_view model) {
  absl::MutexLock lock(&slow_mu_);
  if (build_info_ != nullptr) server_.build_info.Remove(build_info_);
  build_info_ = &server_.build_info.Add({{"version", std::string(version)},
                                         {"torch_version",
                                          std::string(torch_version)},
                                         {"device", std::string(device)},
                                         {"model", std::string(model)}});
  build_info_->Set(1);
}

void MetricsImpl::SetReady(bool ready) { server_.ready.Set(ready ? 1 : 0); }

void MetricsImpl::SetModelStates(const std::vector<ModelState>& states) {
  absl::MutexLock lock(&slow_mu_);
  for (Gauge* g : model_states_) model_state_.Remove(g);
  model_states_.clear();
  for (const ModelState& m : states) {
    Gauge& g = model_state_.Add(
        {{"model", m.model}, {"version", m.version}, {"state", m.state}});
    g.Set(1);
    model_states_.push_back(&g);
  }
}

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