// Internal to the runtime target (includes LibTorch, not AOTInductor's
// headers): an AOTInductor package (.pt2, written by torch.export +
// torch._inductor.aoti_compile_and_package; models/export.py --format=pt2) as
// an entry point for the one forward path (forward_path.h).
//
// aoti_package.cc implements it with torch::inductor::AOTIModelPackageLoader
// and is compiled only where the LibTorch found at configure time has it
// (2.6+, MPS packages 2.8+; CMake prints "AOTInductor runner: on/off").
// Elsewhere aoti_package_unavailable.cc says so: a .pt2 is then refused at
// load with FAILED_PRECONDITION naming the file (docs/aoti.md).
//
// A package is compiled for one device type and one LibTorch version; it
// holds its own weights and kernels, and accepts batch sizes in the dynamic
// range it was exported with (recorded in its metadata by export.py).
//
// Ownership: CompiledPackage owns the loader through `owner`; release it on
// the device thread. Thread-safety: call `forward` on the device thread only.
#ifndef METALSERVE_SERVER_RUNTIME_AOTI_PACKAGE_H_
#define METALSERVE_SERVER_RUNTIME_AOTI_PACKAGE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/runtime/forward_path.h"

namespace metalserve::torch_internal {

// Metadata keys export.py writes into a package (aot_inductor.metadata).
inline constexpr char kPackageMinBatch[] = "metalserve.min_batch";
inline constexpr char kPackageMaxBatch[] = "metalserve.max_batch";
inline constexpr char kPackagePrecision[] = "metalserve.precision";

struct CompiledPackage {
  std::shared_ptr<void> owner;  // the loader
  TensorForward forward;        // device inputs -> a tensor or a tuple
  std::string device_type;      // "cuda", "cpu", "mps" (its AOTI_DEVICE_KEY)
  std::map<std::string, std::string> metadata;
  int64_t min_batch = 1;  // smaller batches are padded up to it
  int64_t max_batch = 0;  // 0: not recorded
};

// Whether this runtime was built with AOTInductor.
bool HaveAotInductor();
// A model file that is an AOTInductor package: its name ends in ".pt2".
bool IsPackagePath(absl::string_view path);
// FAILED_PRECONDITION naming `path` and saying this runtime lacks AOTInductor.
absl::Status PackageUnsupported(absl::string_view path);
// Loads the package for `device` (on the device thread). INVALID_ARGUMENT
// naming the file for a package that cannot be loaded; FAILED_PRECONDITION
// when it was compiled for another device type or the runtime lacks
// AOTInductor.
absl::StatusOr<CompiledPackage> LoadPackage(const std::string& path, const c10::Device& device);

// Tests only: loads every package through `loader` instead (and counts as
// AOTInductor being present) until called with nullptr, so that the
// AotiRunner's load, verification and padding are tested where LibTorch has
// no AOTInductor (tests/runtime/aoti_runner_test.cc). Set it before loads.
using PackageLoader =
    std::function<absl::StatusOr<CompiledPackage>(const std::string& path, const c10::Device&)>;
void SetPackageLoaderForTest(PackageLoader loader);

}  // namespace metalserve::torch_internal

#endif  // METALSERVE_SERVER_RUNTIME_AOTI_PACKAGE_H_
