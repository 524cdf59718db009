#include "server/batcher/batcher.h"

#include <algorithm>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/status_macros.h"

namespace metalserve {
namespace {

struct GenerationChanged {
  const int64_t* generation;
  int64_t seen;
  static bool Holds(GenerationChanged* g) { return *g->generation != g->seen; }
};

// `status` is made only when there is a task to abort: most polls have none,
// and a status with a message is an allocation.
void AbortAll(std::vector<std::unique_ptr<BatchTask>>& tasks,
              absl::FunctionRef<absl::Status()> status) {
  if (tasks.empty()) return;
  const absl::Status s = status();
  for (auto& t : tasks) t->Abort(s);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Batcher>> Batcher::Create(
    BatcherOptions options, Clock* clock, ProcessFn process, IdleFn on_idle,
    absl::Duration idle_tick, DepthFn on_depth, DeviceIdleFn device_idle) {
  RETURN_IF_ERROR(options.Validate());
  if (!process) return absl::InvalidArgumentError("batch processor is empty");
  if (clock == nullptr) clock = Clock::RealClock();
  std::unique_ptr<Batcher> b(
      new Batcher(std::move(options), clock, std::move(process),
                  std::move(on_idle), idle_tick, std::move(on_depth),
                  std::move(device_idle)));
  const int n = b->options_.num_executors;
  for (int i = 0; i < n; ++i) {
    b->executors_.emplace_back([raw = b.get()] { raw->ExecutorLoop(); });
  }
  return b;
}

Batcher::Batcher(BatcherOptions options, Clock* clock, ProcessFn process,
                 IdleFn on_idle, absl::Duration idle_tick, DepthFn on_depth,
                 DeviceIdleFn device_idle)
    : options_(options),
      clock_(clock),
      process_(std::move(process)),
      on_idle_(std::move(on_idle)),
      idle_tick_(idle_tick),
      on_depth_(std::move(on_depth)),
      device_idle_(std::move(device_idle)),
      queue_(std::move(options)) {}

Batcher::~Batcher() { Shutdown(); }

absl::Status Batcher::Submit(std::unique_ptr<BatchTask>* task) {
  // The device probe is asked before the lock (it takes the device's own);
  // a device that turns busy meanwhile costs this call one wait. Batched
  // models under the adaptive policy too, at light load (QuietForALoneRow;
  // its batch half read here first, so that load skips the probe).
  const bool unbatched = options_.max_batch_size == 1;
  const bool may_run_here =
      options_.inline_max_cost > absl::ZeroDuration() &&
      (unbatched || (options_.policy == BatchingPolicy::kAdaptive &&
                     recent_batches_single_.load(std::memory_order_relaxed))) &&
      *task != nullptr && (*task)->may_run_on_submitter() && device_idle_ != nullptr;
  const bool inline_candidate = may_run_here && device_idle_();
  {
    absl::MutexLock l(&mu_);
    if (stopping_) {
      return absl::UnavailableError("server is shutting down; retry elsewhere");
    }
    const bool was_empty = queue_.empty();
    const absl::Time now = clock_->TimeNow();
    RETURN_IF_ERROR(queue_.Admit(task, now));
    queued_rows_.store(queue_.queued_rows(), std::memory_order_relaxed);
    if (inline_candidate && was_empty && MayRunOnSubmitter() &&
        (unbatched || QuietForALoneRow(now))) {
      ++submitters_running_;
      RunOnSubmitter(now);
      // Calls that arrived meanwhile, while they stay cheap, the device
      // idle and this thread's time here within the hold bound. Unbatched
      // only: a batched model's calls that arrived meanwhile are a batch
      // for an executor to form (woken below), not rows to run one by one.
      const absl::Time hold_until = now + kSubmitterHold * options_.inline_max_cost;
      for (int n = 0; unbatched && options_.inline_follow_ons && n < kMaxFollowOns &&
                      MayFollowOn() &&
                      clock_->TimeNow() + queue_.EstimatedCost(1) <= hold_until;
           ++n) {
        mu_.Unlock();
        const bool idle = device_idle_();
        mu_.Lock();
        if (!idle || !MayFollowOn()) break;
        RunOnSubmitter(clock_->TimeNow());
      }
      --submitters_running_;
      // What is left (a call the follow-ons did not take) is the executors'.
      if (!queue_.empty()) ++generation_;
      return absl::OkStatus();
    }
    // A call that arrives while another runs on its submitter is that
    // submitter's to take when it is done (see kSubmitterHold): no executor
    // is woken for it. The submitter wakes one if it does not take it.
    // Without follow-ons (inline_follow_ons off) it wakes one at once.
    if (!(may_run_here && unbatched && options_.inline_follow_ons && submitters_running_ > 0 &&
          CheapEnoughToRunHere())) {
      ++generation_;
    }
  }
  ReportDepth();
  return absl::OkStatus();
}

bool Batcher::MayRunOnSubmitter() const {
  return queue_.queued_rows() == 1 && batches_in_processor_ == 0 && CheapEnoughToRunHere();
}

bool Batcher::QuietForALoneRow(absl::Time now) const {
  const AdaptivePolicy* policy = queue_.adaptive();
  return policy != nullptr && recent_batch_rows_ < kLoneRowMaxRecentRows &&
         policy->arrivals().ExpectedGap(now) >= kLoneRowQuietRuns * queue_.EstimatedCost(1);
}

bool Batcher::MayFollowOn() const {
  return !stopping_ && queue_.queued_rows() > 0 && batches_in_processor_ == 0 &&
         CheapEnoughToRunHere();
}

bool Batcher::CheapEnoughToRunHere() const {
  if (batches_done_ < kSubmitterWarmBatches) return false;
  const absl::Duration cost = queue_.EstimatedCost(1);
  return cost > absl::ZeroDuration() && cost <= options_.inline_max_cost;
}

void Batcher::RunOnSubmitter(absl::Time now) {
  BatchQueue::PollResult r = queue_.Poll(now, /*draining=*/false);
  queued_rows_.store(queue_.queued_rows(), std::memory_order_relaxed);
  if (r.batch.has_value()) {
    r.batch->on_submitter = true;
    ran_on_submitters_.fetch_add(1, std::memory_order_relaxed);
  }
  RunPolled(std::move(r), now, /*wake_executors=*/false);
}

void Batcher::ReportDepth() {
  if (!on_depth_) return;
  absl::MutexLock l(&depth_mu_);
  on_depth_(queued_rows());
}

void Batcher::Shutdown() {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    ++generation_;
  }
  for (auto& t : executors_) t.join();
  executors_.clear();
}

absl::Duration Batcher::BatchStarted(int64_t padded_rows, absl::Time now) {
  const absl::Duration cost = queue_.EstimatedDeviceCost(padded_rows);
  queue_.SetDeviceFreeAt(device_load_.Started(now, cost));
  return cost;
}

void Batcher::ObserveBatchCost(int64_t padded_rows, absl::Duration cost) {
  absl::MutexLock l(&mu_);
  queue_.ObserveBatch(padded_rows, cost);
}

void Batcher::BatchDone(int64_t padded_rows, absl::Duration cost, absl::Time start,
                        absl::Time end) {
  queue_.ObserveOccupancy(padded_rows, end - start);
  queue_.SetDeviceFreeAt(device_load_.Done(end, cost));
}

void Batcher::RunPolled(BatchQueue::PollResult r, absl::Time now, bool wake_executors) {
  const bool ran = r.batch.has_value();
  const int64_t padded = ran ? r.batch->padded_rows : 0;
  const int64_t rows = ran ? r.batch->rows : 0;
  const absl::Duration cost = ran ? BatchStarted(padded, now) : absl::ZeroDuration();
  if (ran) {
    ++batches_in_processor_;
    queue_.AddRowsInFlight(rows);
    recent_batch_rows_ += (static_cast<double>(rows) - recent_batch_rows_) / 8;
    recent_batches_single_.store(recent_batch_rows_ < kLoneRowMaxRecentRows,
                                 std::memory_order_relaxed);
  }
  mu_.Unlock();
  ReportDepth();  // every removal: batch, expiry, cancellation, drain
  AbortAll(r.expired, [] {
    return absl::DeadlineExceededError(
        "deadline passed while the request waited in the queue; it was not run");
  });
  AbortAll(r.cancelled, [] {
    return absl::CancelledError("request cancelled by the client before it ran");
  });
  if (ran) process_(std::move(*r.batch));
  mu_.Lock();
  if (ran) {
    BatchDone(padded, cost, now, clock_->TimeNow());
    --batches_in_processor_;
    ++batches_done_;
    queue_.AddRowsInFlight(-rows);
    // An executor held back by the in-flight limit may go, if there is
    // anything to take: waking idle executors for an empty queue would cost
    // a thread switch per batch. A submitter's run wakes them when it ends
    // (Submit), so that they do not race it for the calls it follows on with.
    if (wake_executors && !queue_.empty()) ++generation_;
  }
}

void Batcher::ExecutorLoop() {
  absl::Time next_idle_call = absl::InfinitePast();  // due at once when idle
  mu_.Lock();
  while (true) {
    const absl::Time now = clock_->TimeNow();
    // Held back by the in-flight limit (BatcherOptions::rows_per_slot): only
    // the dead leave the queue; a batch coming back or a new arrival
    // (generation_) lets this executor look again.
    const bool held = !stopping_ && batches_in_processor_ >= queue_.ExecutorsInUse();
    BatchQueue::PollResult r = held ? queue_.PollDeadOnly(now) : queue_.Poll(now, stopping_);
    queued_rows_.store(queue_.queued_rows(), std::memory_order_relaxed);
    const bool have_work =
        r.batch.has_value() || !r.expired.empty() || !r.cancelled.empty();
    if (have_work) {
      RunPolled(std::move(r), now, /*wake_executors=*/true);
      next_idle_call = absl::InfinitePast();
      continue;
    }
    if (stopping_ && queue_.empty()) break;
    if (on_idle_ && queue_.empty()) {
      if (now >= next_idle_call) {
        next_idle_call = now + idle_tick_;
        mu_.Unlock();
        on_idle_();
        mu_.Lock();
        continue;
      }
      r.wake_at = std::min(r.wake_at, next_idle_call);
    }
    GenerationChanged changed{&generation_, generation_};
    clock_->AwaitWithDeadline(
        &mu_, absl::Condition(&GenerationChanged::Holds, &changed), r.wake_at);
  }
  mu_.Unlock();
}

}  // namespace metalserve
