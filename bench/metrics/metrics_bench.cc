// The per-request and per-batch cost of recording metrics, as the service
// and the batch executor pay it. One iteration of BM_Request is one RPC:
// RequestStarted, then the model version's QueueWait + RequestFinished
// (labelled counter and histograms, inflight gauge and the rolling monitor). Threads share one Metrics object, so the
// multi-threaded runs include contention on the shared histogram and
// monitor locks.
#include <memory>

#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "server/metrics/metrics.h"

namespace metalserve {
namespace {

Metrics& SharedMetrics() {
  static Metrics* const metrics = [] {
    MetricsOptions options;
    options.listen_address = "";  // recording cost only, no HTTP listener
    options.monitor_log_interval = absl::ZeroDuration();
    return Metrics::Create(options)->release();
  }();
  return *metrics;
}

// One loaded version's series, as a servable holds them.
ModelMetrics& SharedModel() {
  static ModelMetrics* const model = SharedMetrics().ForModel("m", "1", 64).release();
  return *model;
}

void BM_Request(benchmark::State& state) {
  Metrics& metrics = SharedMetrics();
  ModelMetrics& model = SharedModel();
  int64_t i = state.thread_index();
  for (auto _ : state) {
    ++i;
    metrics.RequestStarted("Predict");
    model.QueueWait(absl::Microseconds(200 + i % 300));
    model.RequestFinished(
        "Predict",
        i % 50 == 0 ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kOk,
        absl::Microseconds(1500 + i % 5000));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Request)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

void BM_BatchCompleted(benchmark::State& state) {
  ModelMetrics& model = SharedModel();
  int64_t i = state.thread_index();
  for (auto _ : state) {
    ++i;
    model.BatchCompleted(1 + i % 8, i % 3, i % 4 == 0 ? "full" : "delay_expired",
                         absl::Microseconds(3000 + i % 1000));
    model.SetQueueDepth(i % 64);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BatchCompleted)->Threads(1)->Threads(2)->UseRealTime();

// A scrape with the default families, for scale: Prometheus pays this once
// per scrape interval, not per request.
void BM_Scrape(benchmark::State& state) {
  Metrics& metrics = SharedMetrics();
  for (auto _ : state) {
    benchmark::DoNotOptimize(metrics.Scrape());
  }
}
BENCHMARK(BM_Scrape);

}  // namespace
}  // namespace metalserve

BENCHMARK_MAIN();
