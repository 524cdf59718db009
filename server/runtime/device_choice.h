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

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/runtime/runner.h"

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
// missing or fails its probe. With `skipped` given, each accelerator the
// fixed order passed over because it failed its probe is appended to it as
// WorkingAccelerators does (what DeviceChoiceInfo::skipped reports).
absl::StatusOr<std::string> ChooseDeviceName(const std::string& requested,
                                             const DevicePlatform& platform,
                                             std::vector<std::string>* skipped = nullptr);

// The accelerators `auto` considers, in order, that are available and pass
// the probe (each one that fails is logged once, and with `skipped` given
// appended to it as "<device>: probe failed: <why>"); the CPU is not listed.
std::vector<std::string> WorkingAccelerators(const DevicePlatform& platform,
                                             std::vector<std::string>* skipped = nullptr);

// --- auto: choosing by measurement ------------------------------------------
//
// `--device=auto` loads the model (verified graph, warmed up) on every
// working device, the accelerators and the CPU, measures a forward at each
// warm-up batch size (the sizes batches are padded to, i.e. the sizes the
// model will see) and serves on the device with the least total: the time
// to serve one batch of each size. "first_available" keeps the fixed order;
// an explicit device is never overridden. Ties (equal totals) go to the
// device earlier in the order mps, cuda:0, cpu.

// One device's measurement: per batch size, the forward time (the median of
// a few forwards through the serving path, host copies included), or the
// reason it could not be measured.
struct DeviceTiming {
  std::string device;
  absl::Status status;                           // not OK: failed to load or run
  std::map<int64_t, absl::Duration> forward;     // batch size -> time
};

// The device with the least total over `batch_sizes` among those measured
// OK at every size; FAILED_PRECONDITION listing each failure when none was.
absl::StatusOr<std::string> PickFastest(const std::vector<DeviceTiming>& timings,
                                        const std::vector<int64_t>& batch_sizes);

// The timings as a table for the log: one row per device, one column per
// batch size (milliseconds), the total, and the failure for a device that
// has one.
std::string TimingTable(const std::vector<DeviceTiming>& timings,
                        const std::vector<int64_t>& batch_sizes);

// Measures one device (in the runtime: loads the model there and times it).
using MeasureDevice = std::function<DeviceTiming(const std::string& device)>;

struct MeasuredChoice {
  std::string device;
  std::vector<DeviceTiming> timings;  // in the order measured
};

// `accelerators` (WorkingAccelerators' answer, computed once so that each
// probe failure is logged once) then "cpu", each measured, and the fastest
// picked (PickFastest); logs the table.
absl::StatusOr<MeasuredChoice> ChooseByMeasurement(const std::vector<std::string>& accelerators,
                                                   const std::vector<int64_t>& batch_sizes,
                                                   const MeasureDevice& measure);

// What ModelInfo::device_choice reports for a measured choice: requested
// "auto", reason "measured" (or "no_accelerator" when the CPU was the only
// candidate), one timing per device and batch size measured, and in
// `skipped` the accelerators `probe_skipped` names (WorkingAccelerators'
// list) then each device that failed to load or run.
DeviceChoiceInfo DescribeMeasuredChoice(const MeasuredChoice& choice,
                                        const std::vector<std::string>& probe_skipped);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_DEVICE_CHOICE_H_
