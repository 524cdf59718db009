// Every Prometheus metric family of the server and the rolling latency/error
// monitor. The only target that sees prometheus-cpp.
//
// Families (all prefixed metalserve_). Those marked [model] carry the labels
// model and version (the version that answered) and are recorded through a
// ModelMetrics handle (below): their series exist while that version is
// loaded, at zero before its first request, and are removed when it has
// been unloaded and drained, so their cardinality follows what is loaded.
//   requests_total{method,code}            counter, every gRPC/REST outcome;
//     [model] for an inference method (Predict, ModelInfer,
//     http_ModelInfer) once the request named a loaded version; without
//     model/version (model="" in PromQL) for the other methods (health,
//     metadata, repository...) and for inference requests refused before a
//     loaded version was found (unknown model or version, malformed body),
//     so a hostile client's model names never create series. Each request is
//     counted once: sum() over the family is every request.
//   request_duration_seconds{method}       histogram, 100us..10s; [model] as
//                                          requests_total
//   queue_duration_seconds                 [model] histogram
//   compute_duration_seconds               [model] histogram (one per batch)
//   batch_size_rows                        [model] histogram of realised rows
//   batch_padding_rows_total               [model] counter
//   batches_total{reason}                  [model] counter, why each batch
//                                          closed (full, delay_expired,
//                                          no_delay, draining, no_gain, priority_cap, other)
//   batches_cut_total,                     [model] counters: batches the
//   batch_cut_rows_total                   adaptive policy cut back from
//                                          padding, and the rows they left
//                                          queued for a later batch
//   batches_inline_total                   [model] counter: batches (calls)
//                                          run on the thread that received
//                                          them (BatcherOptions::
//                                          inline_max_cost), also in
//                                          batches_total
//   queue_depth_rows                       [model] gauge
//   device_batches_total{device},          [model] counters per device that
//   device_batch_rows_total{device},       ran the version's batches (a
//   device_busy_seconds_total{device}      hybrid's each; padded rows; the
//                                          forward times' sum without
//                                          overlap, so its rate is the share
//                                          of time the device spent on this
//                                          version); created at load
//   queue_capacity_rows                    [model] gauge: the version's
//                                          max_queue_size
//   inflight_requests                      gauge (every method)
//   access_log_dropped_lines_total         counter, --access_log lines dropped
//                                          because its queue was full
//   unread_responses_cut_total,            counters: calls cut off because
//   unread_response_bytes_cut_total        their client did not read the answer
//                                          (unread_response_guard.h), and its bytes
//   shared_memory_regions,                 gauges: system shared-memory regions
//   shared_memory_region_bytes             registered, and their bytes (the
//                                          clients' pages they keep mapped)
//   shared_memory_truncations_total        counter: requests refused because
//                                          their region's object shrank while
//                                          they were read (shared_memory.h; not
//                                          the later ones the region refuses)
//   device_memory_bytes{device,kind}       gauge: allocated | reserved | limit,
//                                          per device a loaded model is on
//   process_resident_memory_bytes          gauge
//   cache_clears_total{trigger}            counter
//   cache_clear_duration_seconds{trigger}  histogram
//   model_load_duration_seconds, model_warmup_duration_seconds  gauges
//   model_load_phase_seconds{phase}        gauge: read | signature | optimize
//                                          | verify | warmup (verify is 0 on a
//                                          verification-cache hit)
//   device_forward_seconds{device,batch_size}  [model] gauge: the version's
//                                          device table (--device=auto's
//                                          measurement, a hybrid's warm-up),
//                                          per device and warm-up size
//   build_info{version,torch_version,device,model}  gauge = 1
//   model_state{model,version,state}       gauge = 1 per version the model
//                                          manager knows (READY, LOADING,
//                                          UNLOADING, UNAVAILABLE); removed
//                                          when it forgets the version
//   model_loads_total{model,outcome}       counter: ok | failed, per version
//   model_unloads_total{model,outcome}     counter: ok | failed (model ""
//                                          when the name was not loaded)
//   ready                                  gauge 0/1
//   monitor_latency_p50_seconds, monitor_latency_p95_seconds,
//   monitor_latency_mean_seconds, monitor_error_ratio (server errors),
//   monitor_caller_error_ratio, monitor_window_requests
//                                          gauges over the rolling window
//                                          (server/metrics/monitor.h),
//                                          computed when scraped; all 0 when
//                                          no request finished within
//                                          monitor_max_age (separate gauges:
//                                          a "quantile" label is reserved
//                                          for summaries)
//
// Label values are bounded: methods "Predict", "GetModelMetadata" and
// "http_ModelInfer" (KServe REST infer; REST methods start "http_"), every
// gRPC code, and cache triggers "every_n", "interval", "watermark", "oom"
// exist from the start (at zero); up to 16 further values per label are
// learned at run time, and any beyond those are counted under "other". A
// loaded version's series are all created by ForModel: the three inference
// methods times every code, the batch reasons listed above.
//
// Thread-safety: every method is thread-safe. Recording methods take no lock
// held across anything but a few arithmetic operations (hot path < 1 us).
// Destruction stops the HTTP listener and joins the monitor log thread.
#ifndef METALSERVE_SERVER_METRICS_METRICS_H_
#define METALSERVE_SERVER_METRICS_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace metalserve {

