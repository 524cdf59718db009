#include "server/metrics/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/monitor.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/metric_sample.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::DoubleNear;
using ::testing::Eq;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;

using ::metalserve::testing::Sample;

MetricsOptions NoListener() {
  MetricsOptions options;
  options.listen_address = "";
  options.monitor_log_interval = absl::ZeroDuration();
  return options;
}

std::unique_ptr<Metrics> MakeMetrics(MetricsOptions options = NoListener()) {
  auto metrics = Metrics::Create(options);
  EXPECT_THAT(metrics, IsOk());
  return metrics.ok() ? *std::move(metrics) : nullptr;
}

TEST(MetricsTest, CountsEveryOutcomePerMethodAndCode) {
  auto metrics = MakeMetrics();
  for (int i = 0; i < 3; ++i) {
    metrics->RequestFinished("Predict", absl::StatusCode::kOk,
                             absl::Milliseconds(1));
  }
  for (int i = 0; i < 2; ++i) {
    metrics->RequestFinished("Predict", absl::StatusCode::kInvalidArgument,
                             absl::Milliseconds(1));
  }
  metrics->RequestFinished("Predict", absl::StatusCode::kDeadlineExceeded,
                           absl::Milliseconds(1));
  metrics->RequestFinished("GetModelMetadata", absl::StatusCode::kOk,
                           absl::Milliseconds(1));
  const std::string s = metrics->Scrape();
  EXPECT_THAT(
      Sample(s, R"(metalserve_requests_total{code="OK",method="Predict"})"),
      Optional(Eq(3)));
  EXPECT_THAT(Sample(s, R"(metalserve_requests_total{code="INVALID_ARGUMENT",method="Predict"})"),
              Optional(Eq(2)));
  EXPECT_THAT(Sample(s, R"(metalserve_requests_total{code="DEADLINE_EXCEEDED",method="Predict"})"),
              Optional(Eq(1)));
  EXPECT_THAT(Sample(s, R"(metalserve_requests_total{code="OK",method="GetModelMetadata"})"),
              Optional(Eq(1)));
}

