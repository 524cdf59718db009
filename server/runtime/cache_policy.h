// When to empty the device allocator's cache, as a policy separate from the
// device: `CachePolicy` decides, a `DeviceMemoryOps` does.
//
// Triggers (each clearing is counted, timed and reported with its name):
//   "every_n"   every `empty_cache_every` batches (0 = off), busy or idle;
//               the pattern that let long MPS runs avoid running out of memory.
//   "watermark" when the allocator holds more than `memory_watermark` x the
//               device limit (0 = off), at the next idle moment.
//   "interval"  when `empty_cache_interval` has passed since the last clearing
//               (0 = off), only while idle.
//   "oom"       after a device out-of-memory (OnOutOfMemory), at once.
// At most one clearing per BetweenBatches call; it is never done inside a
// batch, because the runtime calls BetweenBatches only between batches.
// On a device without a cache (CPU) everything is a no-op, logged once.
//
// Ownership: does not own `ops` or `clock`; both must outlive the policy.
// Thread-safety: thread-safe. No lock is held while the cache is emptied or
// the callback runs.
// Destruction: nothing pending (a clearing runs inside the call that decides
// it); no call may be in flight.
#ifndef METALSERVE_SERVER_RUNTIME_CACHE_POLICY_H_
#define METALSERVE_SERVER_RUNTIME_CACHE_POLICY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/runtime/runner.h"

namespace metalserve {

// The device side of cache hygiene. Implementations: the torch runtime's
// TorchDevice, one per device (torch_device.h), and fakes in tests.
// Thread-safety: implementations are thread-safe.
class DeviceMemoryOps {
 public:
  virtual ~DeviceMemoryOps() = default;
  // False where there is no allocator cache to empty (CPU).
  virtual bool SupportsEmptyCache() const = 0;
  // Returns cached, unused device blocks to the driver.
  virtual void EmptyCache() = 0;
  virtual MemoryStats Stats() = 0;
};

// Called after each clearing with its trigger name and how long it took.
using CacheClearCallback =
    std::function<void(absl::string_view trigger, absl::Duration took)>;

struct CachePolicyOptions {
  // Empty the cache every this many batches; 0 turns it off. Default 0.
  int64_t empty_cache_every = 0;
  // Empty the cache when idle and this long has passed since the last
  // clearing; zero turns it off. Default off.
  absl::Duration empty_cache_interval = absl::ZeroDuration();
  // Fraction (0, 1] of MemoryStats::limit_bytes; when allocated_bytes exceeds
  // it, empty the cache at the next idle moment. 0 turns it off. Default 0.
  double memory_watermark = 0.0;
  // Optional; called without locks held, on the thread that cleared.
  CacheClearCallback on_cache_clear;
  // Not owned; nullptr means Clock::RealClock().
  Clock* clock = nullptr;
  // For the log line on devices without a cache, e.g. "cpu".
  std::string device_name = "device";
};

class CachePolicy {
 public:
  // Trigger names, as passed to the callback and to clears().
  static constexpr absl::string_view kEveryN = "every_n";
  static constexpr absl::string_view kInterval = "interval";
  static constexpr absl::string_view kWatermark = "watermark";
  static constexpr absl::string_view kOom = "oom";

  // InvalidArgument for a negative count or interval, or a watermark outside
  // [0, 1]. `ops` is not owned and must not be null.
  static absl::StatusOr<std::unique_ptr<CachePolicy>> Create(
      CachePolicyOptions options, DeviceMemoryOps* ops);

  // Called after each batch (idle: no batch is waiting). May empty the cache.
  void BetweenBatches(bool idle);
  // Called after a device out-of-memory; empties the cache at once.
  void OnOutOfMemory();

  // Clearings done so far for one trigger name, or for all with "".
  int64_t clears(absl::string_view trigger = "") const;

 private:
  enum Trigger { kNone = -1, kTEveryN = 0, kTInterval, kTWatermark, kTOom, kNumTriggers };

  CachePolicy(CachePolicyOptions options, DeviceMemoryOps* ops);
  Trigger Decide(bool idle, bool over_watermark) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Clear(Trigger trigger) ABSL_LOCKS_EXCLUDED(mu_);
  bool Supported();

  const CachePolicyOptions options_;
  DeviceMemoryOps* const ops_;
  Clock* const clock_;
  std::atomic<bool> logged_unsupported_{false};

  mutable absl::Mutex mu_;
  int64_t batches_since_every_n_ ABSL_GUARDED_BY(mu_) = 0;
  bool watermark_pending_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_clear_ ABSL_GUARDED_BY(mu_);
  int64_t counts_[kNumTriggers] ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_CACHE_POLICY_H_
