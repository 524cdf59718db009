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
//  * Otherwise Poll says when to look again: the oldest task's delay expiry
//    or the earliest deadline, whichever is first.
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
#include "server/batcher/batch_task.h"

namespace metalserve {

struct BatcherOptions {
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

  absl::Status Validate() const;
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
  // the caller: INVALID_ARGUMENT when it alone exceeds max_batch_size,
  // UNAVAILABLE when the queue is full.
  absl::Status Admit(std::unique_ptr<BatchTask>* task, absl::Time now);

  struct PollResult {
    std::vector<std::unique_ptr<BatchTask>> expired;    // deadline passed
    std::vector<std::unique_ptr<BatchTask>> cancelled;  // caller gone
    std::optional<Batch> batch;
    // When Poll should next be called if nothing else happens.
    absl::Time wake_at = absl::InfiniteFuture();
  };
  PollResult Poll(absl::Time now, bool draining);

  int64_t queued_rows() const { return queued_rows_; }
  bool empty() const { return tasks_.empty(); }
  const BatcherOptions& options() const { return options_; }

 private:
  void RemoveDead(absl::Time now, PollResult* result);

  const BatcherOptions options_;
  std::deque<std::unique_ptr<BatchTask>> tasks_;
  int64_t queued_rows_ = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_BATCHER_BATCH_QUEUE_H_
