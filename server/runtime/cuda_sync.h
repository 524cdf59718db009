// How a CUDA host thread waits for its device (--cuda_sync): a process-wide
// setting, torch-free, applied by the runtime to each CUDA device before its
// first use (torch_device.cc).
//
// Why: an executor thread waits for every batch's forward (the copy of its
// outputs to the host ends in a stream synchronize). CUDA's default
// schedule ("auto") spins in that wait while the process has fewer CUDA
// contexts than cores, so each device slot holds a core through the whole
// forward: on the GPU host, ResNet-50 fp32 cost 600-700 us of server CPU per
// request against the null runner's 314-353 for the same requests, about
// what two slots spinning through 92 % device-busy burn
// (docs/performance.md). "block" parks the thread on an OS primitive until
// the device signals (a wake-up per batch), leaving the cores to gRPC's
// threads; "yield" spins with sched_yield; "spin" always spins. Measured on
// the H200 (docs/performance.md): "block" saved 10-16 % of the server CPU
// per request in fp32 but served 1-7 % less (0-8 % less in fp16), so the
// default stays "auto"; "block" is for hosts whose cores are shared.
//
// Thread-safety: SetCudaSync and CurrentCudaSync are thread-safe; set the
// mode before the first CUDA device is probed (main does, from the flag): a
// device already used keeps the schedule it was first given.
#ifndef METALSERVE_SERVER_RUNTIME_CUDA_SYNC_H_
#define METALSERVE_SERVER_RUNTIME_CUDA_SYNC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metalserve {

enum class CudaSync {
  kAuto,   // CUDA's own choice (spin while contexts < cores, else yield)
  kSpin,   // cudaDeviceScheduleSpin
  kYield,  // cudaDeviceScheduleYield
  kBlock,  // cudaDeviceScheduleBlockingSync
};

// "auto", "spin", "yield" or "block"; INVALID_ARGUMENT naming the value and
// the choices otherwise.
absl::StatusOr<CudaSync> ParseCudaSync(absl::string_view name);
std::string CudaSyncName(CudaSync mode);

// The process's mode (kAuto until set).
void SetCudaSync(CudaSync mode);
CudaSync CurrentCudaSync();

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_CUDA_SYNC_H_
