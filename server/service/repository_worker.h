// Runs model-repository loads and unloads one at a time on a thread of its
// own, so that a load (seconds: read, verify, warm up) never holds a gRPC
// callback thread. With loads run on gRPC's threads, eight concurrent
// RepositoryModelLoad calls took every one of them and a ModelReady probe
// waited 9.5 s (tests/integration/ctl_test.py).
//
// One at a time, refusing the rest: while one runs, TryRun answers
// UNAVAILABLE "another load or unload is running" (as the REST extension
// does, rest_repository.cc) instead of queueing, so a caller never waits
// unseen behind loads it did not ask for and can retry; the repository runs
// loads one at a time anyway (ModelRepository's control lock).
//
// Thread-safety: thread-safe. Destruction: Stop().
#ifndef METALSERVE_SERVER_SERVICE_REPOSITORY_WORKER_H_
#define METALSERVE_SERVER_SERVICE_REPOSITORY_WORKER_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace metalserve {

class RepositoryWorker {
 public:
  RepositoryWorker() = default;
  ~RepositoryWorker() { Stop(); }
  RepositoryWorker(const RepositoryWorker&) = delete;
  RepositoryWorker& operator=(const RepositoryWorker&) = delete;

  // Starts `work` on the worker thread, then calls `done` there with its
  // status, after the worker counts as idle again (so a caller answered by
  // `done` may start the next one at once). Returns OK when started;
  // UNAVAILABLE naming `rpc` and `model` while another runs, or after
  // Stop() (then neither function is called).
  absl::Status TryRun(absl::string_view rpc, absl::string_view model,
                      std::function<absl::Status()> work,
                      std::function<void(const absl::Status&)> done);

  // Refuses further work and waits for the running one, `done` included.
  // Idempotent.
  void Stop();

 private:
  absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Joined by the next TryRun (it has finished by then) or by Stop.
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_REPOSITORY_WORKER_H_
