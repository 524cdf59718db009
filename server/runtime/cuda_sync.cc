// The --cuda_sync setting (cuda_sync.h); applied in torch_device.cc.
#include "server/runtime/cuda_sync.h"

#include <atomic>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace metalserve {
namespace {

std::atomic<CudaSync> g_mode{CudaSync::kAuto};

}  // namespace

absl::StatusOr<CudaSync> ParseCudaSync(absl::string_view name) {
  if (name == "auto") return CudaSync::kAuto;
  if (name == "spin") return CudaSync::kSpin;
  if (name == "yield") return CudaSync::kYield;
  if (name == "block") return CudaSync::kBlock;
  return absl::InvalidArgumentError(
      absl::StrCat("cuda_sync '", name, "' is not one of auto, spin, yield, block"));
}

std::string CudaSyncName(CudaSync mode) {
  switch (mode) {
    case CudaSync::kAuto: return "auto";
    case CudaSync::kSpin: return "spin";
    case CudaSync::kYield: return "yield";
    case CudaSync::kBlock: return "block";
  }
  return "auto";
}

void SetCudaSync(CudaSync mode) { g_mode.store(mode, std::memory_order_relaxed); }

CudaSync CurrentCudaSync() { return g_mode.load(std::memory_order_relaxed); }

}  // namespace metalserve
