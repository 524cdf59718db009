// When to empty the device allocator's cache, as a policy separate from the
// device: `CachePolicy` decides, a `DeviceMemoryOps` does.
//
// One policy per device. `empty_cache` is device-global, so every runner on
// a device shares the device's one policy (CachePolicies hands it out by the
// resolved device name) and joins it as a user (CacheUser). Its triggers
// count for the device, not per model: with N models on a device, the
// interval clears once per interval, not N times, and one model going idle
// does not clear the cache under another model's running batch.
//
// Triggers (each clearing is counted, timed and reported with its name):
//   "every_n"   every `empty_cache_every` batches of the device (any model's;
//               0 = off), busy or idle; the pattern that let long MPS runs
//               avoid running out of memory.
//   "watermark" when the allocator holds more than `memory_watermark` x the
//               device limit (0 = off), at the device's next idle moment.
//   "interval"  when `empty_cache_interval` has passed since the device's
//               last clearing (0 = off), only while the device is idle.
//   "oom"       after a device out-of-memory (OnOutOfMemory), at once; an
//               out-of-memory reported while a clearing is under way (another
//               model's, at the same moment) folds into that clearing.
//
// The device is idle when no user is busy. A user is busy while a batch of
// its own is in flight (WorkStarted .. WorkEnded) and after it reported
// BetweenBatches(idle=false), until it reports BetweenBatches(idle=true);
// it starts idle (a model with no requests has no work) and stops counting
// when it leaves (its runner is freed). Why both: a model reports idle only
// from its own queue (the batcher's idle tick), which says nothing about
// the other models on the device; and a model whose queue was idle can have
// started a batch since its last report. A report without a user
// (BetweenBatches(bool)) is that moment's idleness joined with the users'.
//
// At most one clearing at a time and per BetweenBatches call; it is never
// done inside a batch, because the runtime calls BetweenBatches only between
// batches. On a device without a cache (CPU) everything is a no-op, logged
// once.
//
// Ownership: does not own `ops` or `clock`; both must outlive the policy
// (CachePolicies' policies keep their ops alive themselves).
// Thread-safety: thread-safe. No lock is held while the cache is emptied or
// the callback runs.
// Destruction: nothing pending (a clearing runs inside the call that decides
// it); no call may be in flight.
#ifndef METALSERVE_SERVER_RUNTIME_CACHE_POLICY_H_
#define METALSERVE_SERVER_RUNTIME_CACHE_POLICY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
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

  // A user of the policy (one runner on the device); starts idle. Leave
  // it exactly once; a user that left no longer counts for idleness.
  int64_t Join();
  void Leave(int64_t user);
  // Called after each batch of `user` (idle: its queue has nothing
  // waiting). Records the user's report, then may empty the cache.
  void BetweenBatches(int64_t user, bool idle);
  // The same without a user: `idle` holds for this call only, joined with
  // the users' (all of them idle too). With no users, the device's idleness.
  void BetweenBatches(bool idle);
  // A batch of `user` starts / ends on the device; busy in between.
  void WorkStarted(int64_t user);
  void WorkEnded(int64_t user);
  // Called after a device out-of-memory; empties the cache at once, unless
  // a clearing is already under way.
  void OnOutOfMemory();

  // Clearings done so far for one trigger name, or for all with "".
  int64_t clears(absl::string_view trigger = "") const;
  // Users joined and not left.
  int users() const;

 private:
  enum Trigger { kNone = -1, kTEveryN = 0, kTInterval, kTWatermark, kTOom, kNumTriggers };
  struct UserState {
    bool reported_busy = false;  // last BetweenBatches said idle=false
    int in_flight = 0;           // WorkStarted without WorkEnded
  };

  CachePolicy(CachePolicyOptions options, DeviceMemoryOps* ops);
  void Report(bool idle) ABSL_LOCKS_EXCLUDED(mu_);
  bool DeviceIdle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  bool clearing_ ABSL_GUARDED_BY(mu_) = false;
  int64_t counts_[kNumTriggers] ABSL_GUARDED_BY(mu_) = {};
  int64_t next_user_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, UserState> users_ ABSL_GUARDED_BY(mu_);
};

// One runner's membership of its device's policy: joins on construction,
// leaves on destruction, and reports as that user.
// Ownership: shares ownership of the policy.
// Thread-safety: thread-safe. Destruction: no call may be in flight.
class CacheUser {
 public:
  explicit CacheUser(std::shared_ptr<CachePolicy> policy)
      : policy_(std::move(policy)), id_(policy_->Join()) {}
  ~CacheUser() { policy_->Leave(id_); }
  CacheUser(const CacheUser&) = delete;
  CacheUser& operator=(const CacheUser&) = delete;

  void BetweenBatches(bool idle) { policy_->BetweenBatches(id_, idle); }
  void WorkStarted() { policy_->WorkStarted(id_); }
  void WorkEnded() { policy_->WorkEnded(id_); }
  void OnOutOfMemory() { policy_->OnOutOfMemory(); }
  CachePolicy& policy() const { return *policy_; }

 private:
  const std::shared_ptr<CachePolicy> policy_;
  const int64_t id_;
};

// The policies of the devices, one per resolved device name ("cpu",
// "cuda:0", "mps"), shared by every runner on the device (the repository
// keeps one in its DeviceThreads, server/model_loading.h). A device's
// policy is made by its first runner, from that runner's options and memory
// ops, and freed with its last user; a later runner on the device shares it
// as it is (the cache flags are the server's, the same for every model).
// Thread-safety: thread-safe. Destruction: policies handed out live on.
class CachePolicies {
 public:
  // The device's policy; made from `options` and `ops` when it has none.
  // The policy keeps `ops` alive. Create's errors for bad options.
  absl::StatusOr<std::shared_ptr<CachePolicy>> For(const std::string& device,
                                                   CachePolicyOptions options,
                                                   std::shared_ptr<DeviceMemoryOps> ops);
  // Devices with a live policy.
  int size() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::weak_ptr<CachePolicy>> policies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_CACHE_POLICY_H_