struct MonitorSnapshot {
  int64_t count = 0;  // requests in the window; 0: no traffic
  double p50_seconds = 0;
  double p95_seconds = 0;
  double mean_seconds = 0;
  double error_ratio = 0;         // server errors / count
  double caller_error_ratio = 0;  // caller errors / count (ClassifyOutcome)
};

struct MetricsOptions {
  // host:port of the /metrics HTTP listener. Empty: no listener; metrics are
  // still recorded and readable with Metrics::Scrape(). Port 0 picks one.
  // Loopback by default; 9464 rather than 9090, which a Prometheus server on
  // the same host listens on by default.
  std::string listen_address = "127.0.0.1:9464";
  // The listener closes a connection that has been silent this long (whole
  // seconds, rounded up). It serves every connection from one polling
  // thread, so idle or half-sent requests never delay a scrape; this only
  // bounds how long they hold a socket. Default 10 s.
  absl::Duration listen_idle_timeout = absl::Seconds(10);
  // Connections the listener serves at once; further ones are closed on
  // accept. Bounds the descriptors clients can take. Default 64.
  int listen_max_connections = 64;
  // Rolling monitor window, in requests. Default 100.
  int64_t monitor_window = 100;
  // Requests that finished longer ago than this leave the monitor window, so
  // an idle server reads as "no traffic". Must be > 0. Default 60 s.
  absl::Duration monitor_max_age = absl::Seconds(60);
  // How often the monitor logs p50/p95/mean/error rates. Zero: never. An
  // idle stretch is logged once ("no requests in the last ..."), not every
  // interval.
  absl::Duration monitor_log_interval = absl::Seconds(60);
  Clock* clock = nullptr;  // nullptr: Clock::RealClock()
  // Called from the monitor log thread right after each periodic log line,
  // with the figures it logged (so once per idle stretch, count 0). Tests use it to observe the cadence. No
  // Metrics lock is held during the call. Empty: nothing is called.
  std::function<void(const MonitorSnapshot&)> on_monitor_log;
};

// Memory figures as reported by the runtime; -1 means not available.
struct MemoryFigures {
  int64_t allocated_bytes = -1;
  int64_t reserved_bytes = -1;
  int64_t limit_bytes = -1;
  int64_t resident_bytes = -1;
  // The device the first three are of ("cuda:0", "mps", "cpu"): their
  // `device` label. The resident set is the process's.
  std::string device;
};

