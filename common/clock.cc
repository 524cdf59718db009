#include "common/clock.h"

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

}  // namespace

Clock* Clock::RealClock() {
  static Clock* const clock = new RealClockImpl();
  return clock;
}

}  // namespace metalserve
