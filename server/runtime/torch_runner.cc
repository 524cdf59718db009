// The LibTorch runner: device choice, memory figures, the request path.
// Load, verification and warm-up are in torch_runner_load.cc; the class is
// in torch_runner_internal.h. Builds against Debian's
// LibTorch 1.13 (CPU) and pip/Homebrew 2.x (CUDA, MPS); newer APIs are behind
// TORCH_VERSION_MAJOR/MINOR and METALSERVE_TORCH_CUDA (set by CMake when the
// LibTorch found has CUDA).
#include "server/runtime/torch_runner.h"
#include "server/runtime/torch_runner_internal.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <ATen/detail/MPSHooksInterface.h>
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#include <torch/mps.h>
#define METALSERVE_HAS_TORCH_MPS_API 1
#endif
#ifdef METALSERVE_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif
#ifdef __APPLE__
#include <mach/mach.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "glog/logging.h"
#include "common/status_macros.h"
#include "server/runtime/model_signature.h"
#include "server/runtime/signature_binding.h"


namespace metalserve {
namespace {

using torch_internal::DeviceThread;

// ---------------------------------------------------------------- helpers

int64_t ResidentBytes() {
#ifdef __APPLE__
  mach_task_basic_info info;
  mach_msg_type_number_t count = MACH_TASK_BASIC_INFO_COUNT;
  if (task_info(mach_task_self(), MACH_TASK_BASIC_INFO,
                reinterpret_cast<task_info_t>(&info), &count) != KERN_SUCCESS) {
    return -1;
  }
  return static_cast<int64_t>(info.resident_size);
#else
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return -1;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
#endif
}

bool MpsAvailable() {
#ifdef METALSERVE_HAS_TORCH_MPS_API
  return torch::mps::is_available();
#else
  return at::hasMPS();
#endif
}

bool IsOutOfMemory(const std::string& what) {
  return absl::StrContains(what, "out of memory") ||
         absl::StrContains(what, "Out of memory") ||
         absl::StrContains(what, "OutOfMemory");
}

// ------------------------------------------------------ device memory ops

class CpuMemoryOps final : public DeviceMemoryOps {
 public:
  bool SupportsEmptyCache() const override { return false; }
  void EmptyCache() override {}
  MemoryStats Stats() override {
    MemoryStats s;
    s.resident_bytes = ResidentBytes();
    return s;
  }
};

class MpsMemoryOps final : public DeviceMemoryOps {
 public:
  explicit MpsMemoryOps(DeviceThread* thread) : thread_(thread) {}
  bool SupportsEmptyCache() const override {
#if TORCH_VERSION_MAJOR >= 2
    return true;
#else
    return false;
#endif
  }
  void EmptyCache() override {
#if TORCH_VERSION_MAJOR >= 2
    thread_->RunSync([] { at::detail::getMPSHooks().emptyCache(); });
#endif
  }
  MemoryStats Stats() override {
    MemoryStats s;
    s.resident_bytes = ResidentBytes();
#if TORCH_VERSION_MAJOR >= 2
    const auto& hooks = at::detail::getMPSHooks();
    s.allocated_bytes = static_cast<int64_t>(hooks.getCurrentAllocatedMemory());
    s.reserved_bytes = static_cast<int64_t>(hooks.getDriverAllocatedMemory());
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 5
    s.limit_bytes = static_cast<int64_t>(hooks.getRecommendedMaxMemory());
#endif
#endif
    return s;
  }

 private:
  DeviceThread* const thread_;
};

#ifdef METALSERVE_TORCH_CUDA
class CudaMemoryOps final : public DeviceMemoryOps {
 public:
  explicit CudaMemoryOps(c10::DeviceIndex index) : index_(index) {}
  bool SupportsEmptyCache() const override { return true; }
  void EmptyCache() override {
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
  MemoryStats Stats() override {
    MemoryStats s;
    s.resident_bytes = ResidentBytes();
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_);
    s.allocated_bytes = stats.allocated_bytes[0].current;  // [0]: aggregate
    s.reserved_bytes = stats.reserved_bytes[0].current;
    size_t free_bytes = 0, total_bytes = 0;
    c10::cuda::CUDAGuard guard(index_);
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      s.limit_bytes = static_cast<int64_t>(total_bytes);
    }
    return s;
  }

