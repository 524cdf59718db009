// LogLimiter: lets one log line through per interval and counts the ones it
// holds back, so that a repeated event (a poisoned batch retried in halves,
// thousands of times a minute) costs one line a second that says how many
// were dropped, instead of flooding the log.
//
// Usage:
//   int64_t dropped;
//   if (limiter.Allow(&dropped)) LOG(WARNING) << ... << " (" << dropped
//                                             << " similar lines suppressed)";
//
// Thread-safety: Allow() is thread-safe. Does not own the clock.
#ifndef METALSERVE_SERVER_SERVICE_LOG_LIMITER_H_
#define METALSERVE_SERVER_SERVICE_LOG_LIMITER_H_

#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace metalserve {

class LogLimiter {
 public:
  LogLimiter(Clock* clock, absl::Duration interval)
      : clock_(clock), interval_(interval) {}

  // True when a line may be written now (the first call, then at most once
  // per interval). `*suppressed` receives the number of calls refused since
  // the last one allowed (0 when refusing).
  bool Allow(int64_t* suppressed) {
    const absl::Time now = clock_->TimeNow();
    absl::MutexLock l(&mu_);
    if (now < next_) {
      ++suppressed_;
      *suppressed = 0;
      return false;
    }
    next_ = now + interval_;
    *suppressed = suppressed_;
    suppressed_ = 0;
    return true;
  }

 private:
  Clock* const clock_;
  const absl::Duration interval_;
  absl::Mutex mu_;
  absl::Time next_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_LOG_LIMITER_H_
