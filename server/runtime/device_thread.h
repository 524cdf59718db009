// One thread that runs submitted work, in submission order: the thread that
// does all work on one device. Torch-free (its own target,
// metalserve::device_thread), so the torch-free sanitizer and analysis trees
// build and test it.
//
// Why a device needs one thread: MPS is not safe from several threads (two
// threads doing MPS work can crash inside Metal); cuDNN's autotuner cache and
// handles are per thread, so a forward from a thread that did not warm up
// re-tunes every convolution; on CPU a forward from another thread than the
// one that loaded and warmed up measured 1.4x slower. So every model on a
// device (load, verification, warm-up, forwards, cache clearing, release)
// works through that device's DeviceThread.
//
// Contract:
//   - Submit(key, fn) returns OK when fn is accepted; accepted work runs
//     exactly once, on the device thread, after all work accepted before it
//     under the same key. Across keys the order is fair_queue.h's rule
//     (Options::order): each key gets an equal share of device time while
//     backlogged, measured per item, so a flooded model cannot starve another
//     model or the device's own work; fair_queue.h states the bound. Keys:
//     one per model version ("<model>:<version>"); Submit(fn) and RunSync(fn)
//     use FairQueue::kDeviceKey (loads, verification, warm-up, release, cache
//     clearing), so callers that name no key keep the old FIFO among
//     themselves. After Shutdown has begun it returns UNAVAILABLE and fn is
//     destroyed without running (on the caller's thread).
//   - RunSync(key, fn) runs fn on the device thread and waits for it; called
//     on the device thread itself it runs fn at once, inline (no deadlock
//     when device work calls device work; its time counts to the running
//     item's key). UNAVAILABLE, fn not run, after Shutdown has begun.
//   - Spinning (Options::spin > 0): after an item, with nothing queued, the
//     device thread polls for new work for up to `spin` before it sleeps;
//     and a RunSync caller whose work went to an idle device (it starts at
//     once) polls for its end for up to `spin` before it sleeps. Each poll
//     that catches its event saves a sleeping thread's wake-up (tens to
//     hundreds of microseconds each on an idle host: docs/performance.md),
//     at a price in CPU at light load, which handoff_polling.h's rules keep
//     down: a caller sleeps through most of an item whose length it can
//     expect (its key's last item) and polls only around the expected end
//     (on CUDA, whose own wait spins by default, polling through the whole
//     forward took a second core); the device thread stops polling while
//     its idle periods outlast the spin (traffic too sparse to catch) and
//     starts again at the first that does not. Under saturation neither
//     polls much: the queue is rarely empty after an item, and work
//     submitted behind other work never polls. Zero (the default) never
//     polls. The order and the contract above are the same either way.
//   - RunHereIfIdle(key, fn) runs fn on the CALLING thread when the device
//     is idle (nothing running, nothing queued), holding the device for it:
//     work submitted meanwhile waits until fn returns, and fn's time is
//     charged to `key` as if it had been queued then. Otherwise it is
//     RunSync. It saves the two thread switches of a hand-off, for work
//     that may run off the device thread (the CPU at one intra-op thread,
//     TorchRunner); never for MPS or CUDA (above). UNAVAILABLE, fn not run,
//     after Shutdown has begun; Shutdown waits for a run in progress.
//   - Shutdown() stops accepting work, DRAINS: runs every accepted item,
//     then joins the thread. Idempotent; a second caller waits for the first
//     to finish. Work running on the device thread may Submit (refused once
//     Shutdown has begun) but must not call Shutdown or destroy the last
//     owner (a thread cannot join itself; this is CHECKed).
//   - Work must not throw: an exception escaping fn terminates the process
//     (the torch runtime catches LibTorch's exceptions inside its work).
//
// Ownership: the object owns its thread. It is shared: held by
// std::shared_ptr by every runner on its device (TorchRunner's Options take
// one; a runner creates its own when none is given), so several models can
// share one device thread.
// Thread-safety: every method is thread-safe.
// Destruction: calls Shutdown(), so pending work is drained, not dropped.
#ifndef METALSERVE_SERVER_RUNTIME_DEVICE_THREAD_H_
#define METALSERVE_SERVER_RUNTIME_DEVICE_THREAD_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/runtime/fair_queue.h"
#include "server/runtime/handoff_polling.h"

namespace metalserve {

class DeviceThread {
 public:
  struct Options {
    // Order across keys: kFair (default) or kFifo, the order before keys
    // existed (--device_scheduling, for comparison).
    FairQueue::Order order = FairQueue::Order::kFair;
    // Measures each item's device time (its cost). Not owned; nullptr means
    // Clock::SteadyClock().
    Clock* clock = nullptr;
    // How long the thread and its RunSync callers poll before sleeping (the
    // contract above); measured on the steady clock. Values above an hour
    // are taken as an hour. What the polls are planned on (items' lengths,
    // idle periods) is measured on `clock`.
    absl::Duration spin = absl::ZeroDuration();
  };

