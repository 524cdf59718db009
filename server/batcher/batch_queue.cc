#include "server/batcher/batch_queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metalserve {

absl::string_view CloseReasonName(CloseReason reason) {
  switch (reason) {
    case CloseReason::kFull: return "full";
    case CloseReason::kDelayExpired: return "delay_expired";
    case CloseReason::kNoDelay: return "no_delay";
    case CloseReason::kDraining: return "draining";
  }
  return "unknown";
}

absl::Status BatcherOptions::Validate() const {
  if (max_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size must be >= 1, got ", max_batch_size));
  }
  if (max_queue_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue_delay must be >= 0, got ",
                     absl::FormatDuration(max_queue_delay)));
  }
  if (max_queue_size < max_batch_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue_size (", max_queue_size,
                     " rows) must be >= max_batch_size (", max_batch_size, ")"));
  }
  if (num_executors < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_executors must be >= 1, got ", num_executors));
  }
  if (!allowed_batch_sizes.empty()) {
    for (size_t i = 0; i < allowed_batch_sizes.size(); ++i) {
      if (allowed_batch_sizes[i] < 1 ||
          (i > 0 && allowed_batch_sizes[i] <= allowed_batch_sizes[i - 1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "allowed_batch_sizes must be positive and strictly ascending, got [",
            absl::StrJoin(allowed_batch_sizes, ","), "]"));
      }
    }
    if (allowed_batch_sizes.back() != max_batch_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the largest allowed_batch_sizes entry (", allowed_batch_sizes.back(),
          ") must equal max_batch_size (", max_batch_size, ")"));
    }
  }
  return absl::OkStatus();
}

int64_t BatcherOptions::PaddedRows(int64_t rows) const {
  for (int64_t size : allowed_batch_sizes) {
    if (size >= rows) return size;
  }
  return rows;
}

BatchQueue::BatchQueue(BatcherOptions options) : options_(std::move(options)) {}

absl::Status BatchQueue::Admit(std::unique_ptr<BatchTask>* task,
                               absl::Time now) {
  const int64_t rows = (*task)->rows();
  if (rows > options_.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request has ", rows, " rows (batch dimension), more than max_batch_size ",
        options_.max_batch_size, "; split it into requests of at most ",
        options_.max_batch_size, " rows"));
  }
  if (queued_rows_ + rows > options_.max_queue_size) {
    return absl::UnavailableError(absl::StrCat(
        "queue is full: ", queued_rows_, " of ", options_.max_queue_size,
        " rows waiting, request has ", rows, "; retry later"));
  }
  (*task)->enqueue_time = now;
  queued_rows_ += rows;
  tasks_.push_back(std::move(*task));
  return absl::OkStatus();
}

BatchQueue::Liveness BatchQueue::LivenessOf(const BatchTask& task,
                                            absl::Time now) {
  // A client whose own deadline passes cancels the call itself, slightly
  // before the server-side deadline (which counts from when the call
  // arrived): a cancellation that close to the deadline is the deadline's.
  const bool cancelled = task.IsCancelled();
  if (task.deadline() <= now ||
      (cancelled && task.deadline() - now <= kDeadlineSkew)) {
    return Liveness::kExpired;
  }
  return cancelled ? Liveness::kCancelled : Liveness::kLive;
}

void BatchQueue::RemoveDead(absl::Time now, PollResult* result) {
  auto keep = tasks_.begin();
  for (auto it = tasks_.begin(); it != tasks_.end(); ++it) {
    const Liveness liveness = LivenessOf(**it, now);
    if (liveness == Liveness::kLive) {
      if (keep != it) *keep = std::move(*it);
      ++keep;
      continue;
    }
    queued_rows_ -= (*it)->rows();
    (liveness == Liveness::kExpired ? result->expired : result->cancelled)
        .push_back(std::move(*it));
  }
  tasks_.erase(keep, tasks_.end());
}

BatchQueue::PollResult BatchQueue::Poll(absl::Time now, bool draining) {
  PollResult result;
  RemoveDead(now, &result);
  if (tasks_.empty()) return result;

  const absl::string_view key = tasks_.front()->batch_key();
  int64_t rows = 0;
  bool full = false;
  std::vector<size_t> picked;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const BatchTask& t = *tasks_[i];
    if (t.batch_key() != key) continue;
    if (rows + t.rows() > options_.max_batch_size) {
      full = true;
      break;
    }
    rows += t.rows();
    picked.push_back(i);
    if (rows == options_.max_batch_size) {
      full = true;
      break;
    }
  }

  const absl::Time delay_expiry =
      tasks_.front()->enqueue_time + options_.max_queue_delay;
  std::optional<CloseReason> reason;
  if (full) {
    reason = CloseReason::kFull;
  } else if (draining) {
    reason = CloseReason::kDraining;
  } else if (options_.max_queue_delay == absl::ZeroDuration()) {
    reason = CloseReason::kNoDelay;
  } else if (now >= delay_expiry) {
    reason = CloseReason::kDelayExpired;
  }

  if (!reason.has_value()) {
    result.wake_at = delay_expiry;
    for (const auto& t : tasks_) {
      result.wake_at = std::min(result.wake_at, t->deadline());
    }
    return result;
  }

  Batch batch;
  batch.reason = *reason;
  batch.formed_at = now;
  batch.rows = rows;
  batch.padded_rows = options_.PaddedRows(rows);
  batch.tasks.reserve(picked.size());
  for (size_t i : picked) batch.tasks.push_back(std::move(tasks_[i]));
  // Erase the moved-from slots, keeping the others' order.
  tasks_.erase(std::remove(tasks_.begin(), tasks_.end(), nullptr), tasks_.end());
  queued_rows_ -= rows;
  result.batch = std::move(batch);
  return result;
}

}  // namespace metalserve
