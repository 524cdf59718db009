// InferTask::Split: a request of more rows than a batch holds, run as pieces
// and answered once (see infer_task.h and BatchTask::Split).
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/service/infer_task.h"

namespace metalserve {
namespace {

// What the pieces of one split task share: the task itself, the pieces'
// outputs so far, and whether it has been answered. Owned jointly by the
// pieces; destroyed (with the task) when the last piece is. Thread-safe:
// pieces may finish on different executor threads.
class SplitState {
 public:
  SplitState(std::unique_ptr<InferTask> whole, size_t pieces)
      : whole_(std::move(whole)), outputs_(pieces), left_(pieces) {}

  InferTask& whole() { return *whole_; }
  // Answered already, or the whole's call cancelled. Read under the lock
  // that orders it before the answer: once answered, the whole's call (and
  // the context IsCancelled reads) may be freed by then.
  bool Cancelled() const {
    absl::MutexLock l(&mu_);
    return answered_ || whole_->IsCancelled();
  }

  // Piece `index` is done: its outputs, or the error that fails the whole.
  void PieceFinished(size_t index, absl::StatusOr<std::vector<Tensor>> out,
                     const RunStats& stats) {
    std::vector<std::vector<Tensor>> parts;
    RunStats total;
    {
      absl::MutexLock l(&mu_);
      if (answered_) return;
      stats_.queue_time = std::max(stats_.queue_time, stats.queue_time);
      stats_.compute_time += stats.compute_time;
      stats_.batch_rows = std::max(stats_.batch_rows, stats.batch_rows);
      if (out.ok()) {
        outputs_[index] = *std::move(out);
        if (--left_ > 0) return;
        parts = std::move(outputs_);
      }
      answered_ = true;
      total = stats_;
    }
    // Answered outside the lock.
    if (!out.ok()) {
      whole_->Finish(out.status(), total);
      return;
    }
    whole_->Finish(Concatenate(std::move(parts)), total);
  }

  // A piece was aborted (deadline, cancellation, drain): the whole fails
  // with that status, once.
  void PieceAborted(const absl::Status& status) {
    {
      absl::MutexLock l(&mu_);
      if (answered_) return;
      answered_ = true;
    }
    whole_->Abort(status);
  }

 private:
  // Each output's pieces joined in row order.
  static std::vector<Tensor> Concatenate(std::vector<std::vector<Tensor>> parts) {
    std::vector<Tensor> joined = std::move(parts.front());
    for (size_t o = 0; o < joined.size(); ++o) {
      for (size_t p = 1; p < parts.size(); ++p) {
        joined[o].shape[0] += parts[p][o].shape[0];
        joined[o].data.append(parts[p][o].data);
      }
    }
    return joined;
  }

  const std::unique_ptr<InferTask> whole_;
  mutable absl::Mutex mu_;
  std::vector<std::vector<Tensor>> outputs_ ABSL_GUARDED_BY(mu_);
  size_t left_ ABSL_GUARDED_BY(mu_);
  RunStats stats_ ABSL_GUARDED_BY(mu_);
  bool answered_ ABSL_GUARDED_BY(mu_) = false;
};

// Rows [first, first + rows) of `in`, as views into the same bytes: a
// slice of `data`, or of the received pieces when the bytes came in several
// (sliced_request.h), keeping only the parts that overlap those rows.
InputView RowsOf(const InputView& in, int64_t first, int64_t rows) {
  InputView out = in;
  out.shape[0] = rows;
  size_t total = in.data.size();
  if (!in.pieces.empty()) {
    total = 0;
    for (absl::string_view p : in.pieces) total += p.size();
  }
  const size_t row_bytes = in.shape[0] > 0 ? total / static_cast<size_t>(in.shape[0]) : 0;
  const size_t begin = static_cast<size_t>(first) * row_bytes;
  const size_t end = begin + static_cast<size_t>(rows) * row_bytes;
  if (in.pieces.empty()) {
    out.data = in.data.substr(begin, end - begin);
    return out;
  }
  out.pieces.clear();
  size_t at = 0;  // offset of the current piece in the whole
  for (absl::string_view p : in.pieces) {
    const size_t from = std::max(begin, at);
    const size_t to = std::min(end, at + p.size());
    if (from < to) out.pieces.push_back(p.substr(from - at, to - from));
    at += p.size();
  }
  return out;
}

// Rows [first, first + rows) of a split task.
class PieceTask final : public InferTask {
 public:
  PieceTask(std::shared_ptr<SplitState> state, size_t index, int64_t first, int64_t rows)
      : state_(std::move(state)), index_(index), rows_(rows) {
    for (const InputView& in : state_->whole().inputs()) {
      inputs_.push_back(RowsOf(in, first, rows));
    }
  }

  int64_t rows() const override { return rows_; }
  absl::string_view batch_key() const override { return state_->whole().batch_key(); }
  absl::Time deadline() const override { return state_->whole().deadline(); }
  bool IsCancelled() const override { return state_->Cancelled(); }
  const std::vector<InputView>& inputs() const override { return inputs_; }
  void Abort(const absl::Status& status) override { state_->PieceAborted(status); }
  void Finish(absl::StatusOr<std::vector<Tensor>> outputs, const RunStats& stats) override {
    state_->PieceFinished(index_, std::move(outputs), stats);
  }

 private:
  const std::shared_ptr<SplitState> state_;
  const size_t index_;
  const int64_t rows_;
  std::vector<InputView> inputs_;
};

}  // namespace

std::vector<std::unique_ptr<BatchTask>> InferTask::Split(int64_t first_rows, int64_t piece_rows,
                                                         std::unique_ptr<BatchTask>* self) {
  const int64_t total = rows();
  if (piece_rows < 1 || first_rows < 1 || self->get() != this) return {};
  std::vector<std::pair<int64_t, int64_t>> ranges;  // first row, rows
  for (int64_t first = 0; first < total;) {
    const int64_t n = std::min(ranges.empty() ? first_rows : piece_rows, total - first);
    ranges.emplace_back(first, n);
    first += n;
  }
  if (ranges.size() < 2) return {};
  auto state = std::make_shared<SplitState>(
      std::unique_ptr<InferTask>(static_cast<InferTask*>(self->release())), ranges.size());
  std::vector<std::unique_ptr<BatchTask>> pieces;
  pieces.reserve(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    pieces.push_back(std::make_unique<PieceTask>(state, i, ranges[i].first, ranges[i].second));
  }
  return pieces;
}

}  // namespace metalserve
