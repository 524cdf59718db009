// CreateTorchRunner: `--device=auto` chooses the device by measuring the
// model on each working device (device_choice.h); every other request goes
// straight to TorchRunner::Create.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/runtime/device_choice.h"
#include "server/runtime/device_thread.h"
#include "server/runtime/torch_device.h"
#include "server/runtime/torch_runner.h"
#include "server/runtime/torch_runner_internal.h"

namespace metalserve {
namespace {

constexpr int kTimedForwards = 3;  // the median is kept

// Zero inputs of `rows` rows for the runner's signature (a free dimension
// counts 1, as the load's probe inputs do).
std::vector<Tensor> ZeroInputs(const ModelInfo& info, int64_t rows) {
  std::vector<Tensor> inputs;
  for (const TensorSpec& spec : info.inputs) inputs.push_back(ZerosOf(spec, rows));
  return inputs;
}

// The median forward time at each size, through Run (host copies included:
// the transfer is part of what a device costs).
DeviceTiming Measure(Runner& runner, const std::vector<int64_t>& sizes, Clock* clock) {
  DeviceTiming timing;
  for (int64_t b : sizes) {
    const std::vector<Tensor> inputs = ZeroInputs(runner.info(), b);
    std::vector<absl::Duration> runs;
    for (int i = 0; i < kTimedForwards; ++i) {
      const absl::Time start = clock->TimeNow();
      const auto out = runner.Run(inputs);
      if (!out.ok()) {
        timing.status = absl::Status(out.status().code(), absl::StrCat("forward at batch ", b, ": ",
                                                                       out.status().message()));
        return timing;
      }
      runs.push_back(clock->TimeNow() - start);
    }
    std::sort(runs.begin(), runs.end());
    timing.forward[b] = runs[runs.size() / 2];
  }
  return timing;
}

// Stamps how the device was chosen on a runner TorchRunner::Create made,
// after the accelerators its own choice skipped (first_available's probe
// failures; none for a device named explicitly).
absl::StatusOr<std::unique_ptr<Runner>> WithChoice(absl::StatusOr<std::unique_ptr<Runner>> runner,
                                                   DeviceChoiceInfo choice) {
  if (runner.ok()) {
    auto& torch_runner = static_cast<torch_internal::TorchRunner&>(**runner);
    const std::vector<std::string>& own = torch_runner.info().device_choice.skipped;
    choice.skipped.insert(choice.skipped.begin(), own.begin(), own.end());
    torch_runner.SetDeviceChoice(std::move(choice));
  }
  return runner;
}

// Why a device not measured was taken: see DeviceChoiceInfo::reason.
DeviceChoiceInfo UnmeasuredChoice(const RuntimeOptions& options) {
  DeviceChoiceInfo choice;
  choice.requested = options.device;
  if (torch_internal::IsPackagePath(options.model_path)) {
    choice.reason = "package";
  } else if (options.device == "first_available") {
    choice.reason = "first_available";
  } else if (options.device == "auto") {
    choice.reason = "shared_device_thread";
  } else {
    choice.reason = "explicit";
  }
  return choice;
}

// Runs each probe on the shared thread of the device probed: the device's
// work belongs on its one thread (MPS is not safe from two), and under a
// repository other models may already be running there when one loads.
class ProbeOnDeviceThread final : public DevicePlatform {
 public:
  using ThreadFor = std::function<std::shared_ptr<DeviceThread>(const std::string&)>;
  ProbeOnDeviceThread(std::shared_ptr<const DevicePlatform> base, ThreadFor thread_for)
      : base_(std::move(base)), thread_for_(std::move(thread_for)) {}
  bool Available(const std::string& device, std::string* why) const override {
    return platform().Available(device, why);
  }
  absl::Status Probe(const std::string& device) const override {
    absl::Status probe;
    const absl::Status ran =
        thread_for_(device)->RunSync([&] { probe = platform().Probe(device); });
    return ran.ok() ? probe : ran;
  }

 private:
  const DevicePlatform& platform() const { return base_ != nullptr ? *base_ : torch_; }
  const std::shared_ptr<const DevicePlatform> base_;
  const torch_internal::TorchPlatform torch_;
  const ThreadFor thread_for_;
};

// `given`, with its platform's probes moved onto the device threads when
// the threads are shared (device_thread_for).
RuntimeOptions WithProbesOnDeviceThreads(const RuntimeOptions& given) {
  RuntimeOptions o = given;
  if (o.device_thread == nullptr && o.device_thread_for) {
    o.device_platform =
        std::make_shared<ProbeOnDeviceThread>(given.device_platform, given.device_thread_for);
  }
  return o;
}

}  // namespace

std::unique_ptr<DevicePlatform> CreateTorchPlatform() {
  return std::make_unique<torch_internal::TorchPlatform>();
}

absl::StatusOr<std::unique_ptr<Runner>> CreateTorchRunner(const RuntimeOptions& given) {
  const RuntimeOptions options = WithProbesOnDeviceThreads(given);
  // A device thread belongs to one device: with one given, auto keeps the
  // fixed order (with device_thread_for instead, each device measured runs
  // on its own shared thread). A package is compiled for one device type,
  // named in its file name (aoti_runner.cc): nothing to measure.
  if (options.device != "auto" || options.device_thread != nullptr ||
      torch_internal::IsPackagePath(options.model_path)) {
    return WithChoice(torch_internal::TorchRunner::Create(options), UnmeasuredChoice(options));
  }
  const torch_internal::TorchPlatform torch_platform;
  const DevicePlatform& platform =
      options.device_platform != nullptr ? *options.device_platform : torch_platform;
  Clock* clock = options.clock != nullptr ? options.clock : Clock::RealClock();
  std::map<std::string, std::unique_ptr<Runner>> runners;
  std::map<std::string, absl::Status> load_errors;
  const MeasureDevice measure = [&](const std::string& device) {
    RuntimeOptions o = options;
    o.device = device;
    absl::StatusOr<std::unique_ptr<Runner>> runner = torch_internal::TorchRunner::Create(o);
    DeviceTiming timing;
    if (!runner.ok()) {
      timing.status = runner.status();
      load_errors[device] = runner.status();
      return timing;
    }
    timing = Measure(**runner, options.warmup_batch_sizes, clock);
    for (const auto& [b, took] : timing.forward) {
      if (options.on_device_forward) options.on_device_forward(device, b, took);
    }
    runners[device] = *std::move(runner);
    return timing;
  };
  // With no working accelerator the CPU alone is loaded, and still timed:
  // the table (GetModelMetadata, the metric) then has its rows.
  std::vector<std::string> probe_skipped;
  const std::vector<std::string> accelerators = WorkingAccelerators(platform, &probe_skipped);
  absl::StatusOr<MeasuredChoice> choice =
      ChooseByMeasurement(accelerators, options.warmup_batch_sizes, measure);
  if (!choice.ok()) {
    auto cpu = load_errors.find("cpu");
    return cpu != load_errors.end() ? cpu->second : choice.status();
  }
  return WithChoice(std::move(runners[choice->device]),
                    DescribeMeasuredChoice(*choice, probe_skipped));
}

}  // namespace metalserve