 private:
  const c10::DeviceIndex index_;
};
#endif

}  // namespace

namespace torch_internal {

absl::StatusOr<at::ScalarType> ToScalarType(DType d) {
  switch (d) {
    case DType::kFloat32: return at::kFloat;
    case DType::kFloat16: return at::kHalf;
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kFloat64: return at::kDouble;
    case DType::kInt64: return at::kLong;
    case DType::kInt32: return at::kInt;
    case DType::kUInt8: return at::kByte;
    case DType::kInt8: return at::kChar;
    case DType::kBool: return at::kBool;
    case DType::kInvalid: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("dtype ", DTypeName(d),
                                                 " has no torch equivalent"));
}

std::string ModelMessage(const std::string& what) {
  std::vector<absl::string_view> lines =
      absl::StrSplit(what, '\n', absl::SkipWhitespace());
  if (lines.empty()) return "model raised an exception without a message";
  absl::string_view pick = lines.front();
  if (absl::StartsWith(pick, "The following operation failed")) pick = lines.back();
  absl::ConsumePrefix(&pick, "builtins.");
  return std::string(pick);
}

absl::StatusOr<Choice> ChooseDevice(const std::string& requested) {
  const std::string build = absl::StrCat("LibTorch ", TORCH_VERSION);
  if (requested == "auto") {
    if (MpsAvailable()) return Choice{c10::Device(c10::kMPS), "mps"};
    if (torch::cuda::is_available()) return Choice{c10::Device(c10::kCUDA, 0), "cuda:0"};
    return Choice{c10::Device(c10::kCPU), "cpu"};
  }
  if (requested == "cpu") return Choice{c10::Device(c10::kCPU), "cpu"};
  if (requested == "mps") {
    if (!MpsAvailable()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "device 'mps' requested but MPS is not available (", build,
          "; needs an Apple Silicon GPU and an MPS-enabled LibTorch)"));
    }
    return Choice{c10::Device(c10::kMPS), "mps"};
  }
  if (requested == "cuda" || absl::StartsWith(requested, "cuda:")) {
    int index = 0;
    if (requested != "cuda" &&
        (!absl::SimpleAtoi(requested.substr(5), &index) || index < 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("device '", requested, "': bad CUDA index"));
    }
    if (!torch::cuda::is_available()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "device '", requested, "' requested but CUDA is not available (",
          build, " has no CUDA support or no GPU is visible)"));
    }
    const int count = static_cast<int>(torch::cuda::device_count());
    if (index >= count) {
      return absl::FailedPreconditionError(absl::StrCat(
          "device '", requested, "' requested but only ", count,
          " CUDA device(s) are visible"));
    }
    return Choice{c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)),
                  absl::StrCat("cuda:", index)};
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "device '", requested, "' is not one of auto, mps, cuda, cuda:N, cpu"));
}

absl::StatusOr<at::ScalarType> ParsePrecision(const std::string& p) {
  if (p == "fp32") return at::kFloat;
  if (p == "fp16") return at::kHalf;
  if (p == "bf16") return at::kBFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("precision '", p, "' is not one of fp32, fp16, bf16"));
}


absl::StatusOr<Level> ParseLevel(const std::string& optimize,
                                 const Choice& device) {
  if (optimize == "none") return Level::kNone;
  if (optimize == "freeze") return Level::kFreeze;
  if (optimize == "full") return Level::kFull;
  if (optimize == "auto") {
    return device.device.is_mps() ? Level::kFreeze : Level::kFull;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "optimize '", optimize, "' is not one of none, freeze, full, auto"));
}

absl::StatusOr<std::unique_ptr<DeviceMemoryOps>> MemoryOpsFor(const Choice& device,
                                                              DeviceThread* thread) {
  if (device.device.is_mps()) return std::unique_ptr<DeviceMemoryOps>(new MpsMemoryOps(thread));
  if (device.device.is_cuda()) {
#ifdef METALSERVE_TORCH_CUDA
    return std::unique_ptr<DeviceMemoryOps>(new CudaMemoryOps(device.device.index()));
#else
    return absl::FailedPreconditionError(
        "this build of metalserve has no CUDA support (LibTorch without CUDA)");
#endif
  }
  return std::unique_ptr<DeviceMemoryOps>(new CpuMemoryOps());
}

