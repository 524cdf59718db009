#include "server/runtime/hybrid_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/half_float.h"
#include "glog/logging.h"

namespace metalserve {
namespace {

constexpr double kRefine = 0.2;  // weight of an observed batch in its size's cost

// Seeded inputs for `info`'s signature at `rows` rows: floating inputs in
// [0, 1), integers and bools 0, so that any model's embedding or index
// input stays in range.
std::vector<Tensor> ProbeTensors(const ModelInfo& info, int64_t rows) {
  std::vector<Tensor> inputs;
  uint32_t state = 12345;
  for (const TensorSpec& spec : info.inputs) {
    Tensor t = ZerosOf(spec, rows);  // other variable dimensions count 1
    const int64_t item = ItemSize(t.dtype);
    const int64_t n = item > 0 ? static_cast<int64_t>(t.data.size()) / item : 0;
    for (int64_t i = 0; i < n; ++i) {
      state = state * 1664525u + 1013904223u;
      const float u = static_cast<float>(state >> 8) / static_cast<float>(1u << 24);
      char* p = t.data.data() + i * item;
      if (t.dtype == DType::kFloat32) {
        std::memcpy(p, &u, sizeof u);
      } else if (t.dtype == DType::kFloat16) {
        const uint16_t h = FloatToHalf(u);
        std::memcpy(p, &h, sizeof h);
      } else if (t.dtype == DType::kBFloat16) {
        const uint16_t b = FloatToBFloat16(u);
        std::memcpy(p, &b, sizeof b);
      } else if (t.dtype == DType::kFloat64) {
        const double d = u;
        std::memcpy(p, &d, sizeof d);
      }  // integers and bools stay 0
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

bool ReadFloating(const Tensor& t, std::vector<double>* out) {
  const int64_t size = ItemSize(t.dtype);
  const size_t n = size > 0 ? t.data.size() / static_cast<size_t>(size) : 0;
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    const char* p = t.data.data() + i * size;
    switch (t.dtype) {
      case DType::kFloat32: { float f; std::memcpy(&f, p, 4); (*out)[i] = f; break; }
      case DType::kFloat64: { double d; std::memcpy(&d, p, 8); (*out)[i] = d; break; }
      case DType::kFloat16: { uint16_t h; std::memcpy(&h, p, 2); (*out)[i] = HalfToFloat(h); break; }
      case DType::kBFloat16: { uint16_t b; std::memcpy(&b, p, 2); (*out)[i] = BFloat16ToFloat(b); break; }
      default: return false;
    }
  }
  return true;
}

}  // namespace

absl::Status CompareOutputs(const std::vector<Tensor>& want, const std::vector<Tensor>& got,
                            double tolerance) {
  if (want.size() != got.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(got.size(), " outputs against ", want.size()));
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const Tensor& w = want[i];
    const Tensor& g = got[i];
    if (w.dtype != g.dtype || w.shape != g.shape) {
      return absl::FailedPreconditionError(absl::StrCat(
          "output ", i, " (", w.name, "): ", DTypeName(g.dtype), "[", absl::StrJoin(g.shape, ","),
          "] against ", DTypeName(w.dtype), "[", absl::StrJoin(w.shape, ","), "]"));
    }
    std::vector<double> a, b;
    if (!ReadFloating(w, &a) || !ReadFloating(g, &b)) {
      if (w.data != g.data) {
        return absl::FailedPreconditionError(
            absl::StrCat("output ", i, " (", w.name, "): values differ"));
      }
      continue;
    }
    double scale = 0, worst = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      scale = std::max(scale, std::abs(a[k]));
      worst = std::max(worst, std::abs(a[k] - b[k]));
    }
    const double relative = scale > 0 ? worst / scale : worst;
    if (!(relative <= tolerance)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "output %d (%s): max relative deviation %.3g > %.3g", i, w.name, relative, tolerance));
    }
  }
  return absl::OkStatus();
}

// --- DevicePicker --------------------------------------------------------

absl::StatusOr<DevicePicker> DevicePicker::Create(std::vector<Device> devices) {
  if (devices.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("hybrid serving needs two or more devices, got ", devices.size()));
  }
  for (Device& d : devices) {
    if (d.costs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("device ", d.name, " has no measured cost"));
    }
    std::sort(d.costs.begin(), d.costs.end(),
              [](const WarmupTiming& x, const WarmupTiming& y) { return x.batch_size < y.batch_size; });
  }
  return DevicePicker(std::move(devices));
}