TEST(MetricsTest, PreCreatesEveryCodeForKnownMethodsAtZero) {
  auto metrics = MakeMetrics();
  const std::string s = metrics->Scrape();
  for (absl::string_view code :
       {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
        "RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "UNAUTHENTICATED"}) {
    for (absl::string_view method : {"Predict", "GetModelMetadata", "http_ModelInfer"}) {
      EXPECT_THAT(Sample(s, absl::StrCat("metalserve_requests_total{code=\"",
                                         code, "\",method=\"", method, "\"}")),
                  Optional(Eq(0)))
          << code << " " << method;
    }
  }
  EXPECT_THAT(Sample(s, R"(metalserve_cache_clears_total{trigger="oom"})"),
              Optional(Eq(0)));
}

TEST(MetricsTest, RequestDurationHistogramCountsSumsAndBuckets) {
  auto metrics = MakeMetrics();
  for (absl::Duration d : {absl::Microseconds(50), absl::Milliseconds(1),
                           absl::Milliseconds(3), absl::Seconds(20)}) {
    metrics->RequestFinished("Predict", absl::StatusCode::kOk, d);
  }
  const std::string s = metrics->Scrape();
  const std::string h = "metalserve_request_duration_seconds";
  EXPECT_THAT(Sample(s, h + R"(_count{method="Predict"})"), Optional(Eq(4)));
  EXPECT_THAT(Sample(s, h + R"(_sum{method="Predict"})"),
              Optional(DoubleNear(20.00405, 1e-9)));
  EXPECT_THAT(Sample(s, h + R"(_bucket{method="Predict",le="0.0001"})"),
              Optional(Eq(1)));
  EXPECT_THAT(Sample(s, h + R"(_bucket{method="Predict",le="0.001"})"),
              Optional(Eq(2)));
  EXPECT_THAT(Sample(s, h + R"(_bucket{method="Predict",le="0.005"})"),
              Optional(Eq(3)));
  EXPECT_THAT(Sample(s, h + R"(_bucket{method="Predict",le="10"})"),
              Optional(Eq(3)));
  EXPECT_THAT(Sample(s, h + R"(_bucket{method="Predict",le="+Inf"})"),
              Optional(Eq(4)));
  EXPECT_THAT(Sample(s, h + R"(_count{method="GetModelMetadata"})"),
              Optional(Eq(0)));
}

TEST(MetricsTest, InflightIsStartedMinusFinished) {
  auto metrics = MakeMetrics();
  metrics->RequestStarted("Predict");
  metrics->RequestStarted("Predict");
  metrics->RequestStarted("GetModelMetadata");
  metrics->RequestFinished("Predict", absl::StatusCode::kUnavailable,
                           absl::Milliseconds(1));
  EXPECT_THAT(Sample(metrics->Scrape(), "metalserve_inflight_requests"),
              Optional(Eq(2)));
}

// The batching families are per model version: model_metrics_test.cc.

TEST(MetricsTest, LearnsNewLabelValuesUpToABoundThenCountsThemAsOther) {
  auto metrics = MakeMetrics();
  const std::string prefix = R"(metalserve_requests_total{code="OK",method=")";
  for (int i = 0; i < 20; ++i) {
    metrics->RequestFinished(absl::StrCat("m", i), absl::StatusCode::kOk,
                             absl::Milliseconds(1));
  }
  metrics->RequestFinished("m3", absl::StatusCode::kOk, absl::Milliseconds(1));
  const std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, prefix + R"(m0"})"), Optional(Eq(1)));
  EXPECT_THAT(Sample(s, prefix + R"(m3"})"), Optional(Eq(2)));
  // 16 learned values, m0..m15; the next four share "other".
  EXPECT_THAT(Sample(s, prefix + R"(m15"})"), Optional(Eq(1)));
  EXPECT_THAT(Sample(s, prefix + R"(m16"})"), Eq(std::nullopt));
  EXPECT_THAT(Sample(s, prefix + R"(other"})"), Optional(Eq(4)));
}

TEST(MetricsTest, UnknownMethodGetsItsOwnSeriesWithAllCodes) {
  auto metrics = MakeMetrics();
  metrics->RequestFinished("ModelInfer", absl::StatusCode::kInternal,
                           absl::Milliseconds(1));
  const std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, R"(metalserve_requests_total{code="INTERNAL",method="ModelInfer"})"),
              Optional(Eq(1)));
  EXPECT_THAT(Sample(s, R"(metalserve_requests_total{code="OK",method="ModelInfer"})"),
              Optional(Eq(0)));
}

TEST(MetricsTest, MemoryFiguresAppearOnlyWhenReported) {
  auto metrics = MakeMetrics();
  MemoryFigures memory;
  memory.device = "cuda:0";
  memory.allocated_bytes = 1000;
  memory.limit_bytes = 4000;
  metrics->SetMemory(memory);
  std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, R"(metalserve_device_memory_bytes{device="cuda:0",kind="allocated"})"),
              Optional(Eq(1000)));
  EXPECT_THAT(Sample(s, R"(metalserve_device_memory_bytes{device="cuda:0",kind="limit"})"),
              Optional(Eq(4000)));
  EXPECT_THAT(Sample(s, R"(metalserve_device_memory_bytes{device="cuda:0",kind="reserved"})"),
              Eq(std::nullopt));
  EXPECT_THAT(Sample(s, "metalserve_process_resident_memory_bytes"),
              Eq(std::nullopt));

  memory.allocated_bytes = -1;
  memory.reserved_bytes = 2000;
  memory.resident_bytes = 5000;
  metrics->SetMemory(memory);
  s = metrics->Scrape();
  EXPECT_THAT(Sample(s, R"(metalserve_device_memory_bytes{device="cuda:0",kind="allocated"})"),
              Eq(std::nullopt));
  EXPECT_THAT(Sample(s, R"(metalserve_device_memory_bytes{device="cuda:0",kind="reserved"})"),
              Optional(Eq(2000)));
  EXPECT_THAT(Sample(s, "metalserve_process_resident_memory_bytes"),
              Optional(Eq(5000)));
}

