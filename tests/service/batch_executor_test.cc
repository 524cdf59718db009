// BatchExecutor without gRPC: batches of in-memory tasks run on a FakeRunner
// (output = 2 * input), with a simulated clock. The runner's batch log shows
// what ran; each task records how it was answered.
#include "server/service/batch_executor.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

// How a task was answered. Outlives the task, which the executor frees.
struct Answer {
  std::optional<absl::Status> aborted;
  std::optional<absl::StatusOr<std::vector<Tensor>>> finished;
  RunStats stats;

  bool answered() const { return aborted.has_value() || finished.has_value(); }
  absl::Status status() const {
    if (aborted.has_value()) return *aborted;
    return finished.has_value() ? finished->status()
                                : absl::UnknownError("not answered");
  }
  // Every value of the single output, row-major.
  std::vector<float> values() const {
    const Tensor& t = finished->value().at(0);
    std::vector<float> v(t.data.size() / sizeof(float));
    std::memcpy(v.data(), t.data.data(), t.data.size());
    return v;
  }
  const std::vector<int64_t>& shape() const { return finished->value().at(0).shape; }
};

struct TaskSpec {
  int64_t rows = 1;
  float value = 1.0f;
  bool cancelled = false;
  absl::Time deadline = absl::InfiniteFuture();
};

// A task of `rows` rows whose every value is `value`.
class TestTask final : public InferTask {
 public:
  TestTask(const TaskSpec& spec, std::shared_ptr<Answer> answer)
      : spec_(spec), answer_(std::move(answer)) {
    std::vector<float> v(static_cast<size_t>(spec.rows * kWidth), spec.value);
    bytes_.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    inputs_.push_back({DType::kFloat32, {spec.rows, kWidth}, bytes_});
    key_ = BatchKeyOf(inputs_);
  }

  int64_t rows() const override { return spec_.rows; }
  absl::string_view batch_key() const override { return key_; }
  absl::Time deadline() const override { return spec_.deadline; }
  bool IsCancelled() const override { return spec_.cancelled; }
  const std::vector<InputView>& inputs() const override { return inputs_; }

  void Abort(const absl::Status& status) override {
    ASSERT_FALSE(answer_->answered()) << "answered twice";
    answer_->aborted = status;
  }
  void Finish(absl::StatusOr<std::vector<Tensor>> outputs,
              const RunStats& stats) override {
    ASSERT_FALSE(answer_->answered()) << "answered twice";
    answer_->finished = std::move(outputs);
    answer_->stats = stats;
  }

 private:
  const TaskSpec spec_;
  std::shared_ptr<Answer> answer_;
  std::string bytes_;
  std::vector<InputView> inputs_;
  std::string key_;
};

class BatchExecutorTest : public ::testing::Test {
 protected:
  BatchExecutorTest() { options_.max_batch_size = 8; }

  // Adds a task to `batch` (the next batch by default).
  std::shared_ptr<Answer> Add(const TaskSpec& spec, Batch* batch = nullptr) {
    if (batch == nullptr) batch = &batch_;
    auto answer = std::make_shared<Answer>();
    auto task = std::make_unique<TestTask>(spec, answer);
    task->enqueue_time = clock_.TimeNow();
    batch->rows += spec.rows;
    batch->padded_rows = options_.PaddedRows(batch->rows);
    batch->tasks.push_back(std::move(task));
    return answer;
  }
  // Runs the batch built so far on a new executor.
  void Run(ModelMetrics* metrics = nullptr) {
    BatchExecutor executor(&runner_, options_, /*device_concurrency=*/1, metrics, &clock_);
    executor.Process(std::move(batch_));
    batch_ = Batch();
  }

  FakeRunner runner_;
  SimulatedClock clock_;
  BatcherOptions options_;
  Batch batch_;
};

TEST_F(BatchExecutorTest, RunsOneBatchAndGivesEachTaskItsOwnRows) {
  auto a = Add({.rows = 1, .value = 1.0f});
  auto b = Add({.rows = 2, .value = 5.0f});
  Run();
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(3));
  ASSERT_THAT(a->status(), IsOk());
  ASSERT_THAT(b->status(), IsOk());
  EXPECT_THAT(a->shape(), ElementsAre(1, kWidth));
  EXPECT_THAT(b->shape(), ElementsAre(2, kWidth));
  EXPECT_EQ(a->values(), std::vector<float>(kWidth, 2.0f));
  EXPECT_EQ(b->values(), std::vector<float>(2 * kWidth, 10.0f));
  EXPECT_EQ(b->stats.batch_rows, 3);
}

