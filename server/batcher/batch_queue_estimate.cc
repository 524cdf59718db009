// BatchQueue's completion estimate under a latency target (batch_queue.h
// says the rule): the batches that run before a request, given the rows
// queued at its level and above, and when its own batch would end. Apart
// from batch_queue.cc only for size; the same class.
#include "server/batcher/batch_queue.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"

namespace metalserve {

BatchQueue::BatchPlan BatchQueue::PlanThrough(int level, int64_t rows, absl::Time now) const {
  std::vector<int64_t> left(level_rows_.begin(), level_rows_.begin() + level);
  BatchPlan plan;
  const auto ahead = [&](int64_t size, int64_t count) {
    plan.batches_before += count;
    plan.cost_before += count * adaptive_->CostOf(size);
    plan.device_before += count * adaptive_->DeviceCostOf(size);
  };
  int64_t last = 0;        // the batch formed last so far
  int64_t last_limit = 0;  // the rows that batch may grow to
  for (int h = 1; h <= level; ++h) {
    if (left[h - 1] == 0) continue;  // none, or all rode in higher batches
    if (last > 0) ahead(last, 1);
    // Batches headed by level h: whole ones of its cap, then one of the
    // rest that lower rows fill while the cap and the fill ratio allow.
    const int64_t cap = CapFor(h, now);
    const int64_t whole = (left[h - 1] - 1) / cap;
    ahead(cap, whole);
    last = left[h - 1] - whole * cap;
    left[h - 1] = 0;
    const int64_t fill_to = FillLimit(last, cap);
    for (int l = h + 1; l <= level && last < fill_to; ++l) {
      const int64_t take = std::min(left[l - 1], fill_to - last);
      last += take;
      left[l - 1] -= take;
    }
    // Rows of the batch's own level join it up to the cap; lower ones up
    // to the fill limit.
    last_limit = h == level ? cap : fill_to;
  }
  // The request comes last and runs whole (Pick never splits a task): it
  // joins the last batch where it fits, else heads one of its own rows.
  if (last > 0 && last + rows <= last_limit) {
    plan.own_rows = last + rows;
  } else {
    if (last > 0) ahead(last, 1);
    plan.own_rows = rows;
    return plan;
  }
  // The cut from padding leaves the newest rows out first, so it leaves the
  // request out whenever it cuts its batch: the rows ahead of it (counted
  // as splittable anywhere, one-row requests) run as a batch of their own,
  // and the request rides in the rest's batch, of as many rows as the cut
  // expected it to reach. The best prefix within one padded size is its
  // largest (same run, fewer rows left), so only the allowed sizes below
  // the request and the whole of the rows ahead are tried.
  const int64_t whole = plan.own_rows;
  if (!CutsPadding(whole)) return plan;
  double best = kTrimGain * absl::ToDoubleSeconds(adaptive_->DeviceCostOf(whole));
  std::optional<int64_t> kept;
  std::optional<SplitCost> split;
  const auto consider = [&](int64_t k) {
    const SplitCost s = CostOfSplit(k, whole, now, /*draining=*/false);
    if (s.total < best) {  // largest k first, so a tie keeps the larger
      best = s.total;
      kept = k;
      split = s;
    }
  };
  consider(whole - rows);
  for (int64_t size : options_.allowed_batch_sizes) {
    if (size < whole - rows) consider(size);
  }
  if (kept.has_value()) {
    ahead(*kept, 1);
    plan.own_rows = std::min(split->rest_batch_rows, last_limit);
  }
  return plan;
}

absl::Duration BatchQueue::EstimateCompletion(const BatchPlan& plan, int executors,
                                              absl::Time now) const {
  const absl::Duration busy = std::max(adaptive_->device_free_at() - now, absl::ZeroDuration());
  // Executors run batches side by side: the work before the request's own
  // batch is shared among as many as the in-flight limit lets run for the
  // rows in the server (all of them when rows_per_slot is 0), then its batch
  // takes its whole cost.
  const absl::Duration spread =
      (busy + plan.cost_before) / executors + adaptive_->CostOf(plan.own_rows);
  // The device runs one forward at a time, whatever the executors do.
  const absl::Duration device =
      busy + plan.device_before + adaptive_->DeviceCostOf(plan.own_rows);
  return std::max(spread, device);
}

absl::Status BatchQueue::CheckCompletionEstimate(const BatchTask& task, absl::Time now) const {
  if (options_.latency_target <= absl::ZeroDuration() || !adaptive_) return absl::OkStatus();
  int64_t ahead = 0;
  for (int l = 1; l <= task.priority_level; ++l) ahead += level_rows_[l - 1];
  const BatchPlan plan = PlanThrough(task.priority_level, task.rows(), now);
  // The request's own rows count: once queued they may let one more run.
  const int executors = ExecutorsInUse(task.rows());
  const absl::Duration estimate = EstimateCompletion(plan, executors, now);
  // With nothing queued ahead, only the caller's deadline refuses: the
  // estimate is then the cost curve's alone, and running the request is
  // what corrects a curve that one slow batch inflated (before this, an
  // inflated curve refused every request, so nothing ran to correct it).
  const absl::Time deadline = ahead == 0 ? task.EffectiveDeadline()
      : std::min(task.EffectiveDeadline(), now + options_.latency_target);
  if (now + estimate <= deadline) return absl::OkStatus();
  const int64_t cap = CapFor(task.priority_level, now);
  return absl::DeadlineExceededError(absl::StrCat(
      "refused at once: estimated to finish in ", absl::FormatDuration(estimate), " (device busy ",
      absl::FormatDuration(std::max(adaptive_->device_free_at() - now, absl::ZeroDuration())),
      ", ", ahead, " rows queued ahead at priority <= ", task.priority_level, " in ",
      plan.batches_before, " batch(es) before its own of ", plan.own_rows,
      " rows, its level's batches of up to ", cap, " rows at ",
      absl::FormatDuration(adaptive_->CostOf(cap)), " on ", executors,
      " executor(s)), after its deadline in ", absl::FormatDuration(deadline - now),
      " (latency_target ", absl::FormatDuration(options_.latency_target), ")"));
}

}  // namespace metalserve
