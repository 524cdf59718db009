// A request of more rows than a batch holds: admitted by the BatchQueue as
// pieces (InferTask::Split), run by the BatchExecutor on a FakeRunner
// (output = 2 * input) and answered once. Time is simulated: every Poll is
// given its `now`.
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/batcher/batch_queue.h"
#include "server/service/batch_executor.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kWidth = FakeRunner::kWidth;

struct Answer {
  int answers = 0;
  absl::Status status = absl::UnknownError("not answered");
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Row r holds the value r in every column; `poison_row` holds FakeRunner's
// poison, which makes the model raise.
class RowsTask final : public InferTask {
 public:
  RowsTask(int64_t rows, std::shared_ptr<Answer> answer, absl::Time deadline,
           int64_t poison_row = -1)
      : rows_(rows), answer_(std::move(answer)), deadline_(deadline) {
    std::vector<float> v(static_cast<size_t>(rows * kWidth));
    for (int64_t i = 0; i < rows * kWidth; ++i) {
      v[i] = i / kWidth == poison_row ? FakeRunner::kPoison : static_cast<float>(i / kWidth);
    }
    bytes_.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    inputs_.push_back({DType::kFloat32, {rows, kWidth}, bytes_});
    key_ = BatchKeyOf(inputs_);
  }
  int64_t rows() const override { return rows_; }
  absl::string_view batch_key() const override { return key_; }
  absl::Time deadline() const override { return deadline_; }
  const std::vector<InputView>& inputs() const override { return inputs_; }
  void Abort(const absl::Status& status) override {
    ++answer_->answers;
    answer_->status = status;
  }
  void Finish(absl::StatusOr<std::vector<Tensor>> out, const RunStats&) override {
    ++answer_->answers;
    answer_->status = out.status();
    if (!out.ok()) return;
    const Tensor& t = out->at(0);
    answer_->shape = t.shape;
    answer_->values.resize(t.data.size() / sizeof(float));
    std::memcpy(answer_->values.data(), t.data.data(), t.data.size());
  }

 private:
  const int64_t rows_;
  std::shared_ptr<Answer> answer_;
  const absl::Time deadline_;
  std::string bytes_;
  std::vector<InputView> inputs_;
  std::string key_;
};

class SplitTaskTest : public ::testing::Test {
 protected:
  SplitTaskTest() {
    options_.max_batch_size = 4;
    options_.max_queue_delay = absl::ZeroDuration();
    options_.max_queue_size = 64;
    options_.max_request_rows = 32;
  }
  std::shared_ptr<Answer> Submit(BatchQueue& q, int64_t rows,
                                 absl::Time deadline = absl::InfiniteFuture(),
                                 int64_t poison_row = -1) {
    auto answer = std::make_shared<Answer>();
    std::unique_ptr<BatchTask> t =
        std::make_unique<RowsTask>(rows, answer, deadline, poison_row);
    EXPECT_THAT(q.Admit(&t, clock_.TimeNow()), IsOk());
    return answer;
  }
  // Polls at the clock's time and runs the batch, if any; true when one ran.
  bool RunNext(BatchQueue& q) {
    BatchQueue::PollResult r = q.Poll(clock_.TimeNow(), false);
    for (auto& t : r.expired) t->Abort(absl::DeadlineExceededError("deadline passed in queue"));
    for (auto& t : r.cancelled) t->Abort(absl::CancelledError("cancelled"));
    if (!r.batch.has_value()) return false;
    BatchExecutor executor(&runner_, options_, 1, nullptr, &clock_);
    executor.Process(std::move(*r.batch));
    return true;
  }

