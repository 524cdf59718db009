// InferTask: a request on its way through the batcher to the runtime, as the
// batch executor sees it, whichever protocol it came in on.
//
// Ownership: the batcher owns a task from admission until it is answered
// (Abort) or handed to the executor in a Batch, which then owns it; the task
// is destroyed right after its Finish/Abort, and its input bytes (views into
// the request message) must outlive it. Thread-safety: a task is used by one
// thread at a time (whoever owns it); IsCancelled may be called from any.
// Destruction does not answer the call: every task is answered exactly once
// before it is destroyed.
#ifndef METALSERVE_SERVER_SERVICE_INFER_TASK_H_
#define METALSERVE_SERVER_SERVICE_INFER_TASK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/batcher/batch_task.h"
#include "common/tensor.h"

namespace metalserve {

// A validated input: its bytes stay in the request message, which outlives
// the task.
struct InputView {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;  // batch first
  absl::string_view data;
  // When not empty: the bytes in order, in several pieces (data is then
  // empty), views into gRPC's received slices (sliced_request.h).
  std::vector<absl::string_view> pieces;
};

// Server-side timing of one request, reported back to the caller.
struct RunStats {
  absl::Duration queue_time;    // admission to batch start
  absl::Duration compute_time;  // the batch's Run
  int64_t batch_rows = 0;       // rows of the model batch, padding included
};

class InferTask : public BatchTask {
 public:
  // Inputs in the model's input order, all with rows() rows.
  virtual const std::vector<InputView>& inputs() const = 0;
  // Answers the task with its own rows of every output, or an error. Called
  // exactly once by the executor (or Abort() by the batcher instead).
  virtual void Finish(absl::StatusOr<std::vector<Tensor>> outputs,
                      const RunStats& stats) = 0;

  // Pieces (the first of at most `first_rows` rows, the others of at most
  // `piece_rows`) whose inputs are row ranges of this task's (views, no
  // copy); see BatchTask::Split. When every piece is done
  // this task is finished with each output's pieces concatenated in row
  // order, its queue time the longest of the pieces', its compute time their
  // sum. Defined in split_task.cc; every front end's task inherits it.
  std::vector<std::unique_ptr<BatchTask>> Split(
      int64_t first_rows, int64_t piece_rows, std::unique_ptr<BatchTask>* self) override;
};

// Key under which requests may share a batch: dtype and non-batch dims of
// every input.
std::string BatchKeyOf(const std::vector<InputView>& inputs);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_INFER_TASK_H_