TEST(MetricsTest, MemoryFiguresAreKeptPerDeviceAndForgottenOneDeviceAtATime) {
  auto metrics = MakeMetrics();
  metrics->SetMemory({.allocated_bytes = 100, .reserved_bytes = 200, .device = "cuda:0"});
  metrics->SetMemory({.allocated_bytes = 7, .device = "mps"});
  std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, R"(metalserve_device_memory_bytes{device="cuda:0",kind="reserved"})"),
              Optional(Eq(200)));
  EXPECT_THAT(Sample(s, R"(metalserve_device_memory_bytes{device="mps",kind="allocated"})"),
              Optional(Eq(7)));

  metrics->ForgetDeviceMemory("cuda:0");
  s = metrics->Scrape();
  EXPECT_THAT(Sample(s, R"(metalserve_device_memory_bytes{device="cuda:0",kind="reserved"})"),
              Eq(std::nullopt));
  EXPECT_THAT(Sample(s, R"(metalserve_device_memory_bytes{device="cuda:0",kind="allocated"})"),
              Eq(std::nullopt));
  EXPECT_THAT(Sample(s, R"(metalserve_device_memory_bytes{device="mps",kind="allocated"})"),
              Optional(Eq(7)));
  // Reported again: back.
  metrics->SetMemory({.reserved_bytes = 50, .device = "cuda:0"});
  EXPECT_THAT(Sample(metrics->Scrape(),
                     R"(metalserve_device_memory_bytes{device="cuda:0",kind="reserved"})"),
              Optional(Eq(50)));
  metrics->ForgetDeviceMemory("not-a-device");  // nothing to forget: no effect
}

TEST(MetricsTest, RecordsEachLoadPhaseByName) {
  auto metrics = MakeMetrics();
  EXPECT_THAT(Sample(metrics->Scrape(), R"(metalserve_model_load_phase_seconds{phase="verify"})"),
              Optional(Eq(0)));
  metrics->SetLoadPhase("read", absl::Milliseconds(300));
  metrics->SetLoadPhase("verify", absl::Milliseconds(2500));
  metrics->SetLoadPhase("warmup", absl::Milliseconds(750));
  const std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, R"(metalserve_model_load_phase_seconds{phase="read"})"),
              Optional(Eq(0.3)));
  EXPECT_THAT(Sample(s, R"(metalserve_model_load_phase_seconds{phase="verify"})"),
              Optional(Eq(2.5)));
  EXPECT_THAT(Sample(s, R"(metalserve_model_load_phase_seconds{phase="warmup"})"),
              Optional(Eq(0.75)));
}

// The device table is a model version's: two models measured on the same
// device keep their own figures, and a version's go when it is freed.
TEST(MetricsTest, RecordsMeasuredForwardPerModelDeviceAndBatchSize) {
  auto metrics = MakeMetrics();
  std::unique_ptr<ModelMetrics> a = metrics->ForModel("a", "1", 0);
  std::unique_ptr<ModelMetrics> b = metrics->ForModel("b", "3", 0);
  a->SetDeviceForward("cpu", 1, absl::Milliseconds(2));
  a->SetDeviceForward("mps", 32, absl::Milliseconds(8));
  b->SetDeviceForward("cpu", 1, absl::Milliseconds(5));
  a->SetDeviceForward("cpu", 1, absl::Milliseconds(3));  // measured again: replaced
  std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, R"(metalserve_device_forward_seconds{batch_size="1",device="cpu",model="a",version="1"})"),
              Optional(Eq(0.003)));
  EXPECT_THAT(Sample(s, R"(metalserve_device_forward_seconds{batch_size="32",device="mps",model="a",version="1"})"),
              Optional(Eq(0.008)));
  EXPECT_THAT(Sample(s, R"(metalserve_device_forward_seconds{batch_size="1",device="cpu",model="b",version="3"})"),
              Optional(Eq(0.005)));
  a.reset();
  s = metrics->Scrape();
  EXPECT_THAT(s, Not(HasSubstr(R"(model="a")")));
  EXPECT_THAT(Sample(s, R"(metalserve_device_forward_seconds{batch_size="1",device="cpu",model="b",version="3"})"),
              Optional(Eq(0.005)));
}

