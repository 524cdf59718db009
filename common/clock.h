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

  // The process-wide wall clock (absl::Now): its times are dates, for
  // timestamps and for deadlines compared with other processes' times; NTP
  // or an operator may step it, so the difference of two readings is not
  // always the time that passed. Never deleted.
  static Clock* RealClock();
  // The process-wide monotonic clock (std::chrono::steady_clock): it never
  // steps, so the difference of two readings is the time that passed; for
  // measuring durations and pacing schedules. Its times are not dates (the
  // epoch is unspecified, e.g. boot): never mix them with RealClock's or
  // absl::Now()'s. Never deleted.
  static Clock* SteadyClock();
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_COMMON_CLOCK_H_
