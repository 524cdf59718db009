// BatchQueue: the batch formation policy, free of threads and clocks.
//
// Holds admitted tasks in arrival order, bounded in rows. Poll(now) answers
// what is due at `now`: tasks whose deadline passed or whose caller left
// (to be aborted), and at most one batch when one should close:
//
//  * The batch is built from the oldest task's key, taking the tasks of that
//    key in arrival order while their rows fit in max_batch_size.
//  * It closes at once when full (max_batch_size reached, or the next task of
//    that key does not fit); when max_queue_delay has passed since the oldest
//    task was admitted; immediately when max_queue_delay is zero; and
//    immediately while draining.
//  * With policy kAdaptive, it also closes before the delay expires as soon
//    as waiting is not expected to pay (reason kNoGain): the rule, its
//    formula and why are in adaptive_policy.h. max_queue_delay stays the
//    bound.
//  * Otherwise Poll says when to look again: the oldest task's delay expiry,
//    the earliest deadline or when the adaptive policy reconsiders, whichever
//    is first.
//
// The batcher calls Poll only when an executor is free, so a batch is formed
// when it can run, never earlier.
//
// Thread-safety: none; the owner (Batcher) serialises access.
#ifndef METALSERVE_SERVER_BATCHER_BATCH_QUEUE_H_
#define METALSERVE_SERVER_BATCHER_BATCH_QUEUE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/batcher/adaptive_policy.h"
#include "server/batcher/batch_task.h"

namespace metalserve {

// How a partial batch is closed before max_queue_delay: kFixed never (it
// waits the whole delay), kAdaptive when waiting no longer pays.
enum class BatchingPolicy { kFixed, kAdaptive };
absl::string_view BatchingPolicyName(BatchingPolicy policy);

struct BatcherOptions {
  // Default kFixed here (metalserve's --batching flag defaults to adaptive).
  BatchingPolicy policy = BatchingPolicy::kFixed;
  // Measured cost of a batch per size (the runtime's warm-up), seeding the
  // adaptive policy's cost curve; refined from every batch. May be empty.
  std::vector<BatchCostPoint> batch_costs;
  // Most rows in one model batch. Default 32.
  int64_t max_batch_size = 32;
  // Longest time the oldest waiting task waits for others to join its batch.
  // Zero: a free executor takes whatever waits. Default 2 ms.
  absl::Duration max_queue_delay = absl::Milliseconds(2);
  // Batch sizes the model runs at, ascending. A batch is padded up to the
  // next allowed size. Empty: no padding. When set, the largest must equal
  // max_batch_size.
  std::vector<int64_t> allowed_batch_sizes;
  // Most rows waiting in the queue; beyond it new tasks are refused with
  // UNAVAILABLE. Default 1024.
  int64_t max_queue_size = 1024;
  // Executor threads forming and processing batches. Default 1.
  int num_executors = 1;
  // Most rows one request may have. A request with more than max_batch_size
  // rows (and at most this many) is split into pieces of max_batch_size rows
  // that run in as many batches as needed (BatchTask::Split); above it the
  // request is refused with INVALID_ARGUMENT. 0: max_queue_size. At most
  // max_queue_size.
  int64_t max_request_rows = 0;

  absl::Status Validate() const;
  // max_request_rows, or max_queue_size when 0.
  int64_t MaxRequestRows() const {
    return max_request_rows > 0 ? max_request_rows : max_queue_size;
  }
  // Rows a batch of `rows` is padded to.
  int64_t PaddedRows(int64_t rows) const;
};

class BatchQueue {
 public:
  // A task cancelled within this long before its deadline counts as expired
  // (its client gave up at its own deadline, which precedes the server's by
  // the call's transit time).
  static constexpr absl::Duration kDeadlineSkew = absl::Milliseconds(50);

  // Whether `task` may still run at `now`. The deadline is checked first:
  // gRPC also marks a call whose deadline passed as cancelled, and its caller
  // should hear DEADLINE_EXCEEDED; a cancellation within kDeadlineSkew of the
  // deadline is the deadline's. Used by the queue and again by the executor
  // just before a formed batch runs.
  enum class Liveness { kLive, kExpired, kCancelled };
  static Liveness LivenessOf(const BatchTask& task, absl::Time now);

  explicit BatchQueue(BatcherOptions options);

  // Admits `*task` at `now` (taking ownership) or refuses it, leaving it with
  // the caller: INVALID_ARGUMENT when it has more than max_request_rows rows
  // (or more than max_batch_size and cannot be split), UNAVAILABLE when the
  // queue has no room for all its rows. A task of more than max_batch_size
  // rows is admitted as its pieces (BatchTask::Split), all at once.
  absl::Status Admit(std::unique_ptr<BatchTask>* task, absl::Time now);

  struct PollResult {
    std::vector<std::unique_ptr<BatchTask>> expired;    // deadline passed
    std::vector<std::unique_ptr<BatchTask>> cancelled;  // caller gone
    std::optional<Batch> batch;
    // When Poll should next be called if nothing else happens.
    absl::Time wake_at = absl::InfiniteFuture();
  };
  PollResult Poll(absl::Time now, bool draining);

  // Adaptive policy inputs (ignored under kFixed): when the batches handed to
  // the device are expected to be done, and the measured cost of one that
  // ran at `padded_rows`.
  void SetDeviceFreeAt(absl::Time t);
  void ObserveBatch(int64_t padded_rows, absl::Duration cost);
  // Estimated cost of a batch of `rows`; zero under kFixed.
  absl::Duration EstimatedCost(int64_t rows) const;
  const AdaptivePolicy* adaptive() const { return adaptive_ ? &*adaptive_ : nullptr; }

  int64_t queued_rows() const { return queued_rows_; }
  bool empty() const { return tasks_.empty(); }
  const BatcherOptions& options() const { return options_; }

 private:
  void RemoveDead(absl::Time now, PollResult* result);

  // Whether a partial batch of `rows` (not full, not draining) closes now.
  std::optional<CloseReason> PartialClose(int64_t rows, absl::Time now,
                                          absl::Time delay_expiry, absl::Time* wake_at) const;

  const BatcherOptions options_;
  std::optional<AdaptivePolicy> adaptive_;
  std::deque<std::unique_ptr<BatchTask>> tasks_;
  int64_t queued_rows_ = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_BATCHER_BATCH_QUEUE_H_
