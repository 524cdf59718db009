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
#include <vector>

#include <torch/script.h>

#include "absl/status/statusor.h"
#include "server/runtime/cache_policy.h"
#include "server/runtime/device_choice.h"
#include "server/runtime/device_thread.h"
#include "server/runtime/runner.h"

namespace metalserve::torch_internal {

struct DeviceChoice {
  c10::Device device = c10::Device(c10::kCPU);
  std::string name;  // "cpu", "cuda:0", "mps"
  // Accelerators the fixed order passed over, "<device>: probe failed: <why>".
  std::vector<std::string> skipped;
};

// "auto" / "first_available" (mps -> cuda -> cpu, each accelerator only
// when it passes its probe), "mps", "cuda", "cuda:N" or "cpu"
// (device_choice.h). FAILED_PRECONDITION naming a requested device that is
// missing or fails its probe; INVALID_ARGUMENT for a name that is none of
// these. `platform` nullptr: the LibTorch platform below.
absl::StatusOr<DeviceChoice> ChooseDevice(const std::string& requested,
                                          const DevicePlatform* platform = nullptr);

// The machine as LibTorch sees it. Probe: a seeded 64x64 matrix product with
// a ReLU and row sums on the device, compared with the CPU's (max relative
// deviation 1e-3); on MPS first an allocation of 4 MB, filled and summed.
// Runs on the calling thread, before the device thread exists (the probe is
// over before any other work on the device starts).
class TorchPlatform final : public DevicePlatform {
 public:
  bool Available(const std::string& device, std::string* why) const override;
  absl::Status Probe(const std::string& device) const override;
};

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
