#include "common/clock.h"

#include <chrono>

#include "absl/time/clock.h"

namespace metalserve {
namespace {

class RealClockImpl final : public Clock {
 public:
  absl::Time TimeNow() override { return absl::Now(); }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return mu->AwaitWithDeadline(cond, deadline);
  }
};

class SteadyClockImpl final : public Clock {
 public:
  absl::Time TimeNow() override {
    return absl::UnixEpoch() +
           absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
  }
  // Mutex deadlines are wall times; a timeout is not, so the steady deadline
  // becomes one (callers re-read TimeNow() after a wait, as with any clock).
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return mu->AwaitWithTimeout(cond, deadline - TimeNow());
  }
};

}  // namespace

Clock* Clock::RealClock() {
  static Clock* const clock = new RealClockImpl();
  return clock;
}

Clock* Clock::SteadyClock() {
  static Clock* const clock = new SteadyClockImpl();
  return clock;
}

}  // namespace metalserve