TEST(MetricsTest, RecordsCacheClearsModelTimesBuildInfoAndReadiness) {
  auto metrics = MakeMetrics();
  metrics->CacheCleared("watermark", absl::Milliseconds(5));
  metrics->CacheCleared("watermark", absl::Milliseconds(7));
  metrics->SetModelTimes(absl::Milliseconds(1500), absl::Milliseconds(250));
  metrics->SetBuildInfo("0.0.1", "1.13.0", "cpu", "old");
  metrics->SetBuildInfo("0.1.0", "1.13.0", "cpu", "tiny_cnn");
  EXPECT_THAT(Sample(metrics->Scrape(), "metalserve_ready"), Optional(Eq(0)));
  metrics->SetReady(true);
  const std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, R"(metalserve_cache_clears_total{trigger="watermark"})"),
              Optional(Eq(2)));
  EXPECT_THAT(Sample(s, R"(metalserve_cache_clear_duration_seconds_sum{trigger="watermark"})"),
              Optional(DoubleNear(0.012, 1e-12)));
  EXPECT_THAT(Sample(s, "metalserve_model_load_duration_seconds"),
              Optional(Eq(1.5)));
  EXPECT_THAT(Sample(s, "metalserve_model_warmup_duration_seconds"),
              Optional(Eq(0.25)));
  EXPECT_THAT(Sample(s, R"(metalserve_build_info{device="cpu",model="tiny_cnn",torch_version="1.13.0",version="0.1.0"})"),
              Optional(Eq(1)));
  EXPECT_THAT(s, Not(HasSubstr(R"(model="old")")));
  EXPECT_THAT(Sample(s, "metalserve_ready"), Optional(Eq(1)));
}

TEST(MetricsTest, ModelStatesFollowTheLatestSetAndLoadsCountByOutcome) {
  auto metrics = MakeMetrics();
  metrics->SetModelStates({{"a", "1", "READY"}, {"b", "1", "READY"}});
  metrics->SetModelStates({{"a", "1", "UNLOADING"}, {"a", "2", "READY"}});
  metrics->ModelLoadFinished("a", true);
  metrics->ModelLoadFinished("a", false);
  metrics->ModelLoadFinished("a", true);
  const std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, R"(metalserve_model_state{model="a",state="UNLOADING",version="1"})"),
              Optional(Eq(1)));
  EXPECT_THAT(Sample(s, R"(metalserve_model_state{model="a",state="READY",version="2"})"),
              Optional(Eq(1)));
  EXPECT_THAT(s, Not(HasSubstr(R"(model="b")")));  // forgotten: series removed
  EXPECT_THAT(s, Not(HasSubstr(R"(state="READY",version="1")")));
  EXPECT_THAT(Sample(s, R"(metalserve_model_loads_total{model="a",outcome="ok"})"),
              Optional(Eq(2)));
  EXPECT_THAT(Sample(s, R"(metalserve_model_loads_total{model="a",outcome="failed"})"),
              Optional(Eq(1)));
}

