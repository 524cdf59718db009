// AccessLog: the writer alone (format, sampling, drop-on-full without
// blocking, file output) and the server's hook over loopback gRPC with the
// fake runner, reading the lines back.
#include "server/service/access_log.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace metalserve {
namespace {

using ::metalserve::testing::MakeRequest;
using ::metalserve::testing::NativeFakeServerTest;
using ::metalserve::testing::StatusIs;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// Collects what the writer hands to its sink, line by line.
class Lines {
 public:
  std::function<void(absl::string_view)> Sink() {
    return [this](absl::string_view text) {
      absl::MutexLock l(&mu_);
      for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
        lines_.emplace_back(line);
      }
    };
  }
  std::vector<std::string> Get() const {
    absl::MutexLock l(&mu_);
    return lines_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
};

AccessLogEntry Entry() {
  AccessLogEntry e;
  e.time = absl::FromUnixMicros(int64_t{1764547200} * 1000000 + 123456);
  e.peer = "ipv4:127.0.0.1:5555";
  e.method = "Predict";
  e.model = "resnet18";
  e.version = "1";
  e.rows = 3;
  e.code = absl::StatusCode::kDeadlineExceeded;
  e.queue = absl::Microseconds(12);
  e.compute = absl::Microseconds(340);
  e.total = absl::Microseconds(1234);
  return e;
}

TEST(AccessLogTest, FormatsOneLineOfFieldsWithRfc3339UtcTime) {
  EXPECT_EQ(AccessLog::FormatLine(Entry()),
            "2025-12-01T00:00:00.123456Z peer=ipv4:127.0.0.1:5555 method=Predict "
            "model=resnet18 version=1 rows=3 code=DEADLINE_EXCEEDED queue_us=12 "
            "compute_us=340 total_us=1234");
  AccessLogEntry odd = Entry();
  odd.model = "my model\n";
  odd.version = "";
  EXPECT_THAT(AccessLog::FormatLine(odd), HasSubstr(" model=my_model_ version=- "));
}

TEST(AccessLogTest, SampleKeepsAnExactEvenlySpreadFraction) {
  for (const auto& [sample, want] :
       std::vector<std::pair<double, size_t>>{{0.25, 25}, {0.0, 0}, {1.0, 100}}) {
    Lines lines;
    {
      auto log = AccessLog::Create({.sample = sample, .sink = lines.Sink()});
      ASSERT_TRUE(log.ok()) << log.status();
      for (int i = 0; i < 100; ++i) (*log)->Log(Entry());
    }  // the destructor writes every queued line
    EXPECT_THAT(lines.Get(), SizeIs(want)) << "sample " << sample;
  }
}

TEST(AccessLogTest, DropsAndCountsLinesWhenTheQueueIsFullWithoutBlocking) {
  // The sink holds the writer on its first batch, so nothing drains: 4 lines
  // fit the queue and the next 6 are dropped, each Log() returning at once
  // (a blocking Log() would hang here, since the writer never frees room).
  absl::Notification writing, release;
  int64_t reported = 0;  // on_dropped runs on this thread
  auto log = AccessLog::Create(
      {.sample = 1.0,
       .max_queued_lines = 4,
       .on_dropped = [&reported](int64_t n) { reported += n; },
       .sink = [&](absl::string_view) {  // only the writer thread calls it
         if (!writing.HasBeenNotified()) writing.Notify();
         release.WaitForNotification();
       }});
  ASSERT_TRUE(log.ok()) << log.status();
  (*log)->Log(Entry());
  writing.WaitForNotification();  // the writer took line 1 and is stuck
  for (int i = 0; i < 10; ++i) (*log)->Log(Entry());
  EXPECT_EQ((*log)->dropped(), 6);
  EXPECT_EQ(reported, 6);
  release.Notify();
  log->reset();  // writes the 4 queued lines
}

TEST(AccessLogTest, AppendsToAFileAndFlushesBeforeTheDestructorReturns) {
  const ::metalserve::testing::TempDir dir("access_log_test_");
  const std::string path = dir.File("access.log");
  {
    auto log = AccessLog::Create({.path = path});
    ASSERT_TRUE(log.ok()) << log.status();
    for (int i = 0; i < 3; ++i) (*log)->Log(Entry());
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<std::string> lines =
      absl::StrSplit(text.str(), '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(3));
  EXPECT_EQ(lines[0], AccessLog::FormatLine(Entry()));
}

TEST(AccessLogTest, RejectsBadOptionsNamingTheValue) {
  EXPECT_THAT(AccessLog::Create({.path = "-", .sample = 1.5}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1.5")));
  EXPECT_THAT(AccessLog::Create({.path = "-", .max_queued_lines = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_queued_lines 0")));
  EXPECT_THAT(AccessLog::Create({.path = "/nonexistent-dir/access.log"}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent-dir/access.log")));
}

class AccessLogServiceTest : public NativeFakeServerTest {};

// A KServe ModelInfer of `rows` zero rows for the fake runner.
inference::ModelInferRequest InferRequest(int64_t rows) {
  inference::ModelInferRequest req;
  auto* t = req.add_inputs();
  t->set_name("input");
  t->set_datatype("FP32");
  t->add_shape(rows);
  t->add_shape(FakeRunner::kWidth);
  req.add_raw_input_contents(std::string(rows * FakeRunner::kWidth * 4, '\0'));
  return req;
}

TEST_F(AccessLogServiceTest, LogsEveryCallWithPeerModelRowsCodeAndTimes) {
  Lines lines;
  auto log = AccessLog::Create({.sink = lines.Sink()});
  ASSERT_TRUE(log.ok()) << log.status();
  ServerOptions so = metalserve::testing::LoopbackServerOptions();
  so.access_log = log->get();
  StartServerAndConnect(so);

  v1::PredictResponse resp;
  ASSERT_TRUE(Call(MakeRequest(3, 1.0f), &resp).ok());
  v1::PredictRequest bad = MakeRequest(2, 1.0f);
  bad.mutable_inputs(0)->set_name("wrong");
  EXPECT_EQ(Call(bad, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto kserve = inference::GRPCInferenceService::NewStub(channel_);
  for (const char* version : {"", "7"}) {  // the fake model is version 1
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    inference::ModelInferRequest req = InferRequest(2);
    req.set_model_version(version);
    inference::ModelInferResponse kresp;
    EXPECT_EQ(kserve->ModelInfer(&ctx, req, &kresp).error_code(),
              *version ? grpc::StatusCode::NOT_FOUND : grpc::StatusCode::OK);
  }
  server_->Shutdown(absl::Seconds(5));  // every call finished and logged
  log->reset();                          // every line written

  const std::vector<std::string> got = lines.Get();
  ASSERT_THAT(got, SizeIs(4));
  // POSIX extended regular expressions (gtest's on Linux): no \d or \S.
  const std::string time =
      "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[.][0-9]{6}Z ";
  EXPECT_THAT(got[0], ContainsRegex(time + "peer=ipv[46]:[^ ]+ method=Predict model=fake "
                                           "version=1 rows=3 code=OK queue_us=[0-9]+ "
                                           "compute_us=[0-9]+ total_us=[0-9]+$"));
  EXPECT_THAT(got[1], ContainsRegex(time + "peer=ipv[46]:[^ ]+ method=Predict model=fake "
                                           "version=1 rows=0 code=INVALID_ARGUMENT "
                                           "queue_us=0 compute_us=0 total_us=[0-9]+$"));
  EXPECT_THAT(got[2], ContainsRegex(time + "peer=ipv[46]:[^ ]+ method=ModelInfer model=fake "
                                           "version=1 rows=2 code=OK queue_us=[0-9]+ "
                                           "compute_us=[0-9]+ total_us=[0-9]+$"));
  EXPECT_THAT(got[3], ContainsRegex(" method=ModelInfer model=fake version=1 rows=0 "
                                    "code=NOT_FOUND queue_us=0 compute_us=0 "));
}

}  // namespace
}  // namespace metalserve
