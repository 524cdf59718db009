// The /metrics listener in a process whose libraries carry more static TLS
// than fits in a 100 KiB thread stack (see big_tls.cc): prometheus-cpp's
// exposer failed here with "null context when constructing CivetServer".

#include <dlfcn.h>

#include <cstddef>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/metrics.h"
#include "tests/metrics/http_client.h"
#include "tests/testing/status_matchers.h"

extern "C" char* MetalserveTestBigTls();

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// glibc's own figure for the static TLS block of every thread; 0 when the C
// library does not say (not glibc).
size_t StaticTlsBytes() {
  using InfoFn = void (*)(size_t*, size_t*);
  auto info = reinterpret_cast<InfoFn>(
      dlsym(RTLD_DEFAULT, "_dl_get_tls_static_info"));
  size_t size = 0, align = 0;
  if (info != nullptr) info(&size, &align);
  return size;
}

TEST(MetricsLargeTlsTest, ServesMetricsWhenStaticTlsExceeds100KiB) {
  MetalserveTestBigTls()[0] = 1;  // the library is loaded and used
  const size_t tls = StaticTlsBytes();
  if (tls == 0) GTEST_SKIP() << "the C library does not report static TLS";
  ASSERT_GT(tls, 100u * 1024) << "the precondition of this test";

  MetricsOptions options;
  options.listen_address = "127.0.0.1:0";
  options.monitor_log_interval = absl::ZeroDuration();
  auto metrics = Metrics::Create(options);
  ASSERT_THAT(metrics, IsOk());
  (*metrics)->SetReady(true);
  const std::string response =
      HttpRequest((*metrics)->port(), "GET", "/metrics");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(response, HasSubstr("\nmetalserve_ready 1"));
}

}  // namespace
}  // namespace metalserve
