#include "server/runtime/device_thread.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "glog/logging.h"

namespace metalserve {

std::shared_ptr<DeviceThread> DeviceThread::Create(std::string name) {
  return std::shared_ptr<DeviceThread>(new DeviceThread(std::move(name)));
}

DeviceThread::DeviceThread(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { Loop(); });
  thread_id_ = thread_.get_id();
}

DeviceThread::~DeviceThread() { Shutdown(); }

absl::Status DeviceThread::Refused() const {
  return absl::UnavailableError(
      absl::StrCat("device thread of ", name_, " is shut down; work refused"));
}

absl::Status DeviceThread::Submit(absl::AnyInvocable<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.push_back(std::move(fn));
      return absl::OkStatus();
    }
  }
  return Refused();  // `fn` is destroyed here, outside the lock
}

absl::Status DeviceThread::RunSync(absl::FunctionRef<void()> fn) {
  if (IsCurrent()) {
    fn();
    return absl::OkStatus();
  }
  absl::Notification done;
  absl::Status accepted = Submit([&fn, &done] {
    fn();
    done.Notify();
  });
  if (accepted.ok()) done.WaitForNotification();
  return accepted;
}

void DeviceThread::Shutdown() {
  CHECK(!IsCurrent()) << "DeviceThread " << name_
                      << ": Shutdown or destruction on its own thread";
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  absl::MutexLock join(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

bool DeviceThread::accepting() const {
  absl::MutexLock lock(&mu_);
  return !stopping_;
}

int64_t DeviceThread::pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size()) + running_;
}

// Runs work in order until Shutdown has begun and the queue is empty.
void DeviceThread::Loop() {
  while (true) {
    absl::AnyInvocable<void()> work;
    {
      absl::MutexLock lock(&mu_);
      running_ = 0;
      mu_.Await(absl::Condition(
          +[](DeviceThread* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
            return t->stopping_ || !t->queue_.empty();
          },
          this));
      if (queue_.empty()) return;
      work = std::move(queue_.front());
      queue_.pop_front();
      running_ = 1;
    }
    std::move(work)();
  }
}

}  // namespace metalserve
