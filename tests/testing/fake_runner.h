// FakeRunner: a Runner with a known signature and behaviour, for testing the
// batcher, executor and service without LibTorch.
//
// Signature: one input "input" float32 [-1, kWidth] -> one output "output"
// float32 [-1, kWidth] with output = 2 * input, row by row. Behaviour knobs:
//  * a row whose first value is kPoison makes Run fail with INTERNAL (as a
//    model that raises);
//  * batches of more than `oom_above_rows` rows fail with RESOURCE_EXHAUSTED;
//  * Close the gate (CloseGate) to hold every Run until OpenGate;
//  * set_on_run(fn): fn runs inside every Run that passes the gate and the
//    out-of-memory check (a test's simulated clock advanced by a forward's
//    "duration", say);
//  * set_stages(s): RunBatchStaged reports `s` as every batch's stages (by
//    default it reports none, as a runtime that does not time them);
//  * every Run's row count is recorded (batch_rows()), and the first value
//    of every row it was given (row_first_values()): the log of what ran.
//
// Thread-safety: thread-safe.
#ifndef METALSERVE_TESTS_TESTING_FAKE_RUNNER_H_
#define METALSERVE_TESTS_TESTING_FAKE_RUNNER_H_

#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/runtime/runner.h"

namespace metalserve {

class FakeRunner final : public Runner {
 public:
  static constexpr int64_t kWidth = 4;
  static constexpr float kPoison = -777.0f;

  FakeRunner() {
    info_.name = "fake";
    info_.version = "1";
    info_.device = "cpu";
    info_.torch_version = "none";
    info_.precision = "fp32";
    info_.optimization = "none";
    info_.inputs = {{"input", DType::kFloat32, {-1, kWidth}}};
    info_.outputs = {{"output", DType::kFloat32, {-1, kWidth}}};
  }

  const ModelInfo& info() const override { return info_; }

  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& inputs) override {
    const Tensor& in = inputs.at(0);
    const float* x = reinterpret_cast<const float*>(in.data.data());
    std::function<void()> on_run;
    {
      absl::MutexLock l(&mu_);
      batch_rows_.push_back(in.rows());
      for (int64_t r = 0; r < in.rows(); ++r) row_first_values_.push_back(x[r * kWidth]);
      ++running_;
      mu_.Await(absl::Condition(&gate_open_));
      --running_;
      if (oom_above_rows_ > 0 && in.rows() > oom_above_rows_) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "fake device out of memory for ", in.rows(), " rows"));
      }
      on_run = on_run_;
    }
    if (on_run) on_run();
    for (int64_t r = 0; r < in.rows(); ++r) {
      if (x[r * kWidth] == kPoison) {
        return absl::InternalError("model raised: poison row found");
      }
    }
    Tensor out;
    out.name = "output";
    out.dtype = DType::kFloat32;
    out.shape = in.shape;
    out.data.resize(in.data.size());
    float* y = reinterpret_cast<float*>(out.data.data());
    for (int64_t i = 0; i < in.rows() * kWidth; ++i) y[i] = 2 * x[i];
    return std::vector<Tensor>{std::move(out)};
  }

  absl::StatusOr<std::vector<Tensor>> RunBatchStaged(const std::vector<BatchedInput>& inputs,
                                                     ComputeStages* stages) override {
    {
      absl::MutexLock l(&mu_);
      if (stages_.has_value() && stages != nullptr) *stages = *stages_;
    }
    return RunBatch(inputs);
  }

  MemoryStats Memory() override { return {}; }
  void BetweenBatches(bool idle) override {
    absl::MutexLock l(&mu_);
    (idle ? idle_calls_ : busy_calls_)++;
  }

  void CloseGate() {
    absl::MutexLock l(&mu_);
    gate_open_ = false;
  }
  void OpenGate() {
    absl::MutexLock l(&mu_);
    gate_open_ = true;
  }
  // Blocks until `n` Run calls wait at the closed gate.
  void AwaitRunning(int n) {
    absl::MutexLock l(&mu_);
    auto cond = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return running_ >= n; };
    mu_.Await(absl::Condition(&cond));
  }
  void set_stages(ComputeStages stages) {
    absl::MutexLock l(&mu_);
    stages_ = stages;
  }
  void set_on_run(std::function<void()> fn) {
    absl::MutexLock l(&mu_);
    on_run_ = std::move(fn);
  }
  void set_oom_above_rows(int64_t rows) {
    absl::MutexLock l(&mu_);
    oom_above_rows_ = rows;
  }
  std::vector<int64_t> batch_rows() {
    absl::MutexLock l(&mu_);
    return batch_rows_;
  }
  // The first value of every row Run was given, in order (padding included).
  std::vector<float> row_first_values() {
    absl::MutexLock l(&mu_);
    return row_first_values_;
  }
  ModelInfo& mutable_info() { return info_; }

 private:
  ModelInfo info_;
  absl::Mutex mu_;
  bool gate_open_ ABSL_GUARDED_BY(mu_) = true;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t oom_above_rows_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void()> on_run_ ABSL_GUARDED_BY(mu_);
  std::optional<ComputeStages> stages_ ABSL_GUARDED_BY(mu_);
  int idle_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int busy_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> batch_rows_ ABSL_GUARDED_BY(mu_);
  std::vector<float> row_first_values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metalserve

#endif  // METALSERVE_TESTS_TESTING_FAKE_RUNNER_H_
