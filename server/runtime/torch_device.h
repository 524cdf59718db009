// Internal to the runtime target (includes LibTorch): device choice and the
// per-device operations (memory figures, cache clearing, synchronize). These
// belong to the device, not to a model: `empty_cache` and the allocator's
// figures are device-global, so every model on a device shares one
// TorchDevice (today each runner makes its own unless given a DeviceThread;
// the model manager of the next issue hands one TorchDevice to every model
// on it).
#ifndef METALSERVE_SERVER_RUNTIME_TORCH_DEVICE_H_
#define METALSERVE_SERVER_RUNTIME_TORCH_DEVICE_H_

#include <memory>
#include <string>

#include <torch/script.h>

#include "absl/status/statusor.h"
#include "server/runtime/cache_policy.h"
#include "server/runtime/device_thread.h"
#include "server/runtime/runner.h"

namespace metalserve::torch_internal {

struct DeviceChoice {
  c10::Device device = c10::Device(c10::kCPU);
  std::string name;  // "cpu", "cuda:0", "mps"
};

// "auto" (mps -> cuda -> cpu), "mps", "cuda", "cuda:N" or "cpu".
// FAILED_PRECONDITION naming a requested device that is missing;
// INVALID_ARGUMENT for a name that is none of these.
absl::StatusOr<DeviceChoice> ChooseDevice(const std::string& requested);

// Resident set size of this process, or -1.
int64_t ResidentBytes();

// One device as the runtime uses it: what it is, the one thread that does
// its work, and its memory operations.
//
// Ownership: shares ownership of the DeviceThread; held by std::shared_ptr
// by each runner on the device.
// Thread-safety: thread-safe. MPS operations run on the device thread
// (through RunSync; inline when already there); CUDA's caching allocator
// calls are thread-safe and run on the caller's thread.
// Destruction: releases its share of the device thread (the thread is
// drained and joined when its last owner goes).
class TorchDevice final : public DeviceMemoryOps {
 public:
  // FAILED_PRECONDITION for a CUDA device in a build without CUDA.
  static absl::StatusOr<std::shared_ptr<TorchDevice>> Create(
      DeviceChoice choice, std::shared_ptr<DeviceThread> thread);

  const c10::Device& device() const { return choice_.device; }
  const std::string& name() const { return choice_.name; }
  DeviceThread& thread() const { return *thread_; }

  // DeviceMemoryOps. CPU: no cache; Stats has only resident_bytes.
  bool SupportsEmptyCache() const override;
  void EmptyCache() override;
  MemoryStats Stats() override;
  // Waits until the device has finished the work queued on it (CUDA: every
  // stream of the device; MPS: the command buffers). No-op on CPU.
  void Synchronize();

 private:
  TorchDevice(DeviceChoice choice, std::shared_ptr<DeviceThread> thread)
      : choice_(std::move(choice)), thread_(std::move(thread)) {}
  MemoryStats MpsStats() const;
  MemoryStats CudaStats() const;

  const DeviceChoice choice_;
  const std::shared_ptr<DeviceThread> thread_;
};

}  // namespace metalserve::torch_internal

#endif  // METALSERVE_SERVER_RUNTIME_TORCH_DEVICE_H_
