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
    case CloseReason::kNoGain: return "no_gain";
  }
  return "unknown";
}

absl::string_view BatchingPolicyName(BatchingPolicy policy) {
  return policy == BatchingPolicy::kAdaptive ? "adaptive" : "fixed";
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
  if (max_request_rows < 0 || max_request_rows > max_queue_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_request_rows must be in [0, max_queue_size = ", max_queue_size,
        "] (0: max_queue_size), got ", max_request_rows));
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

BatchQueue::BatchQueue(BatcherOptions options) : options_(std::move(options)) {
  if (options_.policy == BatchingPolicy::kAdaptive) {
    adaptive_.emplace(options_.max_batch_size, options_.allowed_batch_sizes,
                      options_.batch_costs);
  }
}

void BatchQueue::SetDeviceFreeAt(absl::Time t) {
  if (adaptive_) adaptive_->SetDeviceFreeAt(t);
}

void BatchQueue::ObserveBatch(int64_t padded_rows, absl::Duration cost) {
  if (adaptive_) adaptive_->ObserveBatch(padded_rows, cost);
}

absl::Duration BatchQueue::EstimatedCost(int64_t rows) const {
  return adaptive_ ? adaptive_->CostOf(rows) : absl::ZeroDuration();
}

std::optional<CloseReason> BatchQueue::PartialClose(int64_t rows, absl::Time now,
                                                    absl::Time delay_expiry,
                                                    absl::Time* wake_at) const {
  if (options_.max_queue_delay == absl::ZeroDuration()) return CloseReason::kNoDelay;
  if (now >= delay_expiry) return CloseReason::kDelayExpired;
  *wake_at = delay_expiry;
  if (adaptive_) {
    const AdaptivePolicy::Decision d = adaptive_->Decide(rows, now, delay_expiry);
    if (d.close) return CloseReason::kNoGain;
    *wake_at = std::min(*wake_at, d.reconsider_at);
  }
  return std::nullopt;
}

absl::Status BatchQueue::Admit(std::unique_ptr<BatchTask>* task,
                               absl::Time now) {
  const int64_t rows = (*task)->rows();
  if (rows > options_.MaxRequestRows()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request has ", rows, " rows (batch dimension), more than max_request_rows ",
        options_.MaxRequestRows(), "; send at most ", options_.MaxRequestRows(),
        " rows per request"));
  }
  if (queued_rows_ + rows > options_.max_queue_size) {
    return absl::UnavailableError(absl::StrCat(
        "queue is full: ", queued_rows_, " of ", options_.max_queue_size,
        " rows waiting, request has ", rows, "; retry later"));
  }
  std::vector<std::unique_ptr<BatchTask>> pieces;
  if (rows > options_.max_batch_size) {
    pieces = (*task)->Split(options_.max_batch_size, task);
    if (pieces.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request has ", rows, " rows (batch dimension), more than max_batch_size ",
          options_.max_batch_size, ", and cannot be split; send at most ",
          options_.max_batch_size, " rows per request"));
    }
  } else {
    pieces.push_back(std::move(*task));
  }
  if (adaptive_) adaptive_->OnArrival(now, rows);
  for (auto& piece : pieces) {
    piece->enqueue_time = now;
    queued_rows_ += piece->rows();
    tasks_.push_back(std::move(piece));
  }
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
  absl::Time wake_at = absl::InfiniteFuture();
  if (full) {
    reason = CloseReason::kFull;
  } else if (draining) {
    reason = CloseReason::kDraining;
  } else {
    reason = PartialClose(rows, now, delay_expiry, &wake_at);
  }

  if (!reason.has_value()) {
    result.wake_at = wake_at;
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