TEST(MetricsTest, MonitorSeparatesCallerErrorsAndExportsGauges) {
  MetricsOptions options = NoListener();
  options.monitor_window = 4;
  auto metrics = MakeMetrics(options);
  metrics->RequestFinished("Predict", absl::StatusCode::kOk,
                           absl::Milliseconds(10));
  metrics->RequestFinished("Predict", absl::StatusCode::kInvalidArgument,
                           absl::Milliseconds(20));
  metrics->RequestFinished("ModelInfer", absl::StatusCode::kDeadlineExceeded,
                           absl::Milliseconds(30));
  metrics->RequestFinished("GetModelMetadata", absl::StatusCode::kOk,
                           absl::Milliseconds(40));
  const MonitorSnapshot m = metrics->Monitor();
  EXPECT_EQ(m.count, 4);
  EXPECT_DOUBLE_EQ(m.error_ratio, 0.25);
  EXPECT_DOUBLE_EQ(m.caller_error_ratio, 0.25);
  const std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, "metalserve_monitor_latency_p50_seconds"),
              Optional(DoubleNear(0.020, 1e-12)));
  EXPECT_THAT(Sample(s, "metalserve_monitor_latency_p95_seconds"),
              Optional(DoubleNear(0.040, 1e-12)));
  EXPECT_THAT(Sample(s, "metalserve_monitor_latency_mean_seconds"),
              Optional(DoubleNear(0.025, 1e-12)));
  EXPECT_THAT(Sample(s, "metalserve_monitor_error_ratio"), Optional(Eq(0.25)));
  EXPECT_THAT(Sample(s, "metalserve_monitor_caller_error_ratio"),
              Optional(Eq(0.25)));
  EXPECT_THAT(Sample(s, "metalserve_monitor_window_requests"),
              Optional(Eq(4)));
}

TEST(MetricsTest, MonitorGaugesDecayToNoTrafficAfterMaxAge) {
  SimulatedClock clock;
  MetricsOptions options = NoListener();
  options.clock = &clock;
  options.monitor_max_age = absl::Seconds(60);
  auto metrics = MakeMetrics(options);
  metrics->RequestFinished("Predict", absl::StatusCode::kInternal,
                           absl::Milliseconds(30));
  EXPECT_THAT(Sample(metrics->Scrape(), "metalserve_monitor_error_ratio"),
              Optional(Eq(1)));

  clock.AdvanceTime(absl::Seconds(61));
  const std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, "metalserve_monitor_window_requests"), Optional(Eq(0)));
  EXPECT_THAT(Sample(s, "metalserve_monitor_error_ratio"), Optional(Eq(0)));
  EXPECT_THAT(Sample(s, "metalserve_monitor_latency_p95_seconds"),
              Optional(Eq(0)));
}

