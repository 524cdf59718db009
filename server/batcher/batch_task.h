// What the batcher knows of a request: its rows, which requests it may share
// a batch with, its deadline and whether its caller still waits.
//
// The batcher is generic over this interface and knows nothing of gRPC or
// tensors. A task handed to the batcher is answered exactly once: either the
// batcher calls Abort() (deadline passed or caller gone while queued, server
// draining with nowhere to run it), or the task reaches the batch processor,
// which then owns answering it.
#ifndef METALSERVE_SERVER_BATCHER_BATCH_TASK_H_
#define METALSERVE_SERVER_BATCHER_BATCH_TASK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace metalserve {

class BatchTask {
 public:
  virtual ~BatchTask() = default;

  // Rows this task contributes to a batch (>= 1).
  virtual int64_t rows() const = 0;
  // Tasks share a batch only when their keys are equal (e.g. the dtypes and
  // non-batch dimensions of every input).
  virtual absl::string_view batch_key() const = 0;
  // The caller's deadline; InfiniteFuture() for none.
  virtual absl::Time deadline() const { return absl::InfiniteFuture(); }
  // True once the caller has cancelled or gone away.
  virtual bool IsCancelled() const { return false; }
  // Priority level asked for: 1 = highest; 0 = none (the queue's default
  // level). Checked against the queue's range at admission.
  virtual int priority() const { return 0; }
  // Answers the task without running it. Called at most once, never with a
  // batcher lock held.
  virtual void Abort(const absl::Status& status) = 0;
  // Whether the batcher may run this task on the thread that submits it
  // (BatcherOptions::inline_max_cost): only a caller whose thread may do
  // short work before Submit returns, and that touches nothing of the task
  // after a successful Submit, says yes. Default: no.
  virtual bool may_run_on_submitter() const { return false; }

  // Splits `*self` (this task) into pieces, in row order: the first of at
  // most `first_rows` rows (so that it fills the room left in the batch it
  // joins), the others of at most `piece_rows`, and moves the task into
  // them: the pieces run in batches like any task, and the task is answered
  // once, when every piece is done (its rows reassembled in order) or at the
  // first piece that fails or is aborted (with that piece's status; the
  // other pieces are then dropped: they report IsCancelled and their
  // answers are ignored). Every piece has this task's batch key and
  // deadline, so the deadline covers all of them. Default: the task cannot
  // be split; returns nothing and keeps `*self`.
  virtual std::vector<std::unique_ptr<BatchTask>> Split(
      int64_t /*first_rows*/, int64_t /*piece_rows*/, std::unique_ptr<BatchTask>* /*self*/) {
    return {};
  }

  // Set by the batcher when the task is admitted: when, at which priority
  // level, and the level's default timeout as a deadline (InfiniteFuture
  // when the level has none).
  absl::Time enqueue_time;
  int priority_level = 1;
  absl::Time level_deadline = absl::InfiniteFuture();

  // The deadline the batcher enforces: the caller's or the level's, the
  // earlier.
  absl::Time EffectiveDeadline() const {
    const absl::Time d = deadline();
    return d < level_deadline ? d : level_deadline;
  }
};

// Why a batch was closed.
enum class CloseReason {
  kFull,          // max_batch_size reached or the next task does not fit
  kDelayExpired,  // max_queue_delay passed since the oldest task arrived
  kNoDelay,       // executor free, max_queue_delay is zero: take what waits
  kDraining,      // shutting down: run what was accepted without waiting
  kNoGain,        // adaptive: waiting for more rows is not expected to pay
  kPriorityCap,   // priority isolation stopped it below its size otherwise:
                  // the lower-batch cap or the fill ratio (batch_queue.h)
};
absl::string_view CloseReasonName(CloseReason reason);

// A batch handed to the processor. Tasks keep their arrival order; the
// processor must answer every one of them exactly once.
struct Batch {
  std::vector<std::unique_ptr<BatchTask>> tasks;
  int64_t rows = 0;         // sum of the tasks' rows
  int64_t padded_rows = 0;  // rows after padding to an allowed size (>= rows)
  CloseReason reason = CloseReason::kFull;
  absl::Time formed_at;
  // Rows the adaptive policy's cut back from padding left queued for a
  // later batch (batch_queue.h, "Cut back from padding"); 0: not cut.
  int64_t rows_left_by_cut = 0;
  // Run on the thread that submitted its one task (BatcherOptions::
  // inline_max_cost), not an executor's.
  bool on_submitter = false;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_BATCHER_BATCH_TASK_H_
