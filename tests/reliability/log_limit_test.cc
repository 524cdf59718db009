// The executor's "retrying in halves" WARNING is rate-limited (issue 17: a
// poisoned stream of requests logged one line per retried half, 12,336
// lines in 15 s). Driven with a simulated clock: the executor is called
// directly with tasks over the fake runner; log lines are counted through a
// glog sink.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/batch_executor.h"
#include "server/service/log_limiter.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/simulated_clock.h"

namespace metalserve {
namespace {

using ::testing::HasSubstr;

// Collects the WARNING lines glog writes while it is alive.
class WarningSink final : public google::LogSink {
 public:
  WarningSink() { google::AddLogSink(this); }
  ~WarningSink() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char*, const char*, int,
            const struct ::tm*, const char* message, size_t len) override {
    if (severity != google::GLOG_WARNING) return;
    absl::MutexLock l(&mu_);
    lines_.emplace_back(message, len);
  }
  std::vector<std::string> lines() {
    absl::MutexLock l(&mu_);
    return lines_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> lines_;
};

// One row of FakeRunner::kWidth floats, the first `first`; records its answer.
class RowTask final : public InferTask {
 public:
  explicit RowTask(float first, absl::StatusCode* result)
      : values_(FakeRunner::kWidth, 1.0f), result_(result) {
    values_[0] = first;
    inputs_.push_back({DType::kFloat32, {1, FakeRunner::kWidth},
                       absl::string_view(reinterpret_cast<const char*>(values_.data()),
                                         values_.size() * sizeof(float))});
    key_ = BatchKeyOf(inputs_);
  }
  int64_t rows() const override { return 1; }
  absl::string_view batch_key() const override { return key_; }
  void Abort(const absl::Status& s) override { *result_ = s.code(); }
  const std::vector<InputView>& inputs() const override { return inputs_; }
  void Finish(absl::StatusOr<std::vector<Tensor>> out, const RunStats&) override {
    *result_ = out.status().code();
  }

 private:
  std::vector<float> values_;
  std::vector<InputView> inputs_;
  std::string key_;
  absl::StatusCode* const result_;
};

// A batch of `n` one-row tasks, the one at `poisoned` carrying the poison row.
Batch PoisonedBatch(int n, int poisoned, std::vector<absl::StatusCode>* results) {
  results->assign(n, absl::StatusCode::kUnknown);
  Batch b;
  for (int i = 0; i < n; ++i) {
    const float first = i == poisoned ? FakeRunner::kPoison : 1.0f;
    b.tasks.push_back(std::make_unique<RowTask>(first, &(*results)[i]));
  }
  b.rows = b.padded_rows = n;
  return b;
}

TEST(LogLimiterTest, AllowsOneLineAnIntervalAndCountsTheRest) {
  SimulatedClock clock;
  LogLimiter limiter(&clock, absl::Seconds(1));
  int64_t dropped = -1;
  EXPECT_TRUE(limiter.Allow(&dropped));
  EXPECT_EQ(dropped, 0);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.Allow(&dropped));
  clock.AdvanceTime(absl::Milliseconds(999));
  EXPECT_FALSE(limiter.Allow(&dropped));
  clock.AdvanceTime(absl::Milliseconds(1));
  EXPECT_TRUE(limiter.Allow(&dropped));
  EXPECT_EQ(dropped, 6);
}

TEST(PoisonedBatchLogTest, RetriesInHalvesLogOneWarningASecondWithTheSuppressedCount) {
  SimulatedClock clock;
  FakeRunner runner;
  BatcherOptions batching;
  batching.max_batch_size = 16;
  BatchExecutor executor(&runner, batching, 1, nullptr, &clock);
  WarningSink sink;
  std::vector<absl::StatusCode> results;
  // 16 -> 8 -> 4 -> 2 -> 1: four failed groups, four retries per batch.
  for (int round = 0; round < 3; ++round) {
    executor.Process(PoisonedBatch(16, 5, &results));
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(results[i], i == 5 ? absl::StatusCode::kInternal : absl::StatusCode::kOk)
          << "round " << round << " task " << i;
    }
  }
  ASSERT_EQ(sink.lines().size(), 1u) << "12 retries within one second";
  EXPECT_THAT(sink.lines()[0], HasSubstr("retrying in halves"));

  clock.AdvanceTime(absl::Seconds(1));
  executor.Process(PoisonedBatch(16, 5, &results));
  ASSERT_EQ(sink.lines().size(), 2u);
  EXPECT_THAT(sink.lines()[1], HasSubstr("(11 similar lines suppressed since the last)"));
}

}  // namespace
}  // namespace metalserve
