// Device choice and per-device memory operations. Builds against Debian's
// LibTorch 1.13 (CPU) and pip/Homebrew 2.x (CUDA, MPS); newer APIs are behind
// TORCH_VERSION_MAJOR/MINOR and METALSERVE_TORCH_CUDA (set by CMake when the
// LibTorch found has CUDA).
#include "server/runtime/torch_device.h"

#include <unistd.h>

#include <fstream>
#include <utility>

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
#endif
#ifdef __APPLE__
#include <mach/mach.h>
#endif

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace metalserve::torch_internal {
namespace {

bool MpsAvailable() {
#ifdef METALSERVE_HAS_TORCH_MPS_API
  return torch::mps::is_available();
#else
  return at::hasMPS();
#endif
}

absl::StatusOr<DeviceChoice> ChooseCuda(const std::string& requested) {
  int index = 0;
  if (requested != "cuda" &&
      (!absl::SimpleAtoi(requested.substr(5), &index) || index < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", requested, "': bad CUDA index"));
  }
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device '", requested, "' requested but CUDA is not available (LibTorch ",
        TORCH_VERSION, " has no CUDA support or no GPU is visible)"));
  }
  const int count = static_cast<int>(torch::cuda::device_count());
  if (index >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device '", requested, "' requested but only ", count,
        " CUDA device(s) are visible"));
  }
  return DeviceChoice{c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)),
                      absl::StrCat("cuda:", index)};
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

absl::StatusOr<DeviceChoice> ChooseDevice(const std::string& requested) {
  if (requested == "auto") {
    if (MpsAvailable()) return DeviceChoice{c10::Device(c10::kMPS), "mps"};
    if (torch::cuda::is_available()) {
      return DeviceChoice{c10::Device(c10::kCUDA, 0), "cuda:0"};
    }
    return DeviceChoice{c10::Device(c10::kCPU), "cpu"};
  }
  if (requested == "cpu") return DeviceChoice{c10::Device(c10::kCPU), "cpu"};
  if (requested == "mps") {
    if (!MpsAvailable()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "device 'mps' requested but MPS is not available (LibTorch ", TORCH_VERSION,
          "; needs an Apple Silicon GPU and an MPS-enabled LibTorch)"));
    }
    return DeviceChoice{c10::Device(c10::kMPS), "mps"};
  }
  if (requested == "cuda" || absl::StartsWith(requested, "cuda:")) {
    return ChooseCuda(requested);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "device '", requested, "' is not one of auto, mps, cuda, cuda:N, cpu"));
}

absl::StatusOr<std::shared_ptr<TorchDevice>> TorchDevice::Create(
    DeviceChoice choice, std::shared_ptr<DeviceThread> thread) {
#ifndef METALSERVE_TORCH_CUDA
  if (choice.device.is_cuda()) {
    return absl::FailedPreconditionError(
        "this build of metalserve has no CUDA support (LibTorch without CUDA)");
  }
#endif
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
