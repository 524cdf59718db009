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
//   - Submit(fn) returns OK when fn is accepted; accepted work runs exactly
//     once, on the device thread, after all work accepted before it.
//     After Shutdown has begun it returns UNAVAILABLE and fn is destroyed
//     without running (on the caller's thread).
//   - RunSync(fn) runs fn on the device thread and waits for it; called on
//     the device thread itself it runs fn at once, inline (no deadlock when
//     device work calls device work). UNAVAILABLE, fn not run, after
//     Shutdown has begun.
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

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace metalserve {

class DeviceThread {
 public:
  // `name` names the device in logs and errors, e.g. "cpu", "cuda:0".
  static std::shared_ptr<DeviceThread> Create(std::string name);

  DeviceThread(const DeviceThread&) = delete;
  DeviceThread& operator=(const DeviceThread&) = delete;
  ~DeviceThread();

  // Queues `fn` behind all accepted work; see the contract above.
  absl::Status Submit(absl::AnyInvocable<void()> fn);
  // Runs `fn` on the device thread and returns when it has run.
  absl::Status RunSync(absl::FunctionRef<void()> fn);
  // Stops accepting, drains accepted work, joins the thread.
  void Shutdown();

  // True on the device thread (inside submitted work).
  bool IsCurrent() const { return std::this_thread::get_id() == thread_id_; }
  // False once Shutdown has begun: Submit and RunSync refuse from then on.
  bool accepting() const;
  // Items accepted and not yet finished (queued plus the one running).
  int64_t pending() const;
  const std::string& name() const { return name_; }

 private:
  explicit DeviceThread(std::string name);
  void Loop();
  absl::Status Refused() const;

  const std::string name_;
  mutable absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;  // serialises joiners: one joins, others wait here
  std::thread thread_;   // started in the constructor, after the members above
  std::thread::id thread_id_;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_DEVICE_THREAD_H_