DevicePicker::DevicePicker(std::vector<Device> devices)
    : devices_(std::move(devices)), outstanding_(devices_.size(), absl::ZeroDuration()) {
  for (const Device& d : devices_) passed_over_.emplace_back(d.costs.size(), 0);
}

absl::Duration DevicePicker::Cost(int d, int64_t rows) const {
  const std::vector<WarmupTiming>& c = devices_[d].costs;
  if (rows <= c.front().batch_size) return c.front().forward;
  for (size_t i = 1; i < c.size(); ++i) {
    if (rows <= c[i].batch_size) {
      const double f = static_cast<double>(rows - c[i - 1].batch_size) /
                       static_cast<double>(c[i].batch_size - c[i - 1].batch_size);
      return c[i - 1].forward + (c[i].forward - c[i - 1].forward) * f;
    }
  }
  return c.back().forward * (static_cast<double>(rows) / static_cast<double>(c.back().batch_size));
}

int DevicePicker::Pick(int64_t rows) const {
  int best = 0;
  absl::Duration best_finish = absl::InfiniteDuration();
  for (int d = 0; d < size(); ++d) {
    const absl::Duration finish = outstanding_[d] + Cost(d, rows);
    if (finish < best_finish) {
      best = d;
      best_finish = finish;
    }
  }
  for (int d = 0; d < size(); ++d) {
    if (d == best || outstanding_[d] > absl::ZeroDuration()) continue;
    const std::vector<WarmupTiming>& c = devices_[d].costs;
    for (size_t i = 0; i < c.size(); ++i) {
      if (c[i].batch_size == rows && passed_over_[d][i] >= kRecheckEvery &&
          c[i].forward <= best_finish * kRecheckMaxRatio) {
        return d;
      }
    }
  }
  return best;
}

absl::Duration DevicePicker::Started(int d, int64_t rows) {
  const absl::Duration predicted = Cost(d, rows);
  outstanding_[d] += predicted;
  for (int e = 0; e < size(); ++e) {
    const std::vector<WarmupTiming>& c = devices_[e].costs;
    for (size_t i = 0; i < c.size(); ++i) {
      if (c[i].batch_size == rows) passed_over_[e][i] = e == d ? 0 : passed_over_[e][i] + 1;
    }
  }
  return predicted;
}

void DevicePicker::Finished(int d, int64_t rows, absl::Duration predicted, absl::Duration took) {
  outstanding_[d] = std::max(absl::ZeroDuration(), outstanding_[d] - predicted);
  for (WarmupTiming& c : devices_[d].costs) {
    if (c.batch_size == rows) c.forward = c.forward * (1 - kRefine) + took * kRefine;
  }
}

// --- HybridRunner ----------------------------------------------------------

absl::StatusOr<std::unique_ptr<HybridRunner>> HybridRunner::Create(
    const std::vector<std::string>& devices, const Maker& make,
    const std::vector<int64_t>& batch_sizes, double tolerance, Clock* clock) {
  if (std::set<std::string>(devices.begin(), devices.end()).size() != devices.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--devices=", absl::StrJoin(devices, ","), ": a device is listed twice"));
  }
  std::vector<std::unique_ptr<Runner>> runners;
  std::vector<DevicePicker::Device> costs;
  for (const std::string& d : devices) {
    absl::StatusOr<std::unique_ptr<Runner>> r = make(d);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat("hybrid device ", d, ": ", r.status().message()));
    }
    costs.push_back({d, (*r)->info().warmup_timings});
    runners.push_back(*std::move(r));
  }
  const ModelInfo& first = runners.front()->info();
  for (size_t i = 1; i < runners.size(); ++i) {
    for (int64_t b : batch_sizes) {
      const std::vector<Tensor> probe = ProbeTensors(first, b);
      absl::StatusOr<std::vector<Tensor>> want = runners.front()->Run(probe);
      absl::StatusOr<std::vector<Tensor>> got = runners[i]->Run(probe);
      absl::Status agree = !want.ok()  ? want.status()
                           : !got.ok() ? got.status()
                                       : CompareOutputs(*want, *got, tolerance);
      if (!agree.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("hybrid devices ", first.device, " and ", runners[i]->info().device,
                         " disagree at batch ", b, ": ", agree.message()));
      }
    }
  }
  absl::StatusOr<DevicePicker> picker = DevicePicker::Create(std::move(costs));
  if (!picker.ok()) return picker.status();
  return std::unique_ptr<HybridRunner>(
      new HybridRunner(std::move(runners), *std::move(picker), clock));
}

