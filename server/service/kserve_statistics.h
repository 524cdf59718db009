// KServeStatistics: cumulative figures of one model's ModelInfer requests,
// as the KServe ModelStatistics RPC reports them (counts and nanosecond
// totals, the time of the last success). Requests of the native API are not
// counted here; the Prometheus metrics count both.
//
// Ownership: a plain value holder, owned by the KServe service; tasks keep a
// pointer to it, so it must outlive every ModelInfer task in flight (the
// service outlives the gRPC server). Thread-safety: thread-safe; the
// handler, the executor thread and ModelStatistics callers use it at once.
// Destruction: nothing to stop or drain.
#ifndef METALSERVE_SERVER_SERVICE_KSERVE_STATISTICS_H_
#define METALSERVE_SERVER_SERVICE_KSERVE_STATISTICS_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "inference/grpc_service.pb.h"
#include "server/runtime/runner.h"

namespace metalserve {

class KServeStatistics {
 public:
  struct Snapshot {
    int64_t success_count = 0;
    int64_t success_ns = 0;  // whole request, admission to answer
    int64_t fail_count = 0;
    int64_t fail_ns = 0;
    int64_t queue_ns = 0;    // successful requests, batcher wait
    int64_t compute_ns = 0;  // successful requests, their batch's run
    int64_t rows = 0;        // rows of successful requests
    int64_t last_success_ms = 0;  // Unix ms; 0 before the first success
  };

  // A request answered OK: `total` from admission to answer, `queue` and
  // `compute` its batch's figures, `now` the answer's time.
  void RecordSuccess(int64_t rows, absl::Duration total, absl::Duration queue,
                     absl::Duration compute, absl::Time now);
  // A request answered with any other code, `total` from admission.
  void RecordFailure(absl::Duration total);
  Snapshot Get() const;

  // Adds the current figures of `model` to `response` (one model_stats
  // entry).
  void AddTo(const ModelInfo& model, inference::ModelStatisticsResponse* response) const;

 private:
  mutable absl::Mutex mu_;
  Snapshot s_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_KSERVE_STATISTICS_H_