TEST(MetricsTest, ConcurrentRecordingLosesNoEvents) {
  auto metrics = MakeMetrics();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  std::unique_ptr<ModelMetrics> model = metrics->ForModel("m", "1", 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics, &model, t] {
      const char* reason = t == 3 ? "full" : "no_delay";
      for (int i = 0; i < kPerThread; ++i) {
        metrics->RequestStarted("Predict");
        model->QueueWait(absl::Microseconds(100));
        model->BatchCompleted(1, 0, reason, absl::Microseconds(100));
        model->RequestFinished("Predict", absl::StatusCode::kOk, absl::Microseconds(200));
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string s = metrics->Scrape();
  EXPECT_THAT(
      Sample(s, R"(metalserve_requests_total{code="OK",method="Predict"})"),
      Optional(Eq(kThreads * kPerThread)));
  EXPECT_THAT(Sample(s, "metalserve_queue_duration_seconds_count"),
              Optional(Eq(kThreads * kPerThread)));
  EXPECT_THAT(Sample(s, R"(metalserve_batches_total{reason="full"})"),
              Optional(Eq(kPerThread)));
  EXPECT_THAT(Sample(s, "metalserve_inflight_requests"), Optional(Eq(0)));
}

TEST(MetricsTest, CountsPriorityLevelsByCodeAndTimesThemBeyondTheCachedLevels) {
  auto metrics = MakeMetrics();
  metrics->PriorityRequestFinished(1, absl::StatusCode::kOk, absl::Milliseconds(1));
  metrics->PriorityRequestFinished(1, absl::StatusCode::kOk, absl::Milliseconds(3));
  metrics->PriorityRequestFinished(1, absl::StatusCode::kUnavailable, absl::Milliseconds(1));
  metrics->PriorityRequestFinished(2, absl::StatusCode::kDeadlineExceeded,
                                   absl::Milliseconds(1));
  // Levels past the ones whose series are kept at hand, and a code outside
  // gRPC's, take the family's own lookup: the same series either way.
  for (int i = 0; i < 3; ++i) {
    metrics->PriorityRequestFinished(40, absl::StatusCode::kOk, absl::Milliseconds(2));
  }
  metrics->PriorityRequestFinished(3, static_cast<absl::StatusCode>(99), absl::Milliseconds(1));
  const std::string s = metrics->Scrape();
  EXPECT_THAT(Sample(s, R"(metalserve_priority_requests_total{code="OK",priority="1"})"),
              Optional(Eq(2)));
  EXPECT_THAT(
      Sample(s, R"(metalserve_priority_requests_total{code="UNAVAILABLE",priority="1"})"),
      Optional(Eq(1)));
  EXPECT_THAT(
      Sample(s, R"(metalserve_priority_requests_total{code="DEADLINE_EXCEEDED",priority="2"})"),
      Optional(Eq(1)));
  EXPECT_THAT(Sample(s, R"(metalserve_priority_requests_total{code="OK",priority="40"})"),
              Optional(Eq(3)));
  EXPECT_THAT(Sample(s, R"(metalserve_priority_request_duration_seconds_count{priority="1"})"),
              Optional(Eq(3)));
  EXPECT_THAT(Sample(s, R"(metalserve_priority_request_duration_seconds_sum{priority="1"})"),
              Optional(DoubleNear(0.005, 1e-9)));
  EXPECT_THAT(Sample(s, R"(metalserve_priority_request_duration_seconds_count{priority="40"})"),
              Optional(Eq(3)));
  EXPECT_THAT(Sample(s, R"(metalserve_priority_request_duration_seconds_count{priority="3"})"),
              Optional(Eq(1)));
  // Only what happened: no series for a level or code never seen.
  EXPECT_THAT(s, Not(HasSubstr(R"(code="OK",priority="2")")));
  EXPECT_THAT(s, Not(HasSubstr(R"(priority="4")")));
}

TEST(MetricsTest, ConcurrentFirstUseOfAPriorityLevelLosesNoEvents) {
  auto metrics = MakeMetrics();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics] {
      for (int i = 0; i < kPerThread; ++i) {
        metrics->PriorityRequestFinished(1 + i % 3, absl::StatusCode::kOk,
                                         absl::Microseconds(100));
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string s = metrics->Scrape();
  double total = 0;
  for (int level = 1; level <= 3; ++level) {
    const std::optional<double> n = Sample(
        s, absl::StrCat(R"(metalserve_priority_requests_total{code="OK",priority=")", level,
                        R"("})"));
    ASSERT_TRUE(n.has_value()) << level;
    total += *n;
    EXPECT_THAT(Sample(s, absl::StrCat(
                              R"(metalserve_priority_request_duration_seconds_count{priority=")",
                              level, R"("})")),
                Optional(Eq(*n)));
  }
  EXPECT_EQ(total, kThreads * kPerThread);
}

TEST(MetricsTest, RejectsInvalidOptions) {
  MetricsOptions options = NoListener();
  options.monitor_window = 0;
  EXPECT_THAT(Metrics::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("monitor_window")));
  options = NoListener();
  options.monitor_max_age = absl::ZeroDuration();
  EXPECT_THAT(Metrics::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("monitor_max_age must be positive, got 0")));
  options = NoListener();
  options.listen_address = "localhost";
  EXPECT_THAT(Metrics::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"localhost\"")));
  options.listen_address = "127.0.0.1:99999";
  EXPECT_THAT(Metrics::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(MetricsTest, EmptyListenAddressStartsNoListenerButScrapes) {
  auto metrics = MakeMetrics();
  EXPECT_EQ(metrics->port(), 0);
  metrics->RequestFinished("Predict", absl::StatusCode::kOk,
                           absl::Milliseconds(1));
  // The family exists at zero from the start: the one request must count.
  EXPECT_THAT(
      Sample(metrics->Scrape(), R"(metalserve_requests_total{code="OK",method="Predict"})"),
      Optional(Eq(1)));
}

// A loopback TCP socket, closed on destruction.
class Socket {
 public:
  Socket() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    // Bounds every read and write of the HTTP test.
    timeval timeout{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  }
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

  static sockaddr_in Loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return addr;
  }

 private:
  const int fd_;
};