  FakeRunner runner_;
  SimulatedClock clock_;
  BatcherOptions options_;
};

TEST_F(SplitTaskTest, RequestOfThreeAndAHalfBatchesIsReassembledInRowOrder) {
  BatchQueue q(options_);
  auto answer = Submit(q, 14);
  EXPECT_EQ(q.queued_rows(), 14);
  while (RunNext(q)) {
  }
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(4, 4, 4, 2));
  EXPECT_EQ(answer->answers, 1);
  ASSERT_THAT(answer->status, IsOk());
  EXPECT_THAT(answer->shape, ElementsAre(14, kWidth));
  for (int64_t i = 0; i < 14 * kWidth; ++i) {
    ASSERT_EQ(answer->values[i], 2.0f * static_cast<float>(i / kWidth)) << "value " << i;
  }
}

TEST_F(SplitTaskTest, LastPieceSharesABatchWithTheNextRequest) {
  BatchQueue q(options_);
  auto big = Submit(q, 6);
  auto small = Submit(q, 2);
  while (RunNext(q)) {
  }
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(4, 4));
  EXPECT_THAT(big->status, IsOk());
  EXPECT_THAT(small->status, IsOk());
  EXPECT_THAT(big->shape, ElementsAre(6, kWidth));
}

TEST_F(SplitTaskTest, FirstPieceFillsTheRoomLeftInTheBatchItJoins) {
  BatchQueue q(options_);
  auto small = Submit(q, 2);
  auto big = Submit(q, 14);  // pieces of 2, 4, 4 and 4 rows
  while (RunNext(q)) {
  }
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(4, 4, 4, 4));
  EXPECT_THAT(small->status, IsOk());
  ASSERT_THAT(big->status, IsOk());
  EXPECT_EQ(big->answers, 1);
  for (int64_t i = 0; i < 14 * kWidth; ++i) {
    ASSERT_EQ(big->values[i], 2.0f * static_cast<float>(i / kWidth)) << "value " << i;
  }
}

TEST_F(SplitTaskTest, FailingPieceFailsTheRequestOnceAndTheRestAreDropped) {
  BatchQueue q(options_);
  auto answer = Submit(q, 12, absl::InfiniteFuture(), /*poison_row=*/5);
  while (RunNext(q)) {
  }
  EXPECT_EQ(answer->answers, 1);
  EXPECT_THAT(answer->status, StatusIs(absl::StatusCode::kInternal, HasSubstr("poison")));
  // The first piece ran, the second failed, the third never reached the model.
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(4, 4));
}

TEST_F(SplitTaskTest, DeadlinePassingBetweenPiecesFailsTheRequestOnce) {
  BatchQueue q(options_);
  auto answer = Submit(q, 12, clock_.TimeNow() + absl::Milliseconds(5));
  ASSERT_TRUE(RunNext(q));
  clock_.AdvanceTime(absl::Milliseconds(5));
  while (RunNext(q)) {
  }
  EXPECT_EQ(answer->answers, 1);
  EXPECT_THAT(answer->status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(4));
  EXPECT_TRUE(q.empty());
}

TEST_F(SplitTaskTest, RequestAboveMaxRequestRowsIsRefusedNamingTheBound) {
  BatchQueue q(options_);
  auto answer = std::make_shared<Answer>();
  std::unique_ptr<BatchTask> t = std::make_unique<RowsTask>(33, answer, absl::InfiniteFuture());
  EXPECT_THAT(q.Admit(&t, clock_.TimeNow()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("33 rows (batch dimension), more than max_request_rows 32")));
  EXPECT_NE(t, nullptr) << "a refused task stays with the caller";
  EXPECT_EQ(answer->answers, 0);
}

TEST_F(SplitTaskTest, SplitRequestIsRefusedWholeWhenTheQueueLacksRoom) {
  options_.max_queue_size = 16;
  options_.max_request_rows = 16;
  BatchQueue q(options_);
  Submit(q, 8);
  auto answer = std::make_shared<Answer>();
  std::unique_ptr<BatchTask> t = std::make_unique<RowsTask>(12, answer, absl::InfiniteFuture());
  EXPECT_THAT(q.Admit(&t, clock_.TimeNow()), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_NE(t, nullptr);
  EXPECT_EQ(q.queued_rows(), 8);
}

}  // namespace
}  // namespace metalserve