// The series of one loaded model version ([model] families above), as its
// servable records into them. Made by Metrics::ForModel; the servable owns
// it and destroys it when the version is freed (unloaded and drained).
//
// Thread-safety: every method is thread-safe and lock-free on the hot path.
// Lifetime: the Metrics that made it must outlive it. Destruction removes
// the version's series from every family, unless another handle for the
// same model and version is still alive (a version reloaded while its old
// copy drains): the series go with the last one.
class ModelMetrics {
 public:
  virtual ~ModelMetrics() = default;
  // An inference request answered by this version (the service edge's
  // Metrics::RequestFinished, with model and version): `method` is
  // "Predict", "ModelInfer" or "http_ModelInfer"; any other method is
  // recorded without model labels. Pairs with Metrics::RequestStarted.
  virtual void RequestFinished(absl::string_view method, absl::StatusCode code,
                               absl::Duration latency) = 0;
  virtual void QueueWait(absl::Duration wait) = 0;
  // `rows`: request rows the batch carried, padding excluded;
  // `padding_rows`: rows added to reach an allowed batch size.
  // `reason` is the batcher's close reason ("full", "delay_expired", ...;
  // others are counted as "other").
  virtual void BatchCompleted(int64_t rows, int64_t padding_rows,
                              absl::string_view reason,
                              absl::Duration compute) = 0;
  virtual void SetQueueDepth(int64_t rows) = 0;
  // A closed batch cut back from padding, leaving `rows_left` rows queued
  // for a later batch: batches_cut_total and batch_cut_rows_total.
  // Default: nothing (fakes).
  virtual void BatchCut(int64_t /*rows_left*/) {}
  // A batch run on the thread that received its call, not an executor's:
  // batches_inline_total. Default: nothing (fakes).
  virtual void BatchInline() {}
  // Where a batch's compute time went, for a runtime that times its stages
  // (runner.h's ComputeStages): compute_stage_seconds_total{stage} and
  // compute_stage_batches_total. Default: nothing (fakes).
  virtual void BatchStages(absl::Duration /*assemble*/, absl::Duration /*wait*/,
                           absl::Duration /*device*/, absl::Duration /*outputs*/) {}
  // Of those timed batches, one whose rows went into a host buffer kept
  // from an earlier batch (runner.h's BatchStaging::kReused):
  // compute_staging_reused_total. Default: nothing (fakes).
  virtual void BatchBufferReused() {}
  // A batch of `rows` rows (padding included) that `device` ran
  // successfully, its forward taking `took`: device_batches_total,
  // device_batch_rows_total and device_busy_seconds_total. A hybrid model's
  // batches are split over its devices; any other model's all go to its one
  // device. Devices come from the runtime, never from a client (bounded by
  // the devices of loaded versions). Default: nothing (fakes).
  virtual void DeviceBatch(absl::string_view /*device*/, int64_t /*rows*/,
                           absl::Duration /*took*/) {}
  // Creates `device`'s device_* counters at zero (at load, for each device
  // the version runs on), so that rate() sees their first batch.
  virtual void AddDevice(absl::string_view /*device*/) {}
  // One cell of the version's device table (ModelInfo's device_choice
  // timings: --device=auto's measurement, a hybrid's warm-up per device):
  // device_forward_seconds. Bounded by the devices times the warm-up sizes.
  virtual void SetDeviceForward(absl::string_view /*device*/, int64_t /*batch_size*/,
                                absl::Duration /*took*/) {}
};

class Metrics {
 public:
  // InvalidArgument / Unavailable (with the address) when the listener cannot
  // be created or bound.
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(
      const MetricsOptions& options);
  virtual ~Metrics() = default;

  // Port the HTTP listener is bound to; 0 when there is none.
  virtual int port() const = 0;
  // The text exposition format of every family, as /metrics serves it.
  virtual std::string Scrape() const = 0;

