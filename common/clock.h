// Clock seam: every module that reads the time or waits for it takes a
// `Clock*`, so tests can drive time with `SimulatedClock`
// (tests/testing/simulated_clock.h) and never sleep to prove something.
//
// Named as absl::Clock will be in a later Abseil, so an upgrade is a rename.
//
// Thread-safety: implementations are thread-safe.
#ifndef METALSERVE_SERVER_COMMON_CLOCK_H_
#define METALSERVE_SERVER_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace metalserve {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time TimeNow() = 0;
  // Blocks until `cond` holds or the clock reaches `deadline`. `mu` must be
  // held on entry and is held on return. Returns whether `cond` holds.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // The process-wide real-time clock; never deleted.
  static Clock* RealClock();
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_COMMON_CLOCK_H_
