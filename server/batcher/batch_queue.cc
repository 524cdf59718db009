#include "server/batcher/batch_queue.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace metalserve {

namespace {

// The largest row count in [1, max] for which `fits` holds, taking the cost
// behind `fits` as rising with rows; 1 when none does.
template <typename Fits>
int64_t LargestFitting(int64_t max, Fits fits) {
  int64_t lo = 1, hi = max;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (fits(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace

BatchQueue::BatchQueue(BatcherOptions options)
    : options_(std::move(options)),
      level_rows_(static_cast<size_t>(std::max(options_.priority_levels, 1)), 0),
      last_admitted_(level_rows_.size(), absl::InfinitePast()) {
  // The cost curve is kept for every policy that reads it.
  if (options_.policy == BatchingPolicy::kAdaptive ||
      options_.latency_target > absl::ZeroDuration() ||
      options_.priority_lower_batch_cost > absl::ZeroDuration() ||
      options_.priority_fill_cost_ratio > 0) {
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

void BatchQueue::ObserveOccupancy(int64_t padded_rows, absl::Duration took) {
  if (adaptive_) adaptive_->ObserveOccupancy(padded_rows, took);
}

absl::Duration BatchQueue::EstimatedCost(int64_t rows) const {
  return adaptive_ ? adaptive_->CostOf(rows) : absl::ZeroDuration();
}

absl::Duration BatchQueue::EstimatedDeviceCost(int64_t rows) const {
  return adaptive_ ? adaptive_->DeviceCostOf(rows) : absl::ZeroDuration();
}

std::optional<CloseReason> BatchQueue::PartialClose(int64_t rows, absl::Time now,
                                                    absl::Time delay_expiry,
                                                    absl::Time* wake_at) const {
  if (options_.max_queue_delay == absl::ZeroDuration()) return CloseReason::kNoDelay;
  if (now >= delay_expiry) return CloseReason::kDelayExpired;
  *wake_at = delay_expiry;
  if (adaptive_ && options_.policy == BatchingPolicy::kAdaptive) {
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
  RETURN_IF_ERROR(AdmitAtLevel(task->get(), now));
  RETURN_IF_ERROR(CheckCompletionEstimate(**task, now));
  std::vector<std::unique_ptr<BatchTask>> pieces;
  if (rows > options_.max_batch_size) {
    // The first piece fills the room the queued rows of its shape leave in
    // the batch it will join (the others are whole batches).
    int64_t same_shape = 0;
    for (const auto& t : tasks_) {
      if (t->batch_key() == (*task)->batch_key()) same_shape += t->rows();
    }
    const int64_t room = options_.max_batch_size - same_shape % options_.max_batch_size;
    pieces = (*task)->Split(room, options_.max_batch_size, task);
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
  const int level = pieces.front()->priority_level;
  const absl::Time level_deadline = pieces.front()->level_deadline;
  level_rows_[level - 1] += rows;
  last_admitted_[level - 1] = std::max(last_admitted_[level - 1], now);
  for (auto& piece : pieces) {
    piece->enqueue_time = now;
    piece->priority_level = level;
    piece->level_deadline = level_deadline;
    queued_rows_ += piece->rows();
    tasks_.push_back(std::move(piece));
  }
  return absl::OkStatus();
}

int64_t BatchQueue::MaxRows() const {
  if (options_.latency_target <= absl::ZeroDuration() || !adaptive_) {
    return options_.max_batch_size;
  }
  return LargestFitting(options_.max_batch_size, [this](int64_t m) {
    return 2 * adaptive_->CostOf(m) <= options_.latency_target;
  });
}

absl::Status BatchQueue::AdmitAtLevel(BatchTask* task, absl::Time now) {
  ASSIGN_OR_RETURN(const int level, options_.LevelOf(task->priority()));
  const size_t i = static_cast<size_t>(level - 1);
  const int64_t bound = i < options_.priority_queue_rows.size() ? options_.priority_queue_rows[i] : 0;
  if (bound > 0 && level_rows_[i] + task->rows() > bound) {
    return absl::UnavailableError(absl::StrCat(
        "queue of priority ", level, " is full: ", level_rows_[i], " of ", bound,
        " rows waiting, request has ", task->rows(), "; retry later"));
  }
  const absl::Duration timeout =
      i < options_.priority_timeouts.size() ? options_.priority_timeouts[i] : absl::ZeroDuration();
  task->priority_level = level;
  task->level_deadline = timeout > absl::ZeroDuration() ? now + timeout : absl::InfiniteFuture();
  return absl::OkStatus();
}

BatchQueue::Liveness BatchQueue::LivenessOf(const BatchTask& task,
                                            absl::Time now) {
  // A client whose own deadline passes cancels the call itself, slightly
  // before the server-side deadline (which counts from when the call
  // arrived): a cancellation that close to the deadline is the deadline's.
  const bool cancelled = task.IsCancelled();
  const absl::Time deadline = task.EffectiveDeadline();
  if (deadline <= now || (cancelled && deadline - now <= kDeadlineSkew)) {
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
    level_rows_[(*it)->priority_level - 1] -= (*it)->rows();
    (liveness == Liveness::kExpired ? result->expired : result->cancelled)
        .push_back(std::move(*it));
  }
  tasks_.erase(keep, tasks_.end());
}

size_t BatchQueue::HeadIndex() const {
  size_t best = 0;
  for (size_t i = 1; i < tasks_.size(); ++i) {
    if (tasks_[i]->priority_level < tasks_[best]->priority_level) best = i;
  }
  // tasks_ is in arrival order: index 0 is the oldest. Passed over too often:
  // the oldest heads this batch whatever its level.
  if (best != 0 && passed_over_ >= options_.lower_priority_share_every - 1) return 0;
  return best;
}

bool BatchQueue::HigherLevelActive(int level, absl::Time now) const {
  for (int l = 1; l < level; ++l) {
    if (now - last_admitted_[l - 1] < options_.priority_active_window) return true;
  }
  return false;
}

int64_t BatchQueue::LowerBatchCap() const {
  const absl::Duration budget = options_.priority_lower_batch_cost;
  const std::vector<int64_t>& sizes = options_.allowed_batch_sizes;
  if (sizes.empty()) {
    return LargestFitting(options_.max_batch_size, [&](int64_t m) {
      return adaptive_->DeviceCostOf(m) <= budget;
    });
  }
  int64_t cap = sizes.front();  // none fits: the lower levels still move
  for (int64_t size : sizes) {
    if (adaptive_->DeviceCostOf(size) <= budget) cap = size;
  }
  return cap;
}

bool BatchQueue::FillFits(int64_t rows, int64_t own, int64_t add) const {
  if (options_.priority_fill_cost_ratio <= 0 || !adaptive_) return true;
  return absl::ToDoubleSeconds(adaptive_->DeviceCostOf(rows + add)) <=
         options_.priority_fill_cost_ratio * absl::ToDoubleSeconds(adaptive_->DeviceCostOf(own));
}

int64_t BatchQueue::CapFor(int level, absl::Time now) const {
  const int64_t max_rows = MaxRows();
  if (options_.priority_lower_batch_cost <= absl::ZeroDuration() || !adaptive_ ||
      !HigherLevelActive(level, now)) {
    return max_rows;
  }
  return std::min(max_rows, LowerBatchCap());
}

int64_t BatchQueue::FillLimit(int64_t own, int64_t cap) const {
  const int64_t fits = LargestFitting(cap, [&](int64_t m) { return FillFits(0, own, m); });
  return std::max(own, fits);
}

std::vector<size_t> BatchQueue::Pick(size_t head, absl::Time now, int64_t* rows,
                                     std::optional<CloseReason>* closed) const {
  const absl::string_view key = tasks_[head]->batch_key();
  std::vector<size_t> order;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (i != head && tasks_[i]->batch_key() == key) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [this](size_t a, size_t b) {
    return tasks_[a]->priority_level < tasks_[b]->priority_level;
  });
  order.insert(order.begin(), head);
  std::vector<size_t> picked;
  const int level = tasks_[head]->priority_level;
  // A split piece has max_batch_size rows: under a smaller cap it runs alone.
  // `limit` is the size without priority isolation, `cap` the size with it:
  // a batch that stops below `limit` only because of isolation closes as
  // kPriorityCap, so the metric shows the rule at work.
  const int64_t limit = std::max(MaxRows(), tasks_[head]->rows());
  const int64_t cap = std::max(CapFor(level, now), tasks_[head]->rows());
  *rows = 0;
  closed->reset();
  int64_t own = 0;  // rows of the head's level or above
  for (size_t i : order) {
    const int64_t add = tasks_[i]->rows();
    const bool fill = tasks_[i]->priority_level > level;
    if (*rows + add > cap || (fill && !FillFits(*rows, own, add))) {
      *closed = *rows + add > limit ? CloseReason::kFull : CloseReason::kPriorityCap;
      break;
    }
    *rows += add;
    if (!fill) own += add;
    picked.push_back(i);
    if (*rows >= cap) {
      *closed = *rows >= limit ? CloseReason::kFull : CloseReason::kPriorityCap;
      break;
    }
  }
  return picked;
}

double BatchQueue::BestRowCost(int64_t rest, int64_t top) const {
  auto per_row = [this](int64_t rows) {
    return absl::ToDoubleSeconds(adaptive_->DeviceCostOf(rows)) / static_cast<double>(rows);
  };
  double best = per_row(top);
  for (int64_t size : options_.allowed_batch_sizes) {
    if (size >= rest && size <= top) best = std::min(best, per_row(size));
  }
  return best;
}

bool BatchQueue::CutsPadding(int64_t rows) const {
  return adaptive_ && options_.policy == BatchingPolicy::kAdaptive &&
         options_.trim_padded_batches && !options_.allowed_batch_sizes.empty() &&
         options_.PaddedRows(rows) != rows;
}

BatchQueue::SplitCost BatchQueue::CostOfSplit(int64_t kept, int64_t rows, absl::Time now,
                                              bool draining) const {
  // Rows expected to arrive while the kept part runs: none while draining
  // or when nothing is expected.
  const double gap = draining ? std::numeric_limits<double>::infinity()
                              : absl::ToDoubleSeconds(adaptive_->arrivals().ExpectedGap(now));
  const double run = absl::ToDoubleSeconds(adaptive_->DeviceCostOf(kept));
  const int64_t rest = rows - kept;
  double joining = 0;
  if (gap <= 0) {
    joining = static_cast<double>(MaxRows());
  } else if (std::isfinite(gap)) {
    joining = run / gap * adaptive_->arrivals().mean_rows();
  }
  SplitCost split;
  split.rest_batch_rows = std::max(
      rest, static_cast<int64_t>(std::min(static_cast<double>(MaxRows()),
                                          static_cast<double>(rest) + joining)));
  split.total = run + static_cast<double>(rest) * BestRowCost(rest, split.rest_batch_rows);
  return split;
}

void BatchQueue::TrimToAllowedSize(Candidate* c, absl::Time now, bool draining) {
  if (c->picked.size() < 2 || !CutsPadding(c->rows)) return;
  std::vector<int64_t> prefix_rows(c->picked.size(), 0);  // rows of picked[0, n)
  for (size_t n = 1; n < c->picked.size(); ++n) {
    prefix_rows[n] = prefix_rows[n - 1] + tasks_[c->picked[n - 1]]->rows();
  }
  double best = kTrimGain * absl::ToDoubleSeconds(adaptive_->DeviceCostOf(c->rows));
  size_t keep = c->picked.size();
  // Largest prefix first: on a tie, fewer rows wait.
  for (size_t n = c->picked.size() - 1; n >= 1; --n) {
    const double total = CostOfSplit(prefix_rows[n], c->rows, now, draining).total;
    if (total < best) {
      best = total;
      keep = n;
    }
  }
  if (keep == c->picked.size()) return;
  // Every kWholeEvery-th cut runs whole instead, so that the figure of the
  // size cutting avoids is measured again: one stalled batch can raise a
  // size's figure by 75 % (BatchCostModel::kMaxStep), and a size that never
  // runs is never corrected.
  if (++cuts_ % kWholeEvery == 0) return;
  c->rows = prefix_rows[keep];
  c->picked.resize(keep);
}

Batch BatchQueue::TakeBatch(const std::vector<size_t>& picked, int64_t rows) {
  // Passed over: an older task of a lower level than the head stays behind.
  const BatchTask& head = *tasks_[picked.front()];
  bool passed = false;
  for (size_t i = 0; i < picked.front() && !passed; ++i) {
    passed = tasks_[i]->priority_level > head.priority_level &&
             std::find(picked.begin(), picked.end(), i) == picked.end();
  }
  passed_over_ = passed ? passed_over_ + 1 : 0;
  Batch batch;
  batch.rows = rows;
  batch.padded_rows = options_.PaddedRows(rows);
  batch.tasks.reserve(picked.size());
  for (size_t i : picked) {
    level_rows_[tasks_[i]->priority_level - 1] -= tasks_[i]->rows();
    batch.tasks.push_back(std::move(tasks_[i]));
  }
  // Erase the moved-from slots, keeping the others' order.
  tasks_.erase(std::remove(tasks_.begin(), tasks_.end(), nullptr), tasks_.end());
  queued_rows_ -= rows;
  return batch;
}

std::optional<CloseReason> BatchQueue::Consider(size_t head, absl::Time now, bool draining,
                                               Candidate* c, absl::Time* wake_at) const {
  std::optional<CloseReason> closed;
  c->picked = Pick(head, now, &c->rows, &closed);
  absl::Time oldest = absl::InfiniteFuture();
  for (size_t i : c->picked) oldest = std::min(oldest, tasks_[i]->enqueue_time);
  if (closed.has_value()) return closed;
  if (draining) return CloseReason::kDraining;
  if (adaptive_ && options_.policy == BatchingPolicy::kAdaptive &&
      tasks_[head]->priority_level < options_.priority_levels) {
    return CloseReason::kNoGain;  // a higher level is not held to fill its batch
  }
  absl::Time expiry = oldest + options_.max_queue_delay;
  if (options_.latency_target > absl::ZeroDuration()) {
    expiry = std::min(expiry, oldest + options_.latency_target - 2 * EstimatedCost(c->rows));
  }
  return PartialClose(c->rows, now, expiry, wake_at);
}

absl::Time BatchQueue::EarliestDeadline() const {
  absl::Time earliest = absl::InfiniteFuture();
  for (const auto& t : tasks_) earliest = std::min(earliest, t->EffectiveDeadline());
  return earliest;
}

BatchQueue::PollResult BatchQueue::PollDeadOnly(absl::Time now) {
  PollResult result;
  RemoveDead(now, &result);
  result.wake_at = EarliestDeadline();
  return result;
}

BatchQueue::PollResult BatchQueue::Poll(absl::Time now, bool draining) {
  PollResult result;
  RemoveDead(now, &result);
  if (tasks_.empty()) return result;

  Candidate c;
  absl::Time wake_at = absl::InfiniteFuture();
  const size_t head = HeadIndex();
  std::optional<CloseReason> reason = Consider(head, now, draining, &c, &wake_at);
  if (!reason.has_value() && head != 0) {
    // The favoured batch is still forming: rather than leave the device idle,
    // run the oldest task's batch if that one is due.
    Candidate oldest;
    absl::Time oldest_wake = absl::InfiniteFuture();
    reason = Consider(0, now, draining, &oldest, &oldest_wake);
    if (reason.has_value()) c = std::move(oldest);
    wake_at = std::min(wake_at, oldest_wake);
  }
  if (!reason.has_value()) {
    result.wake_at = std::min(wake_at, EarliestDeadline());
    return result;
  }
  const int64_t closed_rows = c.rows;
  TrimToAllowedSize(&c, now, draining);
  Batch batch = TakeBatch(c.picked, c.rows);
  batch.rows_left_by_cut = closed_rows - c.rows;
  batch.reason = *reason;
  batch.formed_at = now;
  result.batch = std::move(batch);
  return result;
}

}  // namespace metalserve
