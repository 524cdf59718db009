// Device choice and per-device memory operations. Builds against Debian's
// LibTorch 1.13 (CPU) and pip/Homebrew 2.x (CUDA, MPS); newer APIs are behind
// TORCH_VERSION_MAJOR/MINOR and METALSERVE_TORCH_CUDA (set by CMake when the
// LibTorch found has CUDA).
#include "server/runtime/torch_device.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include <torch/cuda.h>
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
#include <cuda_runtime_api.h>
#endif
#ifdef __APPLE__
#include <mach/mach.h>
#endif

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/runtime/cuda_sync.h"
#include "server/runtime/forward_path.h"

namespace metalserve::torch_internal {
namespace {

bool MpsAvailable() {
#ifdef METALSERVE_HAS_TORCH_MPS_API
  return torch::mps::is_available();
#else
  return at::hasMPS();
#endif
}

c10::Device ToDevice(const std::string& name) {
  if (name == "mps") return c10::Device(c10::kMPS);
  if (absl::StartsWith(name, "cuda:")) {
    int index = 0;
    absl::SimpleAtoi(name.substr(5), &index);
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  return c10::Device(c10::kCPU);
}

// max |a - ref| / max |ref|.
double Relative(const at::Tensor& a, const at::Tensor& ref) {
  const double scale = std::max(ref.abs().max().item<double>(), 1e-12);
  return (a - ref).abs().max().item<double>() / scale;
}

// Gives CUDA device `index` the process's --cuda_sync schedule (cuda_sync.h)
// the first time the device is seen: before its probe, which creates its
// context. Logs the schedule the device then reports. kAuto: nothing.
void ApplyCudaSync(c10::DeviceIndex index) {
  const CudaSync mode = CurrentCudaSync();
  if (mode == CudaSync::kAuto) return;
#ifdef METALSERVE_TORCH_CUDA
  static absl::Mutex mu(absl::kConstInit);
  static auto* applied = new std::vector<c10::DeviceIndex>();
  absl::MutexLock lock(&mu);
  if (std::find(applied->begin(), applied->end(), index) != applied->end()) return;
  applied->push_back(index);
  unsigned int flag = cudaDeviceScheduleAuto;
  switch (mode) {
    case CudaSync::kAuto: break;
    case CudaSync::kSpin: flag = cudaDeviceScheduleSpin; break;
    case CudaSync::kYield: flag = cudaDeviceScheduleYield; break;
    case CudaSync::kBlock: flag = cudaDeviceScheduleBlockingSync; break;
  }
  int previous = 0;
  cudaGetDevice(&previous);
  cudaError_t err = cudaSetDevice(index);
  if (err == cudaSuccess) err = cudaSetDeviceFlags(flag);
  unsigned int now = 0;
  const bool read = cudaGetDeviceFlags(&now) == cudaSuccess;
  cudaSetDevice(previous);
  if (err != cudaSuccess) {
    LOG(WARNING) << "runtime: cuda:" << static_cast<int>(index) << " keeps its sync schedule: "
                 << "--cuda_sync=" << CudaSyncName(mode) << " failed: " << cudaGetErrorString(err);
    return;
  }
  const bool took = read && (now & cudaDeviceScheduleMask) == flag;
  LOG(INFO) << "runtime: cuda:" << static_cast<int>(index) << " sync schedule "
            << CudaSyncName(mode)
            << (took ? "" : absl::StrCat(" (the device reports flags 0x", absl::Hex(now), ")"));
#else
  // Unreached: without CUDA no CUDA device is probed or created.
  (void)index;
#endif
}

}  // namespace

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

bool TorchPlatform::Available(const std::string& device, std::string* why) const {
  if (device == "mps") {
    if (MpsAvailable()) return true;
    *why = absl::StrCat("MPS is not available (LibTorch ", TORCH_VERSION,
                        "; needs an Apple Silicon GPU and an MPS-enabled LibTorch)");
    return false;
  }
  if (!absl::StartsWith(device, "cuda:")) return device == "cpu";
  if (!torch::cuda::is_available()) {
    *why = absl::StrCat("CUDA is not available (LibTorch ", TORCH_VERSION,
                        " has no CUDA support or no GPU is visible)");
    return false;
  }
  const int count = static_cast<int>(torch::cuda::device_count());
  if (ToDevice(device).index() >= count) {
    *why = absl::StrCat("only ", count, " CUDA device(s) are visible");
    return false;
  }
  return true;
}

absl::Status TorchPlatform::Probe(const std::string& device) const {
  constexpr int64_t kAllocFloats = (4 << 20) / sizeof(float);  // 4 MB
  const c10::Device d = ToDevice(device);
  if (d.is_cuda()) ApplyCudaSync(d.index());
  try {
    if (d.is_mps()) {
      const double sum = at::ones({kAllocFloats}, at::TensorOptions().device(d)).sum().item<double>();
      if (sum != static_cast<double>(kAllocFloats)) {
        return absl::InternalError(absl::StrCat("a 4 MB allocation filled with ones sums to ",
                                                sum, ", not ", kAllocFloats));
      }
    }
    at::Generator gen = at::detail::createCPUGenerator(20);
    const at::Tensor x = at::rand({64, 64}, gen, at::TensorOptions().dtype(at::kFloat)) - 0.5;
    const at::Tensor want = at::matmul(x, x).relu().sum(1);
    const at::Tensor xd = x.to(d);
    const at::Tensor got = at::matmul(xd, xd).relu().sum(1).to(at::kCPU);
    const double r = Relative(got, want);
    if (!(r <= 1e-3)) {
      return absl::InternalError(absl::StrCat(
          "a 64x64 matrix product differs from the CPU's: max relative deviation ", r));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the probe computation failed: ", ModelMessage(e.what())));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceChoice> ChooseDevice(const std::string& requested,
                                          const DevicePlatform* platform) {
  const TorchPlatform torch_platform;
  std::vector<std::string> skipped;
  ASSIGN_OR_RETURN(const std::string name,
                   ChooseDeviceName(requested, platform != nullptr ? *platform : torch_platform,
                                    &skipped));
  return DeviceChoice{ToDevice(name), name, std::move(skipped)};
}

absl::StatusOr<std::shared_ptr<TorchDevice>> TorchDevice::Create(
    DeviceChoice choice, std::shared_ptr<DeviceThread> thread) {
#ifndef METALSERVE_TORCH_CUDA
  if (choice.device.is_cuda()) {
    return absl::FailedPreconditionError(
        "this build of metalserve has no CUDA support (LibTorch without CUDA)");
  }
#endif
  if (choice.device.is_cuda()) ApplyCudaSync(choice.device.index());
  return std::shared_ptr<TorchDevice>(new TorchDevice(std::move(choice), std::move(thread)));
}

bool TorchDevice::SupportsEmptyCache() const {
  if (device().is_cuda()) return true;
#if TORCH_VERSION_MAJOR >= 2
  if (device().is_mps()) return true;
#endif
  return false;
}

void TorchDevice::EmptyCache() {
  if (device().is_mps()) {
#if TORCH_VERSION_MAJOR >= 2
    // MPS work belongs on the device thread.
    thread_->RunSync([] { at::detail::getMPSHooks().emptyCache(); }).IgnoreError();
#endif
  } else if (device().is_cuda()) {
#ifdef METALSERVE_TORCH_CUDA
    c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  }
}

MemoryStats TorchDevice::Stats() {
  if (device().is_mps()) return MpsStats();
  if (device().is_cuda()) return CudaStats();
  MemoryStats s;
  s.resident_bytes = ResidentBytes();
  return s;
}

MemoryStats TorchDevice::MpsStats() const {
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

MemoryStats TorchDevice::CudaStats() const {
  MemoryStats s;
  s.resident_bytes = ResidentBytes();
#ifdef METALSERVE_TORCH_CUDA
  const c10::DeviceIndex index = device().index();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
  s.allocated_bytes = stats.allocated_bytes[0].current;  // [0]: aggregate
  s.reserved_bytes = stats.reserved_bytes[0].current;
  size_t free_bytes = 0, total_bytes = 0;
  c10::cuda::CUDAGuard guard(index);
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    s.limit_bytes = static_cast<int64_t>(total_bytes);
  }
#endif
  return s;
}

void TorchDevice::Synchronize() {
  if (device().is_cuda()) {
    torch::cuda::synchronize(device().index());
  } else if (device().is_mps()) {
#ifdef METALSERVE_HAS_TORCH_MPS_API
    thread_->RunSync([] { torch::mps::synchronize(); }).IgnoreError();
#elif TORCH_VERSION_MAJOR >= 2
    thread_->RunSync([] { at::detail::getMPSHooks().deviceSynchronize(); }).IgnoreError();
#endif
  }
}

}  // namespace metalserve::torch_internal
