#include "server/runtime/handoff_polling.h"

#include <algorithm>

namespace metalserve {

absl::Duration HandoffPolling::CallerSleepBeforePoll(absl::Duration expected) const {
  if (spin_ <= absl::ZeroDuration() || expected <= absl::ZeroDuration()) {
    return absl::ZeroDuration();
  }
  return std::max(absl::ZeroDuration(), expected - spin_ / 2);
}

void HandoffPolling::RecordIdle(absl::Duration idle) {
  misses_ = idle > spin_ ? std::min(misses_ + 1, kMissesToStop) : 0;
}

}  // namespace metalserve
