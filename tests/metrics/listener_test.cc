// The /metrics listener against idle, half-sent and silent clients, over
// real loopback TCP.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/metrics.h"
#include "tests/metrics/http_client.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Well below the 30 s a civetweb worker waits for a request by default:
// a scrape held behind idle connections would miss it by far.
constexpr absl::Duration kScrapeBound = absl::Seconds(5);

std::unique_ptr<Metrics> ListeningMetrics(
    absl::Duration idle_timeout = absl::Seconds(10)) {
  MetricsOptions options;
  options.listen_address = "127.0.0.1:0";
  options.monitor_log_interval = absl::ZeroDuration();
  options.listen_idle_timeout = idle_timeout;
  auto metrics = Metrics::Create(options);
  EXPECT_THAT(metrics, IsOk());
  return metrics.ok() ? *std::move(metrics) : nullptr;
}

TEST(MetricsListenerTest, ScrapesAnsweredWhileIdleAndHalfSentClientsHold) {
  auto metrics = ListeningMetrics();
  ASSERT_NE(metrics, nullptr);
  metrics->SetReady(true);
  // More idle connections than prometheus-cpp's exposer had threads (2),
  // and one that stops in the middle of its request line.
  std::vector<std::unique_ptr<LoopbackConnection>> idle;
  for (int i = 0; i < 8; ++i) {
    idle.push_back(
        std::make_unique<LoopbackConnection>(metrics->port(), kScrapeBound));
    ASSERT_TRUE(idle.back()->connected());
  }
  LoopbackConnection half(metrics->port(), kScrapeBound);
  ASSERT_TRUE(half.connected());
  ASSERT_TRUE(half.Send("GET /metr"));

  for (int scrape = 0; scrape < 3; ++scrape) {
    const absl::Time start = absl::Now();
    const std::string response =
        HttpRequest(metrics->port(), "GET", "/metrics", kScrapeBound);
    const absl::Duration took = absl::Now() - start;
    EXPECT_THAT(response, StartsWith("HTTP/1.1 200"))
        << "scrape " << scrape << " after " << took;
    EXPECT_THAT(response, HasSubstr("\nmetalserve_ready 1"));
    EXPECT_LT(took, kScrapeBound);
  }
}

TEST(MetricsListenerTest, ClosesAConnectionSilentForTheIdleTimeout) {
  auto metrics = ListeningMetrics(absl::Seconds(1));
  ASSERT_NE(metrics, nullptr);
  LoopbackConnection silent(metrics->port(), absl::Seconds(10));
  ASSERT_TRUE(silent.connected());
  const absl::Time start = absl::Now();
  EXPECT_EQ(silent.ReadSome(), 0) << "not closed by the server";
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(MetricsListenerTest, OtherPathsAndMethodsAreRefused) {
  auto metrics = ListeningMetrics();
  ASSERT_NE(metrics, nullptr);
  EXPECT_THAT(HttpRequest(metrics->port(), "GET", "/"),
              StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(HttpRequest(metrics->port(), "POST", "/metrics"),
              StartsWith("HTTP/1.1 405"));
  const std::string head = HttpRequest(metrics->port(), "HEAD", "/metrics");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(head, HasSubstr("text/plain; version=0.0.4"));
}

TEST(MetricsListenerTest, InvalidListenerOptionsAreRejectedByName) {
  MetricsOptions options;
  options.listen_address = "127.0.0.1:0";
  options.listen_idle_timeout = absl::ZeroDuration();
  EXPECT_THAT(Metrics::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("idle_timeout")));
  options.listen_idle_timeout = absl::Seconds(1);
  options.listen_max_connections = 0;
  EXPECT_THAT(Metrics::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("max_connections")));
}

}  // namespace
}  // namespace metalserve