HybridRunner::HybridRunner(std::vector<std::unique_ptr<Runner>> runners, DevicePicker picker,
                           Clock* clock)
    : runners_(std::move(runners)),
      clock_(clock != nullptr ? clock : Clock::SteadyClock()),
      picker_(std::move(picker)),
      batches_(runners_.size(), 0),
      last_end_(runners_.size(), absl::InfinitePast()) {
  info_ = runners_.front()->info();
  std::vector<std::string> names;
  DeviceChoiceInfo choice;
  choice.requested = "";
  choice.reason = "hybrid";
  for (const auto& r : runners_) {
    names.push_back(r->info().device);
    for (const WarmupTiming& w : r->info().warmup_timings) {
      choice.timings.push_back({r->info().device, w.batch_size, w.forward});
    }
  }
  choice.requested = absl::StrJoin(names, ",");
  info_.device = absl::StrJoin(names, "+");
  info_.device_choice = std::move(choice);
}

HybridRunner::~HybridRunner() {
  const std::vector<int64_t> batches = BatchesPerDevice();
  std::vector<std::string> parts;
  for (size_t d = 0; d < runners_.size(); ++d) {
    parts.push_back(absl::StrCat(runners_[d]->info().device, "=", batches[d]));
  }
  LOG(INFO) << "hybrid: batches run per device: " << absl::StrJoin(parts, " ");
}

template <typename F>
auto HybridRunner::OnChosen(int64_t rows, F&& run) -> decltype(run(static_cast<Runner*>(nullptr))) {
  int d = 0;
  absl::Duration predicted;
  {
    absl::MutexLock l(&mu_);
    d = picker_.Pick(rows);
    predicted = picker_.Started(d, rows);
    ++batches_[d];
  }
  const absl::Time start = clock_->TimeNow();
  auto result = run(runners_[d].get());
  const absl::Time end = clock_->TimeNow();
  absl::Duration busy;
  {
    absl::MutexLock l(&mu_);
    picker_.Finished(d, rows, predicted, end - start);
    // Two executors can hand one device two batches at once; the second
    // waits behind the first on its device thread. Its busy time counts
    // from where the device's previous batch ended, so that a device's
    // busy seconds never exceed the wall time.
    busy = end - std::max(start, last_end_[d]);
    last_end_[d] = std::max(last_end_[d], end);
  }
  if (result.ok() && on_device_batch_) on_device_batch_(runners_[d]->info().device, rows, busy);
  return result;
}

absl::StatusOr<std::vector<Tensor>> HybridRunner::Run(const std::vector<Tensor>& inputs) {
  const int64_t rows = inputs.empty() || inputs[0].shape.empty() ? 1 : inputs[0].shape[0];
  return OnChosen(rows, [&](Runner* r) { return r->Run(inputs); });
}

absl::StatusOr<std::vector<Tensor>> HybridRunner::RunBatch(
    const std::vector<BatchedInput>& inputs) {
  return RunBatchStaged(inputs, nullptr);  // with null stages, each runner's RunBatch
}

absl::StatusOr<std::vector<Tensor>> HybridRunner::RunBatchStaged(
    const std::vector<BatchedInput>& inputs, ComputeStages* stages) {
  const int64_t rows = inputs.empty() || inputs[0].shape.empty() ? 1 : inputs[0].shape[0];
  return OnChosen(rows, [&](Runner* r) { return r->RunBatchStaged(inputs, stages); });
}

std::vector<std::string> HybridRunner::Devices() const {
  std::vector<std::string> devices;
  for (const auto& r : runners_) devices.push_back(r->info().device);
  return devices;
}

std::vector<MemoryStats> HybridRunner::MemoryPerDevice() {
  std::vector<MemoryStats> memory;
  for (const auto& r : runners_) memory.push_back(r->Memory());
  return memory;
}

bool HybridRunner::set_on_device_batch(DeviceBatchFn fn) {
  on_device_batch_ = std::move(fn);
  return true;
}

void HybridRunner::BetweenBatches(bool idle) {
  for (const auto& r : runners_) r->BetweenBatches(idle);
}

std::vector<int64_t> HybridRunner::BatchesPerDevice() const {
  absl::MutexLock l(&mu_);
  return batches_;
}

}  // namespace metalserve