absl::Status TorchRunner::CheckInput(size_t i, DType dtype,
                                     const std::vector<int64_t>& shape,
                                     int64_t bytes, int64_t rows) const {
  const TensorSpec& spec = info_.inputs[i];
  if (dtype != spec.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.name, "' has dtype ", DTypeName(dtype), ", want ",
        DTypeName(spec.dtype)));
  }
  if (shape.size() != spec.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.name, "' has rank ", shape.size(), " (shape ",
        ShapeToString(shape), "), want ", ShapeToString(spec.shape)));
  }
  if (shape[0] != rows || rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.name, "' has ", shape[0], " rows; want ", rows,
        " (>0, the same for every input)"));
  }
  ASSIGN_OR_RETURN(const int64_t n, NumElements(shape, spec.name));
  if (bytes != n * ItemSize(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.name, "' has ", bytes, " bytes, shape ",
        ShapeToString(shape), " needs ", n * ItemSize(dtype)));
  }
  return absl::OkStatus();
}

absl::Status TorchRunner::CheckInputs(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != info_.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", info_.name, " takes ", info_.inputs.size(), " input(s), got ",
        inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    RETURN_IF_ERROR(CheckInput(i, t.dtype, t.shape, static_cast<int64_t>(t.data.size()),
                               inputs[0].rows()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> TorchRunner::Run(
    const std::vector<Tensor>& inputs) {
  RETURN_IF_ERROR(CheckInputs(inputs));
  return RunHost(HostViews(inputs));
}

absl::StatusOr<std::vector<Tensor>> TorchRunner::RunBatch(
    const std::vector<BatchedInput>& inputs) {
  if (inputs.size() != info_.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", info_.name, " takes ", info_.inputs.size(), " input(s), got ",
        inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const BatchedInput& in = inputs[i];
    int64_t bytes = 0;
    for (absl::string_view p : in.pieces) bytes += static_cast<int64_t>(p.size());
    const int64_t row_bytes = in.RowBytes();
    if (in.shape.empty() || row_bytes <= 0 || bytes % row_bytes != 0 ||
        bytes > row_bytes * in.shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", info_.inputs[i].name, "': ", bytes,
          " bytes of pieces are not whole rows of ", ShapeToString(in.shape)));
    }
    // Padding makes up the difference; check the padded tensor's shape.
    RETURN_IF_ERROR(CheckInput(i, in.dtype, in.shape, row_bytes * in.shape[0],
                               inputs[0].shape.empty() ? 0 : inputs[0].shape[0]));
  }
  std::vector<at::Tensor> host;
  try {
    host = HostCopies(inputs);
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate the batch's host buffer: ", ModelMessage(e.what())));
  }
  return RunHost(host);
}

absl::StatusOr<std::vector<Tensor>> TorchRunner::RunHost(
    const std::vector<at::Tensor>& host) {
  absl::StatusOr<std::vector<Tensor>> result;
  OnDevice([&] { result = RunOnDeviceThread(host); });
  if (result.status().code() == absl::StatusCode::kResourceExhausted) {
    cache_policy_->OnOutOfMemory();
  }
  return result;
}

std::vector<at::Tensor> TorchRunner::HostViews(const std::vector<Tensor>& inputs) const {
  std::vector<at::Tensor> host;
  host.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    host.push_back(torch::from_blob(const_cast<char*>(t.data.data()), t.shape,
                                    at::TensorOptions().dtype(input_types_[i])));
  }
  return host;
}