  // --- service edge -------------------------------------------------------
  // `method` is a bounded set: "Predict", "GetModelMetadata", "ModelInfer"...
  virtual void RequestStarted(absl::string_view method) = 0;
  // Every RPC outcome, once. Also feeds the rolling monitor, which counts
  // the caller's errors apart from the server's (ClassifyOutcome). Pair each RequestStarted with one
  // RequestFinished (inflight_requests is their difference).
  // Recorded without model labels: once a request has found its version,
  // record its end through that version's ModelMetrics instead.
  virtual void RequestFinished(absl::string_view method, absl::StatusCode code,
                               absl::Duration latency) = 0;
  // An admitted inference request's outcome by its priority level
  // (metalserve_priority_requests_total{priority,code} and
  // metalserve_priority_request_duration_seconds{priority}; levels are
  // bounded by --priority_levels).
  virtual void PriorityRequestFinished(int /*level*/, absl::StatusCode /*code*/,
                                       absl::Duration /*latency*/) {}
  // Lines the access log dropped (its writer fell behind).
  virtual void AccessLogLinesDropped(int64_t lines) = 0;
  // `calls` calls cut off because their answers (`bytes` in all) were not
  // read by the client.
  virtual void UnreadResponsesCut(int64_t /*calls*/, int64_t /*bytes*/) {}
  // The shared-memory regions registered now and their bytes in all.
  virtual void SetSharedMemoryRegions(int64_t /*regions*/, int64_t /*bytes*/) {}
  // A request refused because its region was truncated while it was read.
  virtual void SharedMemoryTruncated() {}

  // --- model versions -----------------------------------------------------
  // The series of `model` at `version`, created now at zero (every code of
  // every inference method, every batch reason, queue depth 0 and
  // queue_capacity_rows = `queue_capacity_rows`, the version's
  // max_queue_size; 0: no capacity series). Called when a version is
  // loaded, never for a name a client sent that is not loaded.
  virtual std::unique_ptr<ModelMetrics> ForModel(absl::string_view model,
                                                 absl::string_view version,
                                                 int64_t queue_capacity_rows) = 0;

  // --- runtime ------------------------------------------------------------
  // A figure of -1 removes its series until a later call reports it. The
  // device figures are kept per MemoryFigures::device: memory belongs to the
  // device, which every model on it shares.
  virtual void SetMemory(const MemoryFigures& memory) = 0;
  // Removes `device`'s memory series: a version on it was freed, so the
  // figures it reported are stale (the freed memory went back to the
  // device). A model still on the device reports again from its idle loop.
  virtual void ForgetDeviceMemory(absl::string_view device) = 0;
  // `trigger`: "every_n", "interval", "watermark", "oom".
  virtual void CacheCleared(absl::string_view trigger,
                            absl::Duration duration) = 0;
  virtual void SetModelTimes(absl::Duration load, absl::Duration warmup) = 0;
  // One load phase's duration (RuntimeOptions::on_load_phase's phases).
  virtual void SetLoadPhase(absl::string_view phase, absl::Duration took) = 0;
  virtual void SetBuildInfo(absl::string_view version,
                            absl::string_view torch_version,
                            absl::string_view device,
                            absl::string_view model) = 0;
  virtual void SetReady(bool ready) = 0;

  // The model repository (docs/repository.md). `states`: every version the
  // model manager knows now; model_state is 1 for each (model, version,
  // state) and the series of versions no longer listed are removed, so the
  // cardinality is bounded by what is loaded. Default: nothing (fakes).
  struct ModelState {
    std::string model;
    std::string version;
    std::string state;
  };
  virtual void SetModelStates(const std::vector<ModelState>& /*states*/) {}
  // One version's load ended, `ok` or failed: model_loads_total.
  virtual void ModelLoadFinished(absl::string_view /*model*/, bool /*ok*/) {}
  // One unload ended: model_unloads_total{model,outcome}; `model` "" for
  // a refused unload (the name was not loaded).
  virtual void ModelUnloadFinished(absl::string_view /*model*/, bool /*ok*/) {}

  virtual MonitorSnapshot Monitor() const = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_METRICS_METRICS_H_