  // The options of a device's thread: `order`, and `accelerator_spin` unless
  // `device` is the CPU ("cpu"), whose forwards want every core for their
  // intra-op threads (a polling thread would take one from them), or the
  // host has fewer than kMinCoresToPoll cores (`cores`; 0, the default: the
  // cores this process may use, UsableCores(): its CPU affinity lowered to
  // a cgroup CPU limit such as a container's --cpus): two polling threads
  // there delay the wake-ups of everything else (on this 2-core VM a
  // simulated accelerator's c=1 p50 went from 1.7 to 2.6-3.5 ms with
  // polling on, docs/performance.md). Logs (INFO: the flag's default asks
  // for a spin) when it turns a spin off for the cores.
  static constexpr int kMinCoresToPoll = 4;
  static Options ForDevice(absl::string_view device, FairQueue::Order order,
                           absl::Duration accelerator_spin, int cores = 0);

  // `name` names the device in logs and errors, e.g. "cpu", "cuda:0".
  static std::shared_ptr<DeviceThread> Create(std::string name);
  static std::shared_ptr<DeviceThread> Create(std::string name, Options options);

  DeviceThread(const DeviceThread&) = delete;
  DeviceThread& operator=(const DeviceThread&) = delete;
  ~DeviceThread();

  // Queues `fn` under `key`; see the contract above.
  absl::Status Submit(absl::string_view key, absl::AnyInvocable<void()> fn);
  absl::Status Submit(absl::AnyInvocable<void()> fn) {
    return Submit(FairQueue::kDeviceKey, std::move(fn));
  }
  // Runs `fn` on the device thread under `key` and returns when it has run.
  absl::Status RunSync(absl::string_view key, absl::FunctionRef<void()> fn);
  absl::Status RunSync(absl::FunctionRef<void()> fn) {
    return RunSync(FairQueue::kDeviceKey, fn);
  }
  // Runs `fn` on the calling thread when the device is idle, else RunSync.
  absl::Status RunHereIfIdle(absl::string_view key, absl::FunctionRef<void()> fn);
  // How many RunHereIfIdle calls ran on their caller's thread.
  int64_t ran_on_callers() const;
  // How many times the thread went to sleep waiting for work (before its
  // first item and while a RunHereIfIdle caller held the device included),
  // and how many RunSync calls saw their work end while polling
  // (Options::spin).
  int64_t sleeps() const;
  int64_t caught_polling() const;
  absl::Duration spin() const { return spin_; }
  // Stops accepting, drains accepted work, joins the thread.
  void Shutdown();

  // True on the device thread (inside submitted work).
  bool IsCurrent() const { return std::this_thread::get_id() == thread_id_; }
  // False once Shutdown has begun: Submit and RunSync refuse from then on.
  bool accepting() const;
  // Items accepted and not yet finished (queued plus the one running).
  int64_t pending() const;
  // Nothing running, queued or held by a caller, and accepting: work given
  // now would start at once (a hint: it may change right after).
  bool Idle() const;
  const std::string& name() const { return name_; }
  FairQueue::Order order() const { return order_; }
  // fair_queue.h's v_k of `key`: the device time charged to it, raised to
  // the system virtual time when it joined after being idle.
  absl::Duration virtual_time(absl::string_view key) const;

 private:
  DeviceThread(std::string name, Options options);
  void Loop();
  absl::Status Refused() const;

  const std::string name_;
  // Queues `fn` (Submit). *sleep_before_poll, when not null, says how long
  // a RunSync caller waiting for fn sleeps before it polls for fn's end
  // (HandoffPolling), or InfiniteDuration when it does not poll: no spin,
  // or something was running, queued or held (fn does not start at once).
  absl::Status Push(absl::string_view key, absl::AnyInvocable<void()> fn,
                    absl::Duration* sleep_before_poll) ABSL_LOCKS_EXCLUDED(mu_);
  // Polls (up to spin_) for queued work or Shutdown; true when either came.
  bool PollForWork() ABSL_LOCKS_EXCLUDED(mu_);

  const FairQueue::Order order_;
  Clock* const clock_;
  const absl::Duration spin_;
  // Mirrors of !queue_.empty() and stopping_ (written under mu_), for polls.
  std::atomic<bool> has_work_{false};
  std::atomic<bool> stopping_seen_{false};
  std::atomic<int64_t> caught_polling_{0};
  mutable absl::Mutex mu_;
  FairQueue queue_ ABSL_GUARDED_BY(mu_);
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  // A caller holds the device (RunHereIfIdle): the loop pops nothing.
  bool held_by_caller_ ABSL_GUARDED_BY(mu_) = false;
  int64_t ran_on_callers_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sleeps_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // With a spin only, all on clock_: when to poll; each key's last item's
  // length as its caller saw it (what its next RunSync caller expects; at
  // most kMaxKeyLengths keys, then it starts over); when the last work that
  // found the device idle arrived, and whether the loop has yet to see it.
  static constexpr size_t kMaxKeyLengths = 64;
  HandoffPolling polling_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::Duration> last_length_ ABSL_GUARDED_BY(mu_);
  // Work that arrives while a RunHereIfIdle caller holds the device is not
  // such an arrival: that idle period goes unrecorded.
  absl::Time arrival_ ABSL_GUARDED_BY(mu_);
  std::string arrival_key_ ABSL_GUARDED_BY(mu_);
  bool arrived_idle_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;  // serialises joiners: one joins, others wait here
  std::thread thread_;   // started in the constructor, after the members above
  std::thread::id thread_id_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_DEVICE_THREAD_H_
