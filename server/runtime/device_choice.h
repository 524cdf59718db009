// Which device a model is served on: the choice logic, torch-free, as pure
// functions over a DevicePlatform (what the machine says it has and whether
// each device passes its probe) so that it is tested with fakes; the LibTorch
// platform lives in torch_device.h.
//
// A device is used only after it proves it works. PyTorch reports MPS as
// available inside Apple's Virtualization Framework (GitHub's hosted macOS
// arm64 runners), yet allocations there fail or results differ from the
// CPU's. So every accelerator is probed before use: a small computation on
// it compared with the CPU's result, and for MPS an allocation of a few MB.
//   - "auto" and "first_available": the first of mps, cuda:0 that is
//     available AND passes its probe, else cpu. A device that is available
//     but fails the probe is skipped with one WARNING naming the failure.
//   - an explicit device ("mps", "cuda", "cuda:N", "cpu") is never replaced:
//     missing or failing its probe is FAILED_PRECONDITION with the reason.
//   - the CPU is the probe's reference and is not probed.
//
// Thread-safety: the functions are thread-safe when the platform's are.
#ifndef METALSERVE_SERVER_RUNTIME_DEVICE_CHOICE_H_
#define METALSERVE_SERVER_RUNTIME_DEVICE_CHOICE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace metalserve {

// What the machine offers. Implementations: the LibTorch one
// (torch_internal::TorchPlatform) and fakes in tests.
class DevicePlatform {
 public:
  virtual ~DevicePlatform() = default;
  // Whether the framework claims `device` ("mps", "cuda:N") is there; for a
  // missing one, *why says what is missing.
  virtual bool Available(const std::string& device, std::string* why) const = 0;
  // Runs the probe on `device`: OK when it computes what the CPU computes
  // (and, for MPS, can allocate a few MB); otherwise an error whose message
  // names the failure.
  virtual absl::Status Probe(const std::string& device) const = 0;
};

// The device to serve on for `requested` ("auto", "first_available", "mps",
// "cuda", "cuda:N", "cpu"), as "mps", "cuda:N" or "cpu". INVALID_ARGUMENT
// for another name; FAILED_PRECONDITION for an explicit device that is
// missing or fails its probe.
absl::StatusOr<std::string> ChooseDeviceName(const std::string& requested,
                                             const DevicePlatform& platform);

// The accelerators `auto` considers, in order, that are available and pass
// the probe (each one that fails is logged once); the CPU is not listed.
std::vector<std::string> WorkingAccelerators(const DevicePlatform& platform);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_DEVICE_CHOICE_H_
