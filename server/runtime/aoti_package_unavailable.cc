// AOTInductor packages on a LibTorch without AOTInductor (before 2.6, e.g.
// Debian's 1.13): every .pt2 is refused with a clear reason. See
// aoti_package.h.
#include "server/runtime/aoti_package.h"

namespace metalserve::torch_internal {

bool HaveAotInductor() { return false; }

absl::StatusOr<CompiledPackage> LoadPackage(const std::string& path, const c10::Device&) {
  return PackageUnsupported(path);
}

}  // namespace metalserve::torch_internal
