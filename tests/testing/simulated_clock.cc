#include "tests/testing/simulated_clock.h"

namespace metalserve {

absl::Time SimulatedClock::TimeNow() {
  absl::MutexLock l(&mu_);
  return now_;
}

void SimulatedClock::AdvanceTime(absl::Duration d) {
  absl::MutexLock l(&mu_);
  now_ += d;
  ++generation_;
  waiters_current_ = 0;
}

void SimulatedClock::SetTime(absl::Time t) {
  absl::MutexLock l(&mu_);
  now_ = t;
  ++generation_;
  waiters_current_ = 0;
}

int SimulatedClock::waiters() {
  absl::MutexLock l(&mu_);
  return waiters_current_;
}

namespace {
struct WaitersAtLeast {
  const int* waiters;
  int n;
  static bool Holds(WaitersAtLeast* w) { return *w->waiters >= w->n; }
};
}  // namespace

void SimulatedClock::BlockUntilWaiters(int n) {
  absl::MutexLock l(&mu_);
  WaitersAtLeast w{&waiters_current_, n};
  mu_.Await(absl::Condition(&WaitersAtLeast::Holds, &w));
}

bool SimulatedClock::AwaitWithDeadline(absl::Mutex* mu,
                                       const absl::Condition& cond,
                                       absl::Time deadline) {
  // The caller's condition lives under the caller's mutex and simulated time
  // under ours, so the pair is polled in short real-time slices. Outcomes
  // depend only on simulated time, never on the length of the slices.
  int64_t counted = -1;  // generation at which this thread counts as waiter
  bool result;
  while (true) {
    if (cond.Eval()) {
      result = true;
      break;
    }
    {
      absl::MutexLock l(&mu_);
      if (now_ >= deadline) {
        result = false;
        break;
      }
      if (generation_ != counted) {
        counted = generation_;
        ++waiters_current_;
      }
    }
    mu->AwaitWithTimeout(cond, absl::Milliseconds(1));
  }
  absl::MutexLock l(&mu_);
  if (counted == generation_) --waiters_current_;
  if (result) ++wakeups_;
  return result;
}

int64_t SimulatedClock::wakeups() {
  absl::MutexLock l(&mu_);
  return wakeups_;
}

}  // namespace metalserve