std::vector<at::Tensor> TorchRunner::HostCopies(
    const std::vector<BatchedInput>& inputs) const {
  std::vector<at::Tensor> host;
  host.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const BatchedInput& in = inputs[i];
    auto options = at::TensorOptions().dtype(input_types_[i]);
    // Pinned on CUDA: the H2D copy on the device thread is then a DMA that
    // needs no staging copy of its own.
    if (device_.device.is_cuda()) options = options.pinned_memory(true);
    at::Tensor t = at::empty(in.shape, options);
    char* dst = static_cast<char*>(t.data_ptr());
    for (absl::string_view p : in.pieces) {
      std::memcpy(dst, p.data(), p.size());
      dst += p.size();
    }
    char* end = static_cast<char*>(t.data_ptr()) + t.nbytes();
    std::memset(dst, 0, static_cast<size_t>(end - dst));  // padding rows
    host.push_back(std::move(t));
  }
  return host;
}

std::vector<c10::IValue> TorchRunner::ToDevice(const std::vector<at::Tensor>& host) const {
  std::vector<c10::IValue> args;
  for (const at::Tensor& h : host) {
    at::Tensor x;
    if (device_.device.is_cuda()) {
      if (h.is_pinned()) {
        x = h.to(device_.device, /*non_blocking=*/true);
      } else {
        // Pinned staging buffer so the copy can overlap on this thread's stream.
        at::Tensor pinned = at::empty(h.sizes(), h.options().pinned_memory(true));
        pinned.copy_(h);
        x = pinned.to(device_.device, /*non_blocking=*/true);
      }
    } else if (device_.device.is_cpu()) {
      x = h;  // the host buffer outlives the forward
    } else {
      x = h.to(device_.device);
    }
    if (at::isFloatingType(x.scalar_type()) && x.scalar_type() != compute_dtype_) {
      x = x.to(compute_dtype_);
    }
    if (channels_last_ && x.dim() == 4) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    args.emplace_back(std::move(x));
  }
  return args;
}

absl::StatusOr<std::vector<Tensor>> TorchRunner::FromDevice(const c10::IValue& out) const {
  absl::StatusOr<std::vector<at::Tensor>> bound = OutputTensors(out, info_.outputs);
  if (!bound.ok()) return absl::InternalError(bound.status().message());
  const std::vector<at::Tensor>& tensors = *bound;
  if (tensors.size() != info_.outputs.size()) {
    return absl::InternalError(absl::StrCat("model returned ", tensors.size(),
                                            " output(s); signature has ",
                                            info_.outputs.size()));
  }
  std::vector<Tensor> result;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& spec = info_.outputs[i];
    ASSIGN_OR_RETURN(const at::ScalarType want, ToScalarType(spec.dtype));
    at::Tensor host = tensors[i].to(at::kCPU).to(want).contiguous();
    Tensor t;
    t.name = spec.name;
    t.dtype = spec.dtype;
    t.shape.assign(host.sizes().begin(), host.sizes().end());
    t.data.assign(static_cast<const char*>(host.data_ptr()), host.nbytes());
    result.push_back(std::move(t));
  }
  return result;
}

absl::StatusOr<std::vector<Tensor>> TorchRunner::RunOnDeviceThread(
    const std::vector<at::Tensor>& host) {
  try {
#ifdef METALSERVE_TORCH_CUDA
    std::optional<c10::cuda::CUDAStreamGuard> stream_guard;
    if (device_.device.is_cuda()) {
      // One pooled stream per calling thread, kept for the thread's life.
      thread_local std::optional<c10::cuda::CUDAStream> stream;
      if (!stream.has_value() || stream->device_index() != device_.device.index()) {
        stream = c10::cuda::getStreamFromPool(false, device_.device.index());
      }
      stream_guard.emplace(*stream);
    }
#endif
    c10::InferenceMode guard;
    c10::IValue out = module_->forward(ToDevice(host));
    return FromDevice(out);
  } catch (const c10::OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "device ", info_.device, " out of memory: ", ModelMessage(e.what())));
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (IsOutOfMemory(what)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "device ", info_.device, " out of memory: ", ModelMessage(what)));
    }
    return absl::InternalError(absl::StrCat("model ", info_.name, " failed: ",
                                            ModelMessage(what)));
  }
}

}  // namespace torch_internal

absl::StatusOr<std::unique_ptr<Runner>> CreateTorchRunner(
    const RuntimeOptions& options) {
  return torch_internal::TorchRunner::Create(options);
}

}  // namespace metalserve
