// Device choice over a DevicePlatform; see device_choice.h.
#include "server/runtime/device_choice.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace metalserve {
namespace {

// "cuda" -> "cuda:0"; "cuda:N" checked; other names unchanged.
absl::StatusOr<std::string> CanonicalName(const std::string& requested) {
  if (requested == "cuda") return std::string("cuda:0");
  if (absl::StartsWith(requested, "cuda:")) {
    int index = 0;
    if (!absl::SimpleAtoi(requested.substr(5), &index) || index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device '", requested, "': bad CUDA index"));
    }
    return absl::StrCat("cuda:", index);
  }
  if (requested == "mps" || requested == "cpu") return requested;
  return absl::InvalidArgumentError(absl::StrCat(
      "device '", requested,
      "' is not one of auto, first_available, mps, cuda, cuda:N, cpu"));
}

}  // namespace

std::vector<std::string> WorkingAccelerators(const DevicePlatform& platform) {
  std::vector<std::string> working;
  for (const char* device : {"mps", "cuda:0"}) {
    std::string why;
    if (!platform.Available(device, &why)) continue;
    const absl::Status probe = platform.Probe(device);
    if (!probe.ok()) {
      LOG(WARNING) << "runtime: device " << device
                   << " reports itself available but fails its probe, skipped: "
                   << probe.message();
      continue;
    }
    working.push_back(device);
  }
  return working;
}

absl::StatusOr<std::string> ChooseDeviceName(const std::string& requested,
                                             const DevicePlatform& platform) {
  if (requested == "auto" || requested == "first_available") {
    const std::vector<std::string> working = WorkingAccelerators(platform);
    return working.empty() ? std::string("cpu") : working.front();
  }
  absl::StatusOr<std::string> name = CanonicalName(requested);
  if (!name.ok() || *name == "cpu") return name;
  std::string why;
  if (!platform.Available(*name, &why)) {
    return absl::FailedPreconditionError(
        absl::StrCat("device '", requested, "' requested but ", why));
  }
  const absl::Status probe = platform.Probe(*name);
  if (!probe.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device '", requested, "' reports itself available but fails its probe: ",
        probe.message()));
  }
  return name;
}

}  // namespace metalserve
