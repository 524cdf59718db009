// A Clock whose time moves only when a test says so.
//
// Waiters blocked in AwaitWithDeadline re-check their condition whenever the
// time is advanced; tests can wait until a given number of threads are
// blocked at a given simulated time (`BlockUntilWaiters`) instead of sleeping.
//
// Thread-safety: thread-safe.
#ifndef METALSERVE_TESTS_TESTING_SIMULATED_CLOCK_H_
#define METALSERVE_TESTS_TESTING_SIMULATED_CLOCK_H_

#include <atomic>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace metalserve {

class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(absl::Time start = absl::UnixEpoch() + absl::Hours(1))
      : now_(start) {}

  absl::Time TimeNow() override;
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  void AdvanceTime(absl::Duration d);
  void SetTime(absl::Time t);
  // Blocks (in real time) until at least `n` threads wait in
  // AwaitWithDeadline having observed the current simulated time.
  void BlockUntilWaiters(int n);
  int waiters();
  // Waits in AwaitWithDeadline that ended because their condition held (a
  // waiter woken for work), so far.
  int64_t wakeups();

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // Waiters that have seen generation_ and are blocked.
  int waiters_current_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t wakeups_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_TESTS_TESTING_SIMULATED_CLOCK_H_
