// A BatchTask whose outcome the test can read: which batch ran it, or the
// status it was aborted with.
#ifndef METALSERVE_TESTS_BATCHER_FAKE_TASK_H_
#define METALSERVE_TESTS_BATCHER_FAKE_TASK_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "server/batcher/batch_task.h"

namespace metalserve {

struct TaskOutcome {
  std::atomic<int> aborts{0};
  std::atomic<int> runs{0};
  absl::Status abort_status;  // written before aborts is incremented
  std::atomic<bool> cancelled{false};
  absl::Notification answered;  // first answer (run or abort)

  void MarkRun() {
    if (runs.fetch_add(1) + aborts.load() == 0) answered.Notify();
  }
};

class FakeTask final : public BatchTask {
 public:
  FakeTask(int64_t rows, std::string key, std::shared_ptr<TaskOutcome> outcome,
           absl::Time deadline = absl::InfiniteFuture(), int id = 0)
      : rows_(rows), key_(std::move(key)), outcome_(std::move(outcome)),
        deadline_(deadline), id_(id) {}

  int64_t rows() const override { return rows_; }
  absl::string_view batch_key() const override { return key_; }
  absl::Time deadline() const override { return deadline_; }
  bool IsCancelled() const override { return outcome_->cancelled.load(); }
  void Abort(const absl::Status& status) override {
    outcome_->abort_status = status;
    if (outcome_->aborts.fetch_add(1) + outcome_->runs.load() == 0) {
      outcome_->answered.Notify();
    }
  }
  int priority() const override { return priority_; }
  void set_priority(int priority) { priority_ = priority; }
  bool may_run_on_submitter() const override { return on_submitter_; }
  void set_may_run_on_submitter(bool yes) { on_submitter_ = yes; }
  int id() const { return id_; }
  TaskOutcome& outcome() { return *outcome_; }

 private:
  int64_t rows_;
  std::string key_;
  std::shared_ptr<TaskOutcome> outcome_;
  absl::Time deadline_;
  int id_;
  int priority_ = 0;
  bool on_submitter_ = false;
};

// A task of `rows` rows asking for `priority`, with its id to tell it apart.
inline std::unique_ptr<BatchTask> MakePriorityTask(int64_t rows, int priority, int id,
                                                   std::string key = "f32[3]") {
  auto t = std::make_unique<FakeTask>(rows, std::move(key), std::make_shared<TaskOutcome>(),
                                      absl::InfiniteFuture(), id);
  t->set_priority(priority);
  return t;
}

inline std::unique_ptr<BatchTask> MakeTask(
    int64_t rows, std::string key = "f32[3]",
    absl::Time deadline = absl::InfiniteFuture(),
    std::shared_ptr<TaskOutcome> outcome = std::make_shared<TaskOutcome>(),
    int id = 0) {
  return std::make_unique<FakeTask>(rows, std::move(key), std::move(outcome),
                                    deadline, id);
}

}  // namespace metalserve

#endif  // METALSERVE_TESTS_BATCHER_FAKE_TASK_H_