TEST(MetricsTest, PortAlreadyListenedOnIsUnavailableNamingTheAddress) {
  Socket taken;
  ASSERT_GE(taken.fd(), 0);
  sockaddr_in addr = Socket::Loopback(0);
  ASSERT_EQ(bind(taken.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0);
  ASSERT_EQ(listen(taken.fd(), 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(taken.fd(), reinterpret_cast<sockaddr*>(&addr), &len),
            0);
  const std::string address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));

  MetricsOptions options = NoListener();
  options.listen_address = address;
  EXPECT_THAT(Metrics::Create(options),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(address)));
}

// GET `path` from 127.0.0.1:`port` with HTTP/1.0; the whole response.
std::string HttpGet(int port, absl::string_view path) {
  Socket s;
  sockaddr_in addr = Socket::Loopback(port);
  if (connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return "connect failed";
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (send(s.fd(), request.data(), request.size(), 0) !=
      static_cast<ssize_t>(request.size())) {
    return "send failed";
  }
  // Reads until the body is complete: the server may keep the connection
  // open after it, so end-of-stream alone would wait for its idle timeout.
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = recv(s.fd(), buffer, sizeof(buffer), 0)) > 0) {
    response.append(buffer, static_cast<size_t>(n));
    const size_t header_end = response.find("\r\n\r\n");
    if (header_end == std::string::npos) continue;
    const size_t length_at = response.find("Content-Length: ");
    size_t length = 0;
    if (length_at == std::string::npos || length_at > header_end ||
        !absl::SimpleAtoi(
            absl::string_view(response).substr(
                length_at + 16, response.find("\r\n", length_at) -
                                    (length_at + 16)),
            &length)) {
      continue;
    }
    if (response.size() >= header_end + 4 + length) break;
  }
  return response;
}

TEST(MetricsTest, ServesEveryFamilyOverHttpOnAnEphemeralPort) {
  MetricsOptions options = NoListener();
  options.listen_address = "127.0.0.1:0";
  auto metrics = MakeMetrics(options);
  ASSERT_GT(metrics->port(), 0);
  metrics->RequestFinished("Predict", absl::StatusCode::kOk,
                           absl::Milliseconds(3));
  std::unique_ptr<ModelMetrics> model = metrics->ForModel("m", "1", 8);
  const std::string response = HttpGet(metrics->port(), "/metrics");
  EXPECT_THAT(response, HasSubstr(" 200 "));
  EXPECT_THAT(response,
              HasSubstr(R"(metalserve_requests_total{code="OK",method="Predict"} 1)"));
  for (absl::string_view family :
       {"metalserve_request_duration_seconds", "metalserve_queue_depth_rows",
        "metalserve_batches_total", "metalserve_monitor_error_ratio",
        "metalserve_monitor_latency_p95_seconds", "metalserve_ready"}) {
    EXPECT_THAT(response, HasSubstr(absl::StrCat("# TYPE ", family)));
  }
}

// Counts the monitor's periodic log callbacks; lets a test wait for them.
class LogCounter {
 public:
  void Add(const MonitorSnapshot& s) {
    absl::MutexLock lock(&mu_);
    ++calls_;
    last_ = s;
  }
  // Blocks until at least `n` callbacks happened; returns the last figures.
  MonitorSnapshot WaitFor(int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return calls_ >= n;
    };
    mu_.Await(absl::Condition(&reached));
    return last_;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  MonitorSnapshot last_ ABSL_GUARDED_BY(mu_);
};

