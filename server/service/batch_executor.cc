#include "server/service/batch_executor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace metalserve {

std::string BatchKeyOf(const std::vector<InputView>& inputs) {
  std::string key;
  for (const InputView& in : inputs) {
    absl::StrAppend(&key, DTypeName(in.dtype), "[");
    for (size_t d = 1; d < in.shape.size(); ++d) {
      absl::StrAppend(&key, d > 1 ? "," : "", in.shape[d]);
    }
    absl::StrAppend(&key, "];");
  }
  return key;
}

BatchExecutor::BatchExecutor(Runner* runner, const BatcherOptions& batching,
                             int device_concurrency, ModelMetrics* metrics,
                             Clock* clock)
    : runner_(runner),
      batching_(batching),
      metrics_(metrics),
      clock_(clock != nullptr ? clock : Clock::RealClock()),
      device_slots_(device_concurrency < 1 ? 1 : device_concurrency),
      retry_log_(clock_, absl::Seconds(1)) {}

std::vector<BatchedInput> BatchExecutor::Pieces(
    const std::vector<InferTask*>& tasks, int64_t padded_rows) {
  std::vector<BatchedInput> out;
  if (tasks.empty()) return out;
  const size_t n_inputs = tasks.front()->inputs().size();
  out.resize(n_inputs);
  for (size_t i = 0; i < n_inputs; ++i) {
    const InputView& first = tasks.front()->inputs()[i];
    BatchedInput& in = out[i];
    in.dtype = first.dtype;
    in.shape = first.shape;
    in.shape[0] = padded_rows;
    in.pieces.reserve(tasks.size());
    for (InferTask* task : tasks) {
      const InputView& view = task->inputs()[i];
      if (view.pieces.empty()) {
        in.pieces.push_back(view.data);
      } else {
        in.pieces.insert(in.pieces.end(), view.pieces.begin(), view.pieces.end());
      }
    }
  }
  return out;
}

void BatchExecutor::AcquireDeviceSlot() {
  absl::MutexLock l(&device_mu_);
  device_mu_.Await(absl::Condition(
      +[](int* slots) { return *slots > 0; }, &device_slots_));
  --device_slots_;
}

absl::Duration BatchExecutor::DeviceTime(absl::Time start, absl::Time end) {
  absl::MutexLock l(&device_mu_);
  const absl::Duration t = end - std::max(start, last_run_end_);
  last_run_end_ = std::max(last_run_end_, end);
  return t;
}

void BatchExecutor::ReleaseDeviceSlot() {
  absl::MutexLock l(&device_mu_);
  ++device_slots_;
}

std::vector<InferTask*> BatchExecutor::DropDead(
    const std::vector<InferTask*>& tasks) {
  std::vector<InferTask*> live;
  live.reserve(tasks.size());
  const absl::Time now = clock_->TimeNow();
  for (InferTask* task : tasks) {
    switch (BatchQueue::LivenessOf(*task, now)) {
      case BatchQueue::Liveness::kLive:
        live.push_back(task);
        break;
      case BatchQueue::Liveness::kExpired:
        task->Abort(absl::DeadlineExceededError(
            "deadline passed while the request waited for the device; it "
            "was not run"));
        break;
      case BatchQueue::Liveness::kCancelled:
        task->Abort(absl::CancelledError(
            "request cancelled by the client before it ran"));
        break;
    }
  }
  return live;
}

void BatchExecutor::Process(Batch batch) {
  std::vector<InferTask*> tasks;
  tasks.reserve(batch.tasks.size());
  for (auto& t : batch.tasks) tasks.push_back(static_cast<InferTask*>(t.get()));
  const absl::Time start = clock_->TimeNow();
  AcquireDeviceSlot();
  tasks = DropDead(tasks);
  if (!tasks.empty()) RunGroup(tasks);
  ReleaseDeviceSlot();
  if (metrics_ != nullptr) {
    if (batch.rows_left_by_cut > 0) metrics_->BatchCut(batch.rows_left_by_cut);
    if (batch.on_submitter) metrics_->BatchInline();
    metrics_->BatchCompleted(batch.rows, batch.padded_rows - batch.rows,
                             CloseReasonName(batch.reason),
                             clock_->TimeNow() - start);
  }
  runner_->BetweenBatches(/*idle=*/false);
}

namespace {

// Rows [first, first + rows) of every output of a batch.
std::vector<Tensor> RowsOfOutputs(const std::vector<Tensor>& outputs, int64_t first,
                                  int64_t rows) {
  std::vector<Tensor> mine;
  mine.reserve(outputs.size());
  for (const Tensor& o : outputs) {
    Tensor slice;
    slice.name = o.name;
    slice.dtype = o.dtype;
    slice.shape = o.shape;
    slice.shape[0] = rows;
    const int64_t row_bytes = o.RowBytes();
    slice.data = o.data.substr(static_cast<size_t>(first * row_bytes),
                               static_cast<size_t>(rows * row_bytes));
    mine.push_back(std::move(slice));
  }
  return mine;
}

}  // namespace

void BatchExecutor::RunGroup(const std::vector<InferTask*>& tasks) {
  int64_t rows = 0;
  for (InferTask* t : tasks) rows += t->rows();
  const int64_t padded = batching_.PaddedRows(rows);

  const absl::Time run_start = clock_->TimeNow();
  ComputeStages stages;
  absl::StatusOr<std::vector<Tensor>> out = runner_->RunBatchStaged(
      Pieces(tasks, padded), metrics_ != nullptr ? &stages : nullptr);
  const absl::Time run_end = clock_->TimeNow();
  if (out.ok() && stages.timed) {  // timed only with metrics_ set
    metrics_->BatchStages(stages.assemble, stages.wait, stages.device, stages.outputs);
    if (stages.staging == BatchStaging::kReused) metrics_->BatchBufferReused();
  }
  const absl::Duration took = run_end - run_start;
  const absl::Duration device_time = DeviceTime(run_start, run_end);
  if (out.ok() && on_cost_) on_cost_(padded, device_time);

  if (out.ok()) {
    for (const Tensor& o : *out) {
      if (o.shape.empty() || o.shape[0] != padded) {
        out = absl::InternalError(absl::StrCat(
            "model output '", o.name, "' has shape ", ShapeToString(o.shape),
            " for a batch of ", padded, " rows; outputs must be batch-first"));
        break;
      }
    }
  }
  if (!out.ok() && tasks.size() > 1 &&
      (out.status().code() == absl::StatusCode::kResourceExhausted ||
       out.status().code() == absl::StatusCode::kInternal)) {
    int64_t suppressed = 0;
    if (retry_log_.Allow(&suppressed)) {
      LOG(WARNING) << "batch of " << tasks.size() << " requests (" << rows
                   << " rows) failed: " << out.status()
                   << "; retrying in halves to isolate it (" << suppressed
                   << " similar lines suppressed since the last)";
    }
    const size_t half = tasks.size() / 2;
    RunGroup({tasks.begin(), tasks.begin() + half});
    RunGroup({tasks.begin() + half, tasks.end()});
    return;
  }

  int64_t offset = 0;
  for (InferTask* task : tasks) {
    RunStats stats;
    stats.queue_time = run_start - task->enqueue_time;
    stats.compute_time = took;
    stats.batch_rows = padded;
    if (metrics_ != nullptr) metrics_->QueueWait(stats.queue_time);
    if (!out.ok()) {
      task->Finish(out.status(), stats);
      continue;
    }
    task->Finish(RowsOfOutputs(*out, offset, task->rows()), stats);
    offset += task->rows();
  }
}

}  // namespace metalserve
