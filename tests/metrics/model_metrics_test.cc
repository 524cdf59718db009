// Metrics::ForModel: the series of one model version, labelled {model,
// version}, created at zero when the version is loaded and removed when its
// last handle goes.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/metrics.h"
#include "server/metrics/model_series.h"
#include "tests/testing/metric_sample.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::Sample;
using ::testing::DoubleNear;
using ::testing::Eq;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;

std::unique_ptr<Metrics> MakeMetrics() {
  MetricsOptions options;
  options.listen_address = "";
  options.monitor_log_interval = absl::ZeroDuration();
  auto metrics = Metrics::Create(options);
  EXPECT_THAT(metrics, IsOk());
  return metrics.ok() ? *std::move(metrics) : nullptr;
}

// `name{...labels,model="a",version="1"}`: the series of model a version 1.
std::string A1(absl::string_view name, absl::string_view labels = "") {
  return absl::StrCat(name, "{", labels, labels.empty() ? "" : ",",
                      R"(model="a",version="1"})");
}

TEST(ModelMetricsTest, CreatesEveryInferenceSeriesAtZeroWhenAVersionLoads) {
  auto metrics = MakeMetrics();
  std::unique_ptr<ModelMetrics> a = metrics->ForModel("a", "1", 64);
  const std::string s = metrics->Scrape();
  for (absl::string_view method : {"Predict", "ModelInfer", "http_ModelInfer"}) {
    for (absl::string_view code : {"OK", "INVALID_ARGUMENT", "UNAVAILABLE", "INTERNAL"}) {
      EXPECT_THAT(Sample(s, absl::StrCat(R"(metalserve_requests_total{code=")", code,
                                         R"(",method=")", method,
                                         R"(",model="a",version="1"})")),
                  Optional(Eq(0)))
          << method << " " << code;
    }
    EXPECT_THAT(Sample(s, absl::StrCat(R"(metalserve_request_duration_seconds_count{method=")",
                                       method, R"(",model="a",version="1"})")),
                Optional(Eq(0)));
  }
  for (absl::string_view reason :
       {"full", "delay_expired", "no_delay", "draining", "no_gain", "priority_cap"}) {
    EXPECT_THAT(Sample(s, A1("metalserve_batches_total", absl::StrCat(R"(reason=")", reason,
                                                                      R"(")"))),
                Optional(Eq(0)))
        << reason;
  }
  EXPECT_THAT(Sample(s, A1("metalserve_queue_duration_seconds_count")), Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_compute_duration_seconds_count")), Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_batch_size_rows_count")), Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_batch_padding_rows_total")), Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_batches_cut_total")), Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_batch_cut_rows_total")), Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_batches_inline_total")), Optional(Eq(0)));
  for (const char* stage : metrics_internal::kComputeStages) {
    EXPECT_THAT(Sample(s, A1("metalserve_compute_stage_seconds_total",
                             absl::StrCat(R"(stage=")", stage, R"(")"))),
                Optional(Eq(0)))
        << stage;
  }
  EXPECT_THAT(Sample(s, A1("metalserve_compute_stage_batches_total")), Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_compute_staging_reused_total")), Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_queue_depth_rows")), Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_queue_capacity_rows")), Optional(Eq(64)));
}

