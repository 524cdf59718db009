// When the two sides of a hand-off to a device thread poll instead of
// sleeping (DeviceThread::Options::spin), so that a poll is spent where it
// is likely to catch its event. A pure policy object: it reads no clock;
// DeviceThread measures and tells it.
//
// Rules, for a spin S > 0:
//   - The caller of work that starts at once and is expected to take E (the
//     last item of the same key, as the device thread measured it: from its
//     arrival at an idle device, wake-up included, to its end; zero when
//     unknown) sleeps for max(0, E - S/2) before it polls for the end for up
//     to S. Its poll then covers E +- S/2 instead of the whole item: on
//     CUDA a forward of 1.4 ms would otherwise cost the caller's core 1.4 ms
//     per call at light load, on top of CUDA's own spinning wait. An item
//     that ends during the sleep wakes the caller as without a spin; one
//     that ends past E + S/2 finds it asleep again.
//   - The device thread, after an item with nothing queued, polls for the
//     next item unless each of the last kMissesToStop idle periods (from an
//     item's end to the next work's arrival) outlasted S: a poll would have
//     missed them all, so it sleeps at once and costs nothing. The idle
//     periods are measured whether it polled or slept, so one period within
//     S turns polling back on.
// With S = 0 nobody polls.
//
// Thread-safety: none; DeviceThread calls it under its lock.
#ifndef METALSERVE_SERVER_RUNTIME_HANDOFF_POLLING_H_
#define METALSERVE_SERVER_RUNTIME_HANDOFF_POLLING_H_

#include "absl/time/time.h"

namespace metalserve {

class HandoffPolling {
 public:
  static constexpr int kMissesToStop = 3;

  explicit HandoffPolling(absl::Duration spin) : spin_(spin) {}

  // The caller's sleep before its poll, for work expected to take `expected`
  // (zero or negative: unknown, no sleep).
  absl::Duration CallerSleepBeforePoll(absl::Duration expected) const;

  // Whether the device thread polls after an item with nothing queued.
  bool DevicePolls() const { return spin_ > absl::ZeroDuration() && misses_ < kMissesToStop; }

  // One idle period of the device thread: from an item's end to the next
  // work's arrival (zero when work was already queued at the end).
  void RecordIdle(absl::Duration idle);

  absl::Duration spin() const { return spin_; }

 private:
  absl::Duration spin_;
  int misses_ = 0;  // consecutive idle periods longer than spin_, capped
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_HANDOFF_POLLING_H_