TEST_F(BatchExecutorTest, PadsToTheNextAllowedSizeAndSlicesThePaddingOff) {
  options_.allowed_batch_sizes = {1, 2, 4, 8};
  auto a = Add({.rows = 1, .value = 1.0f});
  auto b = Add({.rows = 2, .value = 3.0f});
  Run();
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(4));
  EXPECT_EQ(a->values(), std::vector<float>(kWidth, 2.0f));
  EXPECT_EQ(b->values(), std::vector<float>(2 * kWidth, 6.0f));
  EXPECT_EQ(a->stats.batch_rows, 4);
}

// Records what the executor reports of each batch.
class BatchRecorder final : public ModelMetrics {
 public:
  void RequestFinished(absl::string_view, absl::StatusCode, absl::Duration) override {}
  void QueueWait(absl::Duration) override {}
  void BatchCompleted(int64_t rows, int64_t padding_rows, absl::string_view,
                      absl::Duration) override {
    completed.push_back({rows, padding_rows});
  }
  void SetQueueDepth(int64_t) override {}
  void BatchCut(int64_t rows_left) override { cuts.push_back(rows_left); }
  void BatchStages(absl::Duration assemble, absl::Duration wait, absl::Duration device,
                   absl::Duration outputs) override {
    stages.push_back({assemble, wait, device, outputs});
  }
  void BatchBufferReused() override { ++reused; }
  std::vector<std::pair<int64_t, int64_t>> completed;  // rows, padding
  int reused = 0;
  std::vector<int64_t> cuts;
  std::vector<std::vector<absl::Duration>> stages;  // assemble, wait, device, outputs
};

TEST_F(BatchExecutorTest, ReportsTheStagesOfEachBatchWhoseRunnerTimesThem) {
  BatchRecorder recorder;
  Add({.rows = 1, .value = 1.0f});
  Run(&recorder);  // the fake times nothing yet: nothing to report
  EXPECT_THAT(recorder.stages, ::testing::IsEmpty());
  runner_.set_stages({.assemble = absl::Microseconds(1), .wait = absl::Microseconds(2),
                      .device = absl::Microseconds(3), .outputs = absl::Microseconds(4),
                      .timed = true});
  auto a = Add({.rows = 2, .value = 1.0f});
  Run(&recorder);
  ASSERT_THAT(a->status(), IsOk());
  EXPECT_THAT(recorder.stages,
              ElementsAre(ElementsAre(absl::Microseconds(1), absl::Microseconds(2),
                                      absl::Microseconds(3), absl::Microseconds(4))));
  EXPECT_EQ(recorder.reused, 0);  // its buffer was allocated (kUnknown here)
  // A batch whose buffer was kept from an earlier one is counted as such.
  runner_.set_stages({.assemble = absl::Microseconds(1), .staging = BatchStaging::kReused,
                      .timed = true});
  auto b = Add({.rows = 1, .value = 1.0f});
  Run(&recorder);
  ASSERT_THAT(b->status(), IsOk());
  EXPECT_EQ(recorder.stages.size(), 2u);
  EXPECT_EQ(recorder.reused, 1);
  // A failed batch's stages are not recorded (it may have stopped anywhere).
  auto poisoned = Add({.rows = 1, .value = FakeRunner::kPoison});
  Run(&recorder);
  EXPECT_THAT(poisoned->status(), StatusIs(absl::StatusCode::kInternal));
  EXPECT_EQ(recorder.stages.size(), 2u);
  EXPECT_EQ(recorder.reused, 1);
}

TEST_F(BatchExecutorTest, ReportsABatchCutBackFromPaddingOnceWithTheRowsItLeft) {
  options_.allowed_batch_sizes = {1, 2, 4, 8};
  BatchRecorder recorder;
  Add({.rows = 2, .value = 1.0f});
  batch_.rows_left_by_cut = 3;  // as BatchQueue::Poll sets it after a cut
  Run(&recorder);
  Add({.rows = 3, .value = 1.0f});
  Run(&recorder);
  EXPECT_THAT(recorder.cuts, ElementsAre(3));
  EXPECT_THAT(recorder.completed,
              ElementsAre(std::pair<int64_t, int64_t>{2, 0}, std::pair<int64_t, int64_t>{3, 1}));
}