TEST(ModelMetricsTest, RecordsRequestsAndBatchesUnderTheirVersionOnly) {
  auto metrics = MakeMetrics();
  std::unique_ptr<ModelMetrics> a = metrics->ForModel("a", "1", 0);
  std::unique_ptr<ModelMetrics> b = metrics->ForModel("b", "7", 0);
  metrics->RequestStarted("Predict");
  metrics->RequestStarted("ModelInfer");
  a->RequestFinished("Predict", absl::StatusCode::kOk, absl::Milliseconds(3));
  b->RequestFinished("ModelInfer", absl::StatusCode::kInternal, absl::Milliseconds(5));
  a->QueueWait(absl::Milliseconds(2));
  a->QueueWait(absl::Milliseconds(4));
  a->BatchCompleted(6, 2, "full", absl::Milliseconds(10));
  a->BatchCompleted(3, 1, "delay_expired", absl::Milliseconds(30));
  a->BatchCompleted(1, 0, "some_new_reason", absl::Milliseconds(20));
  a->BatchCut(26);
  a->BatchCut(4);
  a->BatchInline();
  a->BatchStages(absl::Microseconds(10), absl::Microseconds(20), absl::Milliseconds(3),
                 absl::Microseconds(40));
  a->BatchStages(absl::Microseconds(30), absl::ZeroDuration(), absl::Milliseconds(1),
                 absl::Microseconds(2));
  a->BatchBufferReused();
  a->SetQueueDepth(12);
  const std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, A1("metalserve_requests_total", R"(code="OK",method="Predict")")),
              Optional(Eq(1)));
  EXPECT_THAT(Sample(s, R"(metalserve_requests_total{code="INTERNAL",method="ModelInfer",)"
                       R"(model="b",version="7"})"),
              Optional(Eq(1)));
  // Counted once: not in the unlabelled (model-less) series too.
  EXPECT_THAT(Sample(s, R"(metalserve_requests_total{code="OK",method="Predict"})"),
              Optional(Eq(1)));
  EXPECT_THAT(Sample(s, A1("metalserve_request_duration_seconds_sum", R"(method="Predict")")),
              Optional(DoubleNear(0.003, 1e-12)));
  EXPECT_THAT(Sample(s, "metalserve_inflight_requests"), Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_queue_duration_seconds_count")), Optional(Eq(2)));
  EXPECT_THAT(Sample(s, A1("metalserve_queue_duration_seconds_sum")),
              Optional(DoubleNear(0.006, 1e-12)));
  EXPECT_THAT(Sample(s, A1("metalserve_compute_duration_seconds_sum")),
              Optional(DoubleNear(0.06, 1e-12)));
  EXPECT_THAT(Sample(s, A1("metalserve_batch_size_rows_sum")), Optional(Eq(10)));
  EXPECT_THAT(Sample(s, A1("metalserve_batch_size_rows_bucket", R"(le="4")")), Optional(Eq(2)));
  EXPECT_THAT(Sample(s, A1("metalserve_batch_padding_rows_total")), Optional(Eq(3)));
  EXPECT_THAT(Sample(s, A1("metalserve_batches_cut_total")), Optional(Eq(2)));
  EXPECT_THAT(Sample(s, A1("metalserve_batch_cut_rows_total")), Optional(Eq(30)));
  EXPECT_THAT(Sample(s, R"(metalserve_batches_cut_total{model="b",version="7"})"),
              Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_batches_inline_total")), Optional(Eq(1)));
  EXPECT_THAT(Sample(s, R"(metalserve_batches_inline_total{model="b",version="7"})"),
              Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_compute_stage_seconds_total", R"(stage="assemble")")),
              Optional(DoubleNear(40e-6, 1e-12)));
  EXPECT_THAT(Sample(s, A1("metalserve_compute_stage_seconds_total", R"(stage="wait")")),
              Optional(DoubleNear(20e-6, 1e-12)));
  EXPECT_THAT(Sample(s, A1("metalserve_compute_stage_seconds_total", R"(stage="device")")),
              Optional(DoubleNear(4e-3, 1e-12)));
  EXPECT_THAT(Sample(s, A1("metalserve_compute_stage_seconds_total", R"(stage="outputs")")),
              Optional(DoubleNear(42e-6, 1e-12)));
  EXPECT_THAT(Sample(s, A1("metalserve_compute_stage_batches_total")), Optional(Eq(2)));
  EXPECT_THAT(Sample(s, R"(metalserve_compute_stage_batches_total{model="b",version="7"})"),
              Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_compute_staging_reused_total")), Optional(Eq(1)));
  EXPECT_THAT(Sample(s, R"(metalserve_compute_staging_reused_total{model="b",version="7"})"),
              Optional(Eq(0)));
  EXPECT_THAT(Sample(s, A1("metalserve_batches_total", R"(reason="full")")), Optional(Eq(1)));
  EXPECT_THAT(Sample(s, A1("metalserve_batches_total", R"(reason="other")")), Optional(Eq(1)));
  EXPECT_THAT(s, Not(HasSubstr("some_new_reason")));
  EXPECT_THAT(Sample(s, A1("metalserve_queue_depth_rows")), Optional(Eq(12)));
  EXPECT_THAT(Sample(s, R"(metalserve_queue_depth_rows{model="b",version="7"})"),
              Optional(Eq(0)));
  EXPECT_THAT(Sample(s, R"(metalserve_batch_size_rows_count{model="b",version="7"})"),
              Optional(Eq(0)));
  // No capacity given: no capacity series.
  EXPECT_THAT(Sample(s, "metalserve_queue_capacity_rows"), Eq(std::nullopt));
}

TEST(ModelMetricsTest, ANonInferenceMethodIsRecordedWithoutModelLabels) {
  auto metrics = MakeMetrics();
  std::unique_ptr<ModelMetrics> a = metrics->ForModel("a", "1", 0);
  metrics->RequestStarted("GetModelMetadata");
  a->RequestFinished("GetModelMetadata", absl::StatusCode::kOk, absl::Milliseconds(1));
  const std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, R"(metalserve_requests_total{code="OK",method="GetModelMetadata"})"),
              Optional(Eq(1)));
  EXPECT_THAT(Sample(s, A1("metalserve_requests_total", R"(method="GetModelMetadata")")),
              Eq(std::nullopt));
  EXPECT_THAT(Sample(s, "metalserve_inflight_requests"), Optional(Eq(0)));
}

