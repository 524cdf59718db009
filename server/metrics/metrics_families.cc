#include "server/metrics/metrics_families.h"

namespace metalserve {
namespace metrics_internal {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

// One unlabelled child of a new family.
Gauge& SingleGauge(prometheus::Registry& registry, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

Counter& SingleCounter(prometheus::Registry& registry, const char* name,
                       const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::MetricFamily MonitorGauge(const char* name, const char* help, double value) {
  prometheus::ClientMetric metric;
  metric.gauge.value = value;
  return {name, help, prometheus::MetricType::Gauge, {metric}};
}

}  // namespace

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

Histogram::BucketBoundaries RowBuckets() {
  Histogram::BucketBoundaries b;
  for (double rows = 1; rows <= 1024; rows *= 2) b.push_back(rows);
  return b;
}

int CodeIndex(absl::StatusCode code) {
  const int i = static_cast<int>(code);
  return (i >= 0 && i < kNumCodes) ? i : static_cast<int>(absl::StatusCode::kUnknown);
}

RequestFamilies::RequestFamilies(prometheus::Registry& registry)
    : requests(prometheus::BuildCounter()
                   .Name("metalserve_requests_total")
                   .Help("RPCs finished, by method and gRPC code; inference requests that found "
                         "a loaded version also by model and version.")
                   .Register(registry)),
      duration(prometheus::BuildHistogram()
                   .Name("metalserve_request_duration_seconds")
                   .Help("RPC latency from arrival to finish, by method; inference requests "
                         "that found a loaded version also by model and version.")
                   .Register(registry)),
      inflight(SingleGauge(registry, "metalserve_inflight_requests",
                           "RPCs started and not yet finished.")),
      methods({"Predict", "GetModelMetadata", "http_ModelInfer"},
              [this](const std::string& method) {
        MethodSeries s;
        for (int i = 0; i < kNumCodes; ++i) {
          s.requests[i] = &requests.Add(
              {{"method", method},
               {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(i))}});
        }
        s.duration = &duration.Add({{"method", method}}, LatencyBuckets());
        return s;
      }) {}

PriorityFamilies::PriorityFamilies(prometheus::Registry& registry)
    : requests_(prometheus::BuildCounter()
                    .Name("metalserve_priority_requests_total")
                    .Help("Admitted inference requests by priority level and gRPC code.")
                    .Register(registry)),
      duration_(prometheus::BuildHistogram()
                    .Name("metalserve_priority_request_duration_seconds")
                    .Help("Latency of admitted inference requests by priority level.")
                    .Register(registry)) {}

Counter& PriorityFamilies::RequestsChild(int level, absl::StatusCode code) {
  return requests_.Add(
      {{"priority", std::to_string(level)}, {"code", absl::StatusCodeToString(code)}});
}

Histogram& PriorityFamilies::DurationChild(int level) {
  return duration_.Add({{"priority", std::to_string(level)}}, LatencyBuckets());
}

void PriorityFamilies::Record(int level, absl::StatusCode code, double seconds) {
  const int code_index = CodeIndex(code);
  if (level < 0 || level >= kCachedLevels || code_index != static_cast<int>(code)) {
    RequestsChild(level, code).Increment();
    DurationChild(level).Observe(seconds);
    return;
  }
  LevelSeries& series = levels_[static_cast<size_t>(level)];
  std::atomic<Counter*>& counter = series.requests[static_cast<size_t>(code_index)];
  Counter* c = counter.load(std::memory_order_acquire);
  if (c == nullptr) {
    c = &RequestsChild(level, code);
    counter.store(c, std::memory_order_release);
  }
  c->Increment();
  Histogram* h = series.duration.load(std::memory_order_acquire);
  if (h == nullptr) {
    h = &DurationChild(level);
    series.duration.store(h, std::memory_order_release);
  }
  h->Observe(seconds);
}

BatchFamilies::BatchFamilies(prometheus::Registry& registry)
    : queue_duration(prometheus::BuildHistogram()
                         .Name("metalserve_queue_duration_seconds")
                         .Help("Time a request waited in the batcher queue, by model version.")
                         .Register(registry)),
      compute_duration(prometheus::BuildHistogram()
                           .Name("metalserve_compute_duration_seconds")
                           .Help("Time of one batch's forward pass, copies included, by "
                                 "model version.")
                           .Register(registry)),
      rows(prometheus::BuildHistogram()
               .Name("metalserve_batch_size_rows")
               .Help("Request rows per batch, padding excluded, by model version.")
               .Register(registry)),
      padding_rows(prometheus::BuildCounter()
                       .Name("metalserve_batch_padding_rows_total")
                       .Help("Rows added to batches to reach an allowed batch size, by "
                             "model version.")
                       .Register(registry)),
      cut_batches(prometheus::BuildCounter()
                      .Name("metalserve_batches_cut_total")
                      .Help("Closed batches the adaptive policy cut back instead of padding "
                            "them to an allowed batch size, by model version.")
                      .Register(registry)),
      cut_rows(prometheus::BuildCounter()
                   .Name("metalserve_batch_cut_rows_total")
                   .Help("Rows the batches in metalserve_batches_cut_total left queued for "
                         "a later batch, by model version.")
                   .Register(registry)),
      inline_batches(prometheus::BuildCounter()
                         .Name("metalserve_batches_inline_total")
                         .Help("Batches of an unbatched model, or lone one-row batches the "
                               "adaptive policy sent at once, run on the gRPC thread that "
                               "received the call instead of a batcher executor "
                               "(--inline_max_cost), by model version; also counted in "
                               "metalserve_batches_total.")
                         .Register(registry)),
      stage_seconds(prometheus::BuildCounter()
                        .Name("metalserve_compute_stage_seconds_total")
                        .Help("Where batches' compute time went, by model version and "
                              "stage: assemble (rows copied into the batch's host buffer), "
                              "wait (the hand-offs to the device thread and back, work "
                              "queued there), device (inputs to the device, forward, "
                              "outputs back), outputs (into the batch's output tensors); "
                              "for the batches in metalserve_compute_stage_batches_total.")
                        .Register(registry)),
      stage_batches(prometheus::BuildCounter()
                        .Name("metalserve_compute_stage_batches_total")
                        .Help("Successful runner calls (a batch, or each half of one retried "
                              "in halves) whose runtime timed their stages "
                              "(metalserve_compute_stage_seconds_total), by model version.")
                        .Register(registry)),
      staging_reused(prometheus::BuildCounter()
                         .Name("metalserve_compute_staging_reused_total")
                         .Help("Of the batches in metalserve_compute_stage_batches_total, "
                               "those whose rows were copied into a host buffer kept from "
                               "an earlier batch instead of one allocated for them "
                               "(--staging_buffers), by model version.")
                         .Register(registry)),
      batches(prometheus::BuildCounter()
                  .Name("metalserve_batches_total")
                  .Help("Batches run, by model version and the reason the batch closed.")
                  .Register(registry)),
      queue_depth(prometheus::BuildGauge()
                      .Name("metalserve_queue_depth_rows")
                      .Help("Rows waiting in a model version's batcher queue.")
                      .Register(registry)),
      queue_capacity(prometheus::BuildGauge()
                         .Name("metalserve_queue_capacity_rows")
                         .Help("Rows a model version's batcher queue holds before refusing "
                               "requests (its max_queue_size).")
                         .Register(registry)),
      device_batches(prometheus::BuildCounter()
                         .Name("metalserve_device_batches_total")
                         .Help("Batches a device ran successfully, by model version and "
                               "device (a hybrid model's are split over its devices).")
                         .Register(registry)),
      device_rows(prometheus::BuildCounter()
                      .Name("metalserve_device_batch_rows_total")
                      .Help("Rows, padding included, of the batches in "
                            "metalserve_device_batches_total.")
                      .Register(registry)),
      device_busy(prometheus::BuildCounter()
                      .Name("metalserve_device_busy_seconds_total")
                      .Help("Forward time of the batches in metalserve_device_batches_total; "
                            "its rate is the share of time the device spent on the version.")
                      .Register(registry)),
      device_forward(prometheus::BuildGauge()
                         .Name("metalserve_device_forward_seconds")
                         .Help("A model version's device table: the measured forward time "
                               "on each device at each warm-up batch size (--device=auto: "
                               "median of 3; a hybrid: each device's warm-up).")
                         .Register(registry)) {}

RuntimeFamilies::RuntimeFamilies(prometheus::Registry& registry)
    : device_memory(prometheus::BuildGauge()
                        .Name("metalserve_device_memory_bytes")
                        .Help("Device memory as the runtime reports it: allocated by "
                              "tensors, reserved by the allocator or driver, and the "
                              "limit (high watermark).")
                        .Register(registry)),
      resident(prometheus::BuildGauge()
                   .Name("metalserve_process_resident_memory_bytes")
                   .Help("Resident set size of the server process.")
                   .Register(registry)),
      cache_clears(prometheus::BuildCounter()
                       .Name("metalserve_cache_clears_total")
                       .Help("Device cache clears, by trigger.")
                       .Register(registry)),
      cache_clear_duration(prometheus::BuildHistogram()
                               .Name("metalserve_cache_clear_duration_seconds")
                               .Help("Time one device cache clear took, by trigger.")
                               .Register(registry)),
      triggers({"every_n", "interval", "watermark", "oom"},
               [this](const std::string& trigger) {
                 return TriggerSeries{
                     &cache_clears.Add({{"trigger", trigger}}),
                     &cache_clear_duration.Add({{"trigger", trigger}}, LatencyBuckets())};
               }),
      model_load(SingleGauge(registry, "metalserve_model_load_duration_seconds",
                             "Time the model took to load.")),
      model_warmup(SingleGauge(registry, "metalserve_model_warmup_duration_seconds",
                               "Time the model warm-up took.")),
      load_phase(prometheus::BuildGauge()
                     .Name("metalserve_model_load_phase_seconds")
                     .Help("Time each model load phase took: read, signature, optimize, "
                           "verify (0 on a verification-cache hit), warmup.")
                     .Register(registry)),
      load_phases({"read", "signature", "optimize", "verify", "warmup"},
                  [this](const std::string& phase) { return &load_phase.Add({{"phase", phase}}); }) {}

ServerFamilies::ServerFamilies(prometheus::Registry& registry)
    : build_info(prometheus::BuildGauge()
                     .Name("metalserve_build_info")
                     .Help("Always 1; labels name the server version, "
                           "torch version, device and model.")
                     .Register(registry)),
      ready(SingleGauge(registry, "metalserve_ready",
                        "1 when the server accepts Predict calls, else 0.")),
      access_log_dropped(SingleCounter(registry,
                                       "metalserve_access_log_dropped_lines_total",
                                       "Access log lines dropped because the "
                                       "writer's queue was full.")),
      unread_cut(SingleCounter(registry, "metalserve_unread_responses_cut_total",
                               "Calls cancelled because their client did not read the "
                               "answer (its bound or timeout was reached).")),
      unread_cut_bytes(SingleCounter(registry, "metalserve_unread_response_bytes_cut_total",
                                     "Bytes of the answers of the calls counted in "
                                     "metalserve_unread_responses_cut_total.")),
      shm_regions(SingleGauge(registry, "metalserve_shared_memory_regions",
                              "System shared-memory regions registered (--shared_memory).")),
      shm_bytes(SingleGauge(registry, "metalserve_shared_memory_region_bytes",
                            "Bytes of the registered shared-memory regions: clients' pages "
                            "the server keeps mapped.")),
      shm_truncations(SingleCounter(registry, "metalserve_shared_memory_truncations_total",
                                    "Requests refused because their shared-memory region's "
                                    "object was truncated while they were read.")) {}

std::vector<prometheus::MetricFamily> MonitorCollectable::Collect() const {
  const MonitorSnapshot s = monitor_->Snapshot();
  const struct {
    const char* name;
    const char* help;
    double value;
  } gauges[] = {
      {"metalserve_monitor_latency_p50_seconds",
       "Median request latency over the rolling monitor window.", s.p50_seconds},
      {"metalserve_monitor_latency_p95_seconds",
       "95th percentile request latency over the rolling monitor window.",
       s.p95_seconds},
      {"metalserve_monitor_latency_mean_seconds",
       "Mean request latency over the rolling monitor window.", s.mean_seconds},
      {"metalserve_monitor_error_ratio",
       "Share of requests in the rolling monitor window that failed on the "
       "server's side (codes other than OK and the caller's errors).",
       s.error_ratio},
      {"metalserve_monitor_caller_error_ratio",
       "Share of requests in the rolling monitor window refused for the caller's "
       "error (INVALID_ARGUMENT, NOT_FOUND, CANCELLED, FAILED_PRECONDITION, "
       "OUT_OF_RANGE).",
       s.caller_error_ratio},
      {"metalserve_monitor_window_requests",
       "Requests currently in the rolling monitor window.",
       static_cast<double>(s.count)},
  };
  std::vector<prometheus::MetricFamily> families;
  for (const auto& g : gauges) families.push_back(MonitorGauge(g.name, g.help, g.value));
  return families;
}

}  // namespace metrics_internal
}  // namespace metalserve