TEST_F(BatchExecutorTest, ModelErrorIsRerunInHalvesSoOnlyThePoisonedTaskFails) {
  auto t0 = Add({.value = 1.0f});
  auto t1 = Add({.value = 2.0f});
  auto poisoned = Add({.value = FakeRunner::kPoison});
  auto t3 = Add({.value = 4.0f});
  Run();
  // 4 fails; halves [t0 t1] ok, [poisoned t3] fails; then each alone.
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(4, 2, 2, 1, 1));
  EXPECT_THAT(poisoned->status(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("poison")));
  EXPECT_EQ(t0->values(), std::vector<float>(kWidth, 2.0f));
  EXPECT_EQ(t1->values(), std::vector<float>(kWidth, 4.0f));
  EXPECT_EQ(t3->values(), std::vector<float>(kWidth, 8.0f));
}

TEST_F(BatchExecutorTest, OutOfMemorySplitsTheBatchUntilItFits) {
  runner_.set_oom_above_rows(2);
  std::vector<std::shared_ptr<Answer>> answers;
  for (int i = 0; i < 4; ++i) answers.push_back(Add({.value = float(i)}));
  Run();
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(4, 2, 2));
  for (int i = 0; i < 4; ++i) {
    ASSERT_THAT(answers[i]->status(), IsOk()) << "task " << i;
    EXPECT_EQ(answers[i]->values(), std::vector<float>(kWidth, 2.0f * float(i)));
  }
}

TEST_F(BatchExecutorTest, OneRequestTooLargeForTheDeviceGetsResourceExhausted) {
  runner_.set_oom_above_rows(1);
  auto big = Add({.rows = 2});
  Run();
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(2));
  EXPECT_THAT(big->status(), StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST_F(BatchExecutorTest, TaskCancelledAfterFormationIsAnsweredAndNeverRun) {
  auto kept = Add({.rows = 1});
  auto gone = Add({.rows = 2, .cancelled = true});
  Run();
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(1));  // gone's 2 rows never ran
  EXPECT_THAT(gone->status(), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(kept->status(), IsOk());
}

TEST_F(BatchExecutorTest, DeadlinePassedWhileWaitingForTheDeviceIsNotRun) {
  BatchExecutor executor(&runner_, options_, /*device_concurrency=*/1,
                         /*metrics=*/nullptr, &clock_);
  Batch first, second;
  auto early = Add({.value = 1.0f}, &first);
  auto late = Add({.value = 2.0f,
                   .deadline = clock_.TimeNow() + absl::Milliseconds(100)},
                  &second);
  runner_.CloseGate();
  std::thread busy([&] { executor.Process(std::move(first)); });
  runner_.AwaitRunning(1);  // the only device slot is taken
  // The second batch gets the device only after the first; by then its
  // deadline (and the 50 ms cancel skew) has passed.
  clock_.AdvanceTime(absl::Milliseconds(200));
  runner_.OpenGate();
  busy.join();
  executor.Process(std::move(second));
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(1));
  EXPECT_THAT(early->status(), IsOk());
  EXPECT_THAT(late->status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST_F(BatchExecutorTest, PiecesViewTheRequestsBytesAndPadWithZeroRows) {
  TestTask a({.rows = 1, .value = 1.0f}, std::make_shared<Answer>());
  TestTask b({.rows = 2, .value = 2.0f}, std::make_shared<Answer>());
  std::vector<BatchedInput> in = BatchExecutor::Pieces({&a, &b}, 4);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_THAT(in[0].shape, ElementsAre(4, kWidth));
  ASSERT_EQ(in[0].pieces.size(), 2u);
  EXPECT_EQ(in[0].pieces[0].data(), a.inputs()[0].data.data());  // no copy
  EXPECT_EQ(in[0].pieces[1].size(), 2 * kWidth * sizeof(float));
  Tensor t = in[0].Assemble("input");
  ASSERT_EQ(t.data.size(), 4 * kWidth * sizeof(float));
  EXPECT_EQ(t.data.substr(3 * kWidth * sizeof(float)),
            std::string(kWidth * sizeof(float), '\0'));
}

}  // namespace
}  // namespace metalserve
