#include "server/service/repository_worker.h"

#include <utility>

#include "server/service/repository_errors.h"

namespace metalserve {

absl::Status RepositoryWorker::TryRun(absl::string_view rpc, absl::string_view model,
                                      std::function<absl::Status()> work,
                                      std::function<void(const absl::Status&)> done) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::UnavailableError("the server is shutting down; retry elsewhere");
  }
  if (busy_) {
    return RepositoryBusyError(rpc, model);
  }
  busy_ = true;
  if (thread_.joinable()) thread_.join();  // finished: it cleared busy_
  thread_ = std::thread([this, work = std::move(work), done = std::move(done)] {
    const absl::Status status = work();
    {
      absl::MutexLock lock(&mu_);
      busy_ = false;
    }
    done(status);
  });
  return absl::OkStatus();
}

void RepositoryWorker::Stop() {
  std::thread running;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    running = std::move(thread_);
  }
  if (running.joinable()) running.join();
}

}  // namespace metalserve