TEST(ModelMetricsTest, DestroyingTheHandleRemovesEveryOneOfItsSeries) {
  auto metrics = MakeMetrics();
  std::unique_ptr<ModelMetrics> a = metrics->ForModel("a", "1", 64);
  std::unique_ptr<ModelMetrics> b = metrics->ForModel("b", "1", 64);
  a->RequestFinished("Predict", absl::StatusCode::kOk, absl::Milliseconds(1));
  a->BatchCompleted(1, 0, "full", absl::Milliseconds(1));
  a->BatchCut(3);
  a.reset();
  const std::string s = metrics->Scrape();
  EXPECT_THAT(s, Not(HasSubstr(R"(model="a")")));
  EXPECT_THAT(Sample(s, R"(metalserve_queue_depth_rows{model="b",version="1"})"),
              Optional(Eq(0)));
  // The unlabelled series of requests that found no version stay.
  EXPECT_THAT(Sample(s, R"(metalserve_requests_total{code="OK",method="Predict"})"),
              Optional(Eq(0)));
}

TEST(ModelMetricsTest, AVersionLoadedAgainWhileItsOldCopyDrainsKeepsItsSeries) {
  auto metrics = MakeMetrics();
  std::unique_ptr<ModelMetrics> old_copy = metrics->ForModel("a", "1", 64);
  old_copy->RequestFinished("Predict", absl::StatusCode::kOk, absl::Milliseconds(1));
  std::unique_ptr<ModelMetrics> new_copy = metrics->ForModel("a", "1", 32);
  old_copy.reset();  // drained after the reload
  new_copy->RequestFinished("Predict", absl::StatusCode::kOk, absl::Milliseconds(1));
  std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, A1("metalserve_requests_total", R"(code="OK",method="Predict")")),
              Optional(Eq(2)));
  EXPECT_THAT(Sample(s, A1("metalserve_queue_capacity_rows")), Optional(Eq(32)));
  new_copy.reset();
  EXPECT_THAT(metrics->Scrape(), Not(HasSubstr(R"(model="a")")));
}

// Batches per device: a device's series appear with its first batch, a copy
// of the version loaded again adds to the same series, and they go with the
// version's last copy.
TEST(ModelMetricsTest, DeviceBatchSeriesArePerDeviceAndGoWithTheLastCopy) {
  auto metrics = MakeMetrics();
  std::unique_ptr<ModelMetrics> old_copy = metrics->ForModel("a", "1", 0);
  EXPECT_THAT(metrics->Scrape(), Not(HasSubstr("metalserve_device_batches_total{")));
  old_copy->DeviceBatch("cuda:0", 32, absl::Milliseconds(2));
  old_copy->DeviceBatch("cpu", 1, absl::Microseconds(500));
  std::unique_ptr<ModelMetrics> new_copy = metrics->ForModel("a", "1", 0);
  new_copy->DeviceBatch("cuda:0", 16, absl::Milliseconds(1));
  old_copy.reset();
  const std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, A1("metalserve_device_batches_total", R"(device="cuda:0")")),
              Optional(Eq(2)));
  EXPECT_THAT(Sample(s, A1("metalserve_device_batch_rows_total", R"(device="cuda:0")")),
              Optional(Eq(48)));
  EXPECT_THAT(Sample(s, A1("metalserve_device_busy_seconds_total", R"(device="cuda:0")")),
              Optional(DoubleNear(0.003, 1e-9)));
  EXPECT_THAT(Sample(s, A1("metalserve_device_batches_total", R"(device="cpu")")),
              Optional(Eq(1)));
  new_copy.reset();
  const std::string after = metrics->Scrape();
  for (const char* family : {"metalserve_device_batches_total{",
                             "metalserve_device_batch_rows_total{",
                             "metalserve_device_busy_seconds_total{"}) {
    EXPECT_THAT(after, Not(HasSubstr(family)));
  }
}

TEST(ModelMetricsTest, LoadsAndUnloadsRacingWithRecordingLoseNoEventsOfAHeldVersion) {
  auto metrics = MakeMetrics();
  std::unique_ptr<ModelMetrics> held = metrics->ForModel("a", "1", 0);
  constexpr int kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        metrics->RequestStarted("Predict");
        held->RequestFinished("Predict", absl::StatusCode::kOk, absl::Microseconds(10));
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < kPerThread; ++i) {
      metrics->ForModel("a", "1", 0).reset();         // a copy loaded and freed
      metrics->ForModel("b", absl::StrCat(i % 3), 0);  // other versions come and go
    }
  });
  for (auto& t : threads) t.join();
  const std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, A1("metalserve_requests_total", R"(code="OK",method="Predict")")),
              Optional(Eq(3 * kPerThread)));
  EXPECT_THAT(s, Not(HasSubstr(R"(model="b")")));
  EXPECT_THAT(Sample(s, "metalserve_inflight_requests"), Optional(Eq(0)));
}

}  // namespace
}  // namespace metalserve
