#include "server/runtime/device_thread.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "glog/logging.h"

namespace metalserve {

std::shared_ptr<DeviceThread> DeviceThread::Create(std::string name) {
  return Create(std::move(name), Options{});
}

std::shared_ptr<DeviceThread> DeviceThread::Create(std::string name, Options options) {
  return std::shared_ptr<DeviceThread>(new DeviceThread(std::move(name), options));
}

DeviceThread::DeviceThread(std::string name, Options options)
    : name_(std::move(name)),
      order_(options.order),
      clock_(options.clock != nullptr ? options.clock : Clock::SteadyClock()),
      queue_(options.order) {
  thread_ = std::thread([this] { Loop(); });
  thread_id_ = thread_.get_id();
}

DeviceThread::~DeviceThread() { Shutdown(); }

absl::Status DeviceThread::Refused() const {
  return absl::UnavailableError(
      absl::StrCat("device thread of ", name_, " is shut down; work refused"));
}

absl::Status DeviceThread::Submit(absl::string_view key, absl::AnyInvocable<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.Push(key, std::move(fn));
      return absl::OkStatus();
    }
  }
  return Refused();  // `fn` is destroyed here, outside the lock
}

absl::Status DeviceThread::RunSync(absl::string_view key, absl::FunctionRef<void()> fn) {
  if (IsCurrent()) {
    fn();
    return absl::OkStatus();
  }
  absl::Notification done;
  absl::Status accepted = Submit(key, [&fn, &done] {
    fn();
    done.Notify();
  });
  if (accepted.ok()) done.WaitForNotification();
  return accepted;
}

absl::Status DeviceThread::RunHereIfIdle(absl::string_view key,
                                         absl::FunctionRef<void()> fn) {
  if (IsCurrent()) {
    fn();
    return absl::OkStatus();
  }
  bool idle = false;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return Refused();
    idle = running_ == 0 && !held_by_caller_ && queue_.empty();
    if (idle) {
      held_by_caller_ = true;
      ++ran_on_callers_;
    }
  }
  if (!idle) return RunSync(key, fn);
  const absl::Time start = clock_->TimeNow();
  fn();
  const absl::Duration cost = clock_->TimeNow() - start;
  absl::MutexLock lock(&mu_);
  queue_.ChargeJoining(key, cost);
  held_by_caller_ = false;
  return absl::OkStatus();
}

bool DeviceThread::Idle() const {
  absl::MutexLock lock(&mu_);
  return !stopping_ && running_ == 0 && !held_by_caller_ && queue_.empty();
}

int64_t DeviceThread::ran_on_callers() const {
  absl::MutexLock lock(&mu_);
  return ran_on_callers_;
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
  return queue_.size() + running_ + (held_by_caller_ ? 1 : 0);
}

absl::Duration DeviceThread::virtual_time(absl::string_view key) const {
  absl::MutexLock lock(&mu_);
  return queue_.virtual_time(key);
}

// Runs work in the queue's order until Shutdown has begun and the queue is
// empty, charging each item's measured time to its key before the next Pop.
void DeviceThread::Loop() {
  std::string key;
  absl::Duration cost;
  bool ran = false;
  while (true) {
    FairQueue::Item item;
    {
      absl::MutexLock lock(&mu_);
      if (ran) queue_.Charge(key, cost);
      running_ = 0;
      mu_.Await(absl::Condition(
          +[](DeviceThread* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
            return !t->held_by_caller_ && (t->stopping_ || !t->queue_.empty());
          },
          this));
      if (queue_.empty()) return;
      item = queue_.Pop();
      running_ = 1;
    }
    const absl::Time start = clock_->TimeNow();
    std::move(item.work)();
    cost = clock_->TimeNow() - start;
    key = std::move(item.key);
    ran = true;
  }
}

}  // namespace metalserve
