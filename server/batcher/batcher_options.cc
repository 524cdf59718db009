// BatcherOptions: validation and the small lookups on it (level of a
// priority, padded size), and the names of the close reasons and policies.
// Split from batch_queue.cc, which keeps the queue itself.
#include "server/batcher/batch_queue.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace metalserve {

absl::string_view CloseReasonName(CloseReason reason) {
  switch (reason) {
    case CloseReason::kFull: return "full";
    case CloseReason::kDelayExpired: return "delay_expired";
    case CloseReason::kNoDelay: return "no_delay";
    case CloseReason::kDraining: return "draining";
    case CloseReason::kNoGain: return "no_gain";
    case CloseReason::kPriorityCap: return "priority_cap";
  }
  return "unknown";
}

absl::string_view BatchingPolicyName(BatchingPolicy policy) {
  return policy == BatchingPolicy::kAdaptive ? "adaptive" : "fixed";
}

namespace {

absl::Status ValidatePriorities(const BatcherOptions& o) {
  if (o.priority_levels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("priority_levels must be >= 1, got ", o.priority_levels));
  }
  if (o.default_priority < 0 || o.default_priority > o.priority_levels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "default_priority must be in [1, priority_levels = ", o.priority_levels,
        "] (0: the lowest), got ", o.default_priority));
  }
  if (o.priority_queue_rows.size() > static_cast<size_t>(o.priority_levels) ||
      o.priority_timeouts.size() > static_cast<size_t>(o.priority_levels)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "priority_queue_rows and priority_timeouts take at most one entry per level (",
        o.priority_levels, "), got ", o.priority_queue_rows.size(), " and ",
        o.priority_timeouts.size()));
  }
  for (int64_t rows : o.priority_queue_rows) {
    if (rows < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("priority_queue_rows entries must be >= 0, got ", rows));
    }
  }
  for (absl::Duration d : o.priority_timeouts) {
    if (d < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "priority_timeouts entries must be >= 0, got ", absl::FormatDuration(d)));
    }
  }
  if (o.latency_target < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "latency_target must be >= 0, got ", absl::FormatDuration(o.latency_target)));
  }
  if (o.latency_target > absl::ZeroDuration() && !o.batch_costs.empty()) {
    const BatchCostPoint& smallest = *std::min_element(
        o.batch_costs.begin(), o.batch_costs.end(),
        [](const BatchCostPoint& a, const BatchCostPoint& b) { return a.rows < b.rows; });
    if (o.latency_target < smallest.cost) {
      return absl::InvalidArgumentError(absl::StrCat(
          "latency_target ", absl::FormatDuration(o.latency_target),
          " is below the measured cost of a batch of ", smallest.rows, " (",
          absl::FormatDuration(smallest.cost), "): no request could meet it"));
    }
  }
  if (o.priority_lower_batch_cost < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "priority_lower_batch_cost must be >= 0 (0: off), got ",
        absl::FormatDuration(o.priority_lower_batch_cost)));
  }
  // Written so that NaN fails too.
  if (!(o.priority_fill_cost_ratio == 0 ||
        (o.priority_fill_cost_ratio >= 1 && std::isfinite(o.priority_fill_cost_ratio)))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "priority_fill_cost_ratio must be 0 (off) or a finite number >= 1, got ",
        o.priority_fill_cost_ratio));
  }
  if (o.priority_active_window <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "priority_active_window must be > 0, got ",
        absl::FormatDuration(o.priority_active_window)));
  }
  if (o.lower_priority_share_every < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lower_priority_share_every must be >= 2, got ", o.lower_priority_share_every));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> BatcherOptions::LevelOf(int priority) const {
  if (priority == 0) return default_priority > 0 ? default_priority : priority_levels;
  if (priority < 1 || priority > priority_levels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "priority ", priority, " is out of range [1, ", priority_levels,
        "] (1 = highest; 0 or unset = the default level)"));
  }
  return priority;
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
  if (inline_max_cost < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inline_max_cost must be >= 0, got ", absl::FormatDuration(inline_max_cost)));
  }
  if (max_request_rows < 0 || max_request_rows > max_queue_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_request_rows must be in [0, max_queue_size = ", max_queue_size,
        "] (0: max_queue_size), got ", max_request_rows));
  }
  RETURN_IF_ERROR(ValidatePriorities(*this));
  if (num_executors < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_executors must be >= 1, got ", num_executors));
  }
  if (rows_per_slot < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows_per_slot must be >= 0 (0: off), got ", rows_per_slot));
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

int BatcherOptions::InFlightLimit(int64_t rows_in_server) const {
  if (rows_per_slot <= 0) return num_executors;
  const int64_t rows = std::max<int64_t>(rows_in_server, 0);
  const int64_t wanted = rows / rows_per_slot + (rows % rows_per_slot != 0 ? 1 : 0);
  const int64_t floor = std::min(2, num_executors);
  return static_cast<int>(std::clamp<int64_t>(wanted, floor, num_executors));
}

int64_t BatcherOptions::PaddedRows(int64_t rows) const {
  for (int64_t size : allowed_batch_sizes) {
    if (size >= rows) return size;
  }
  return rows;
}

}  // namespace metalserve
