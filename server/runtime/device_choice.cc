// Device choice over a DevicePlatform; see device_choice.h.
#include "server/runtime/device_choice.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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

std::vector<std::string> WorkingAccelerators(const DevicePlatform& platform,
                                             std::vector<std::string>* skipped) {
  std::vector<std::string> working;
  for (const char* device : {"mps", "cuda:0"}) {
    std::string why;
    if (!platform.Available(device, &why)) continue;
    const absl::Status probe = platform.Probe(device);
    if (!probe.ok()) {
      LOG(WARNING) << "runtime: device " << device
                   << " reports itself available but fails its probe, skipped: "
                   << probe.message();
      if (skipped != nullptr) {
        skipped->push_back(absl::StrCat(device, ": probe failed: ", probe.message()));
      }
      continue;
    }
    working.push_back(device);
  }
  return working;
}

absl::StatusOr<std::string> ChooseDeviceName(const std::string& requested,
                                             const DevicePlatform& platform,
                                             std::vector<std::string>* skipped) {
  if (requested == "auto" || requested == "first_available") {
    const std::vector<std::string> working = WorkingAccelerators(platform, skipped);
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

absl::StatusOr<std::string> PickFastest(const std::vector<DeviceTiming>& timings,
                                        const std::vector<int64_t>& batch_sizes) {
  const DeviceTiming* best = nullptr;
  absl::Duration best_total = absl::InfiniteDuration();
  std::vector<std::string> failures;
  for (const DeviceTiming& t : timings) {
    if (!t.status.ok()) {
      failures.push_back(absl::StrCat(t.device, ": ", t.status.message()));
      continue;
    }
    absl::Duration total;
    bool complete = true;
    for (int64_t b : batch_sizes) {
      auto it = t.forward.find(b);
      if (it == t.forward.end()) {
        complete = false;
        break;
      }
      total += it->second;
    }
    if (!complete) {
      failures.push_back(absl::StrCat(t.device, ": not measured at every batch size"));
      continue;
    }
    if (total < best_total) {  // strict: a tie keeps the earlier device
      best = &t;
      best_total = total;
    }
  }
  if (best == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no device could serve the model: ", absl::StrJoin(failures, "; ")));
  }
  return best->device;
}

std::string TimingTable(const std::vector<DeviceTiming>& timings,
                        const std::vector<int64_t>& batch_sizes) {
  std::string out = absl::StrFormat("%-8s", "device");
  for (int64_t b : batch_sizes) absl::StrAppend(&out, absl::StrFormat(" %10s", absl::StrCat("b", b, " ms")));
  absl::StrAppend(&out, absl::StrFormat(" %10s", "total ms"));
  for (const DeviceTiming& t : timings) {
    absl::StrAppend(&out, "\n", absl::StrFormat("%-8s", t.device));
    if (!t.status.ok()) {
      absl::StrAppend(&out, " failed: ", t.status.message());
      continue;
    }
    absl::Duration total;
    for (int64_t b : batch_sizes) {
      auto it = t.forward.find(b);
      const absl::Duration d = it == t.forward.end() ? absl::ZeroDuration() : it->second;
      total += d;
      absl::StrAppend(&out, absl::StrFormat(" %10.3f", absl::ToDoubleMilliseconds(d)));
    }
    absl::StrAppend(&out, absl::StrFormat(" %10.3f", absl::ToDoubleMilliseconds(total)));
  }
  return out;
}

absl::StatusOr<MeasuredChoice> ChooseByMeasurement(const std::vector<std::string>& accelerators,
                                                   const std::vector<int64_t>& batch_sizes,
                                                   const MeasureDevice& measure) {
  std::vector<std::string> candidates = accelerators;
  candidates.push_back("cpu");
  MeasuredChoice choice;
  for (const std::string& device : candidates) {
    choice.timings.push_back(measure(device));
    choice.timings.back().device = device;
  }
  absl::StatusOr<std::string> best = PickFastest(choice.timings, batch_sizes);
  LOG(INFO) << "runtime: device auto: forward time per batch size on each device\n"
            << TimingTable(choice.timings, batch_sizes) << "\nserving on "
            << (best.ok() ? *best : std::string("none"));
  if (!best.ok()) return best.status();
  choice.device = *best;
  return choice;
}

DeviceChoiceInfo DescribeMeasuredChoice(const MeasuredChoice& choice,
                                        const std::vector<std::string>& probe_skipped) {
  DeviceChoiceInfo info;
  info.requested = "auto";
  info.reason = choice.timings.size() > 1 ? "measured" : "no_accelerator";
  info.skipped = probe_skipped;
  for (const DeviceTiming& t : choice.timings) {
    if (!t.status.ok()) {
      info.skipped.push_back(absl::StrCat(t.device, ": ", t.status.message()));
      continue;
    }
    for (const auto& [batch, took] : t.forward) info.timings.push_back({t.device, batch, took});
  }
  return info;
}

}  // namespace metalserve
