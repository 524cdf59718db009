#include "server/runtime/device_thread.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/usable_cores.h"
#include "glog/logging.h"

namespace metalserve {
namespace {

// One pause of a polling loop: tells the core this thread is spinning (a
// hyper-thread sibling gets the pipeline; less power).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Polls `ready` until it returns true or `spin` has passed on the steady
// clock; returns its last answer. Never polls for a zero or negative spin.
template <typename Ready>
bool PollUntil(absl::Duration spin, Ready ready) {
  if (spin <= absl::ZeroDuration()) return false;
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(spin);
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

}  // namespace

DeviceThread::Options DeviceThread::ForDevice(absl::string_view device, FairQueue::Order order,
                                              absl::Duration accelerator_spin, int cores) {
  if (device == "cpu" || accelerator_spin <= absl::ZeroDuration()) return {.order = order};
  if (cores <= 0) cores = UsableCores();
  if (cores < kMinCoresToPoll) {
    LOG(INFO) << "device thread of " << device << " does not poll (--accelerator_spin="
              << absl::FormatDuration(accelerator_spin) << "): this process may use " << cores
              << " cores, polling needs " << kMinCoresToPoll;
    return {.order = order};
  }
  return {.order = order, .spin = accelerator_spin};
}

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
      spin_(std::min(options.spin, absl::Hours(1))),
      queue_(options.order),
      polling_(spin_) {
  if (spin_ > absl::ZeroDuration()) {
    LOG(INFO) << "device thread of " << name_ << " polls " << absl::FormatDuration(spin_)
              << " before sleeping";
  }
  thread_ = std::thread([this] { Loop(); });
  thread_id_ = thread_.get_id();
}

DeviceThread::~DeviceThread() { Shutdown(); }

absl::Status DeviceThread::Refused() const {
  return absl::UnavailableError(
      absl::StrCat("device thread of ", name_, " is shut down; work refused"));
}

absl::Status DeviceThread::Submit(absl::string_view key, absl::AnyInvocable<void()> fn) {
  return Push(key, std::move(fn), nullptr);
}

absl::Status DeviceThread::Push(absl::string_view key, absl::AnyInvocable<void()> fn,
                                absl::Duration* sleep_before_poll) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      if (sleep_before_poll != nullptr) *sleep_before_poll = absl::InfiniteDuration();
      if (spin_ > absl::ZeroDuration() && running_ == 0 && !held_by_caller_ &&
          queue_.empty()) {  // fn starts at once: an arrival at an idle device
        arrival_ = clock_->TimeNow();
        arrival_key_.assign(key.data(), key.size());
        arrived_idle_ = true;
        if (sleep_before_poll != nullptr) {
          const auto last = last_length_.find(key);
          *sleep_before_poll = polling_.CallerSleepBeforePoll(
              last != last_length_.end() ? last->second : absl::ZeroDuration());
        }
      }
      queue_.Push(key, std::move(fn));
      has_work_.store(true, std::memory_order_release);
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
  absl::Duration sleep_before_poll;
  absl::Status accepted = Push(
      key,
      [&fn, &done] {
        fn();
        done.Notify();
      },
      &sleep_before_poll);
  if (!accepted.ok()) return accepted;
  // Work that starts at once is worth polling for, around its expected end;
  // work queued behind other work would poll through all of it.
  if (sleep_before_poll != absl::InfiniteDuration() &&
      (sleep_before_poll <= absl::ZeroDuration() ||
       !done.WaitForNotificationWithTimeout(sleep_before_poll)) &&
      PollUntil(spin_, [&done] { return done.HasBeenNotified(); })) {
    caught_polling_.fetch_add(1, std::memory_order_relaxed);
  }
  done.WaitForNotification();
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

int64_t DeviceThread::sleeps() const {
  absl::MutexLock lock(&mu_);
  return sleeps_;
}

int64_t DeviceThread::caught_polling() const {
  return caught_polling_.load(std::memory_order_relaxed);
}

bool DeviceThread::PollForWork() {
  return PollUntil(spin_, [this] {
    return has_work_.load(std::memory_order_acquire) ||
           stopping_seen_.load(std::memory_order_acquire);
  });
}

void DeviceThread::Shutdown() {
  CHECK(!IsCurrent()) << "DeviceThread " << name_
                      << ": Shutdown or destruction on its own thread";
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stopping_seen_.store(true, std::memory_order_release);
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
// With a spin, polls for the next item before sleeping when polling_ says
// so, tells polling_ each idle period (an item's end to the arrival of the
// work that found the device idle), and keeps each key's last item length
// as its caller saw it (from that arrival when the item found the device
// idle; else from its start).
void DeviceThread::Loop() {
  std::string key;
  absl::Duration cost;
  absl::Duration length;
  absl::Time end;
  bool ran = false;
  const absl::Condition ready(
      +[](DeviceThread* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
        return !t->held_by_caller_ && (t->stopping_ || !t->queue_.empty());
      },
      this);
  while (true) {
    FairQueue::Item item;
    bool idle = false;  // nothing queued at an item's end, with a spin
    bool poll = false;
    {
      absl::MutexLock lock(&mu_);
      if (ran) queue_.Charge(key, cost);
      running_ = 0;
      if (ran && spin_ > absl::ZeroDuration()) {
        // Bounded: a process that served many model versions starts over.
        if (last_length_.size() >= kMaxKeyLengths && !last_length_.contains(key)) {
          last_length_.clear();
        }
        last_length_[key] = length;
        idle = !ready.Eval();
        if (!idle) polling_.RecordIdle(absl::ZeroDuration());
        poll = idle && polling_.DevicePolls();
      }
    }
    if (poll) PollForWork();
    bool from_idle = false;  // the next item found the device idle at arrival_
    absl::Time arrival;
    bool arrival_is_item = false;  // ... and the item popped is that work's key
    {
      absl::MutexLock lock(&mu_);
      if (!ready.Eval()) ++sleeps_;
      mu_.Await(ready);
      from_idle = arrived_idle_;
      arrival = arrival_;
      arrived_idle_ = false;
      if (idle && from_idle) polling_.RecordIdle(arrival - end);
      if (queue_.empty()) return;
      item = queue_.Pop();
      // Another key's work queued before the thread woke may come first
      // (fair order): it is measured from its start.
      arrival_is_item = from_idle && item.key == arrival_key_;
      has_work_.store(!queue_.empty(), std::memory_order_release);
      running_ = 1;
    }
    const absl::Time start = clock_->TimeNow();
    std::move(item.work)();
    end = clock_->TimeNow();
    cost = end - start;
    length = end - (arrival_is_item ? std::min(arrival, start) : start);
    key = std::move(item.key);
    ran = true;
  }
}

}  // namespace metalserve