TEST(MetricsTest, LogsTheMonitorOncePerIntervalOfClockTime) {
  SimulatedClock clock;
  LogCounter logs;
  MetricsOptions options = NoListener();
  options.clock = &clock;
  options.monitor_log_interval = absl::Seconds(60);
  options.on_monitor_log = [&logs](const MonitorSnapshot& s) { logs.Add(s); };
  auto metrics = MakeMetrics(options);
  metrics->RequestFinished("Predict", absl::StatusCode::kOk,
                           absl::Milliseconds(10));
  metrics->RequestFinished("Predict", absl::StatusCode::kInternal,
                           absl::Milliseconds(30));

  clock.BlockUntilWaiters(1);
  clock.AdvanceTime(absl::Seconds(59));
  clock.BlockUntilWaiters(1);  // waiting again at t=59s, without logging
  EXPECT_EQ(logs.calls(), 0);

  clock.AdvanceTime(absl::Seconds(1));
  const MonitorSnapshot first = logs.WaitFor(1);
  EXPECT_EQ(first.count, 2);
  EXPECT_DOUBLE_EQ(first.error_ratio, 0.5);

  clock.BlockUntilWaiters(1);
  clock.AdvanceTime(absl::Seconds(59));
  clock.BlockUntilWaiters(1);
  EXPECT_EQ(logs.calls(), 1);
  clock.AdvanceTime(absl::Seconds(1));
  logs.WaitFor(2);
}

TEST(MetricsTest, LogsAnIdleStretchOnceThenResumesWithTraffic) {
  SimulatedClock clock;
  LogCounter logs;
  MetricsOptions options = NoListener();
  options.clock = &clock;
  options.monitor_log_interval = absl::Seconds(60);
  options.monitor_max_age = absl::Seconds(60);
  options.on_monitor_log = [&logs](const MonitorSnapshot& s) { logs.Add(s); };
  auto metrics = MakeMetrics(options);
  metrics->RequestFinished("Predict", absl::StatusCode::kUnavailable,
                           absl::Milliseconds(10));
  clock.BlockUntilWaiters(1);
  clock.AdvanceTime(absl::Seconds(60));
  EXPECT_DOUBLE_EQ(logs.WaitFor(1).error_ratio, 1);

  // t=120s: the request is 120 s old; one "no requests" line.
  clock.BlockUntilWaiters(1);
  clock.AdvanceTime(absl::Seconds(60));
  const MonitorSnapshot idle = logs.WaitFor(2);
  EXPECT_EQ(idle.count, 0);
  EXPECT_EQ(idle.error_ratio, 0);

  // t=180s, 240s: still idle, nothing more logged.
  for (int i = 0; i < 2; ++i) {
    clock.BlockUntilWaiters(1);
    clock.AdvanceTime(absl::Seconds(60));
  }
  clock.BlockUntilWaiters(1);  // waiting for t=300s: the 240s turn is done
  EXPECT_EQ(logs.calls(), 2);

  metrics->RequestFinished("Predict", absl::StatusCode::kOk,
                           absl::Milliseconds(10));
  clock.AdvanceTime(absl::Seconds(60));
  const MonitorSnapshot busy = logs.WaitFor(3);
  EXPECT_EQ(busy.count, 1);
  EXPECT_EQ(busy.error_ratio, 0);
}

TEST(MetricsTest, DestructionStopsTheLogThreadWithoutClockTime) {
  SimulatedClock clock;
  MetricsOptions options = NoListener();
  options.clock = &clock;
  options.monitor_log_interval = absl::Seconds(60);
  auto metrics = MakeMetrics(options);
  clock.BlockUntilWaiters(1);
  metrics.reset();  // joins; would hang if the thread waited for the clock
  EXPECT_EQ(clock.waiters(), 0);
}

}  // namespace
}  // namespace metalserve
