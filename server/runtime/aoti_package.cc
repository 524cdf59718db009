// AOTInductor packages through torch::inductor::AOTIModelPackageLoader;
// compiled only against a LibTorch that has it (CMake checks). See
// aoti_package.h.
#include "server/runtime/aoti_package.h"

#include <utility>
#include <vector>

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace metalserve::torch_internal {
namespace {

int64_t MetadataInt(const std::map<std::string, std::string>& meta, const char* key,
                    int64_t fallback) {
  auto it = meta.find(key);
  int64_t v = 0;
  return it != meta.end() && absl::SimpleAtoi(it->second, &v) ? v : fallback;
}

}  // namespace

bool HaveAotInductor() { return true; }

absl::StatusOr<CompiledPackage> LoadPackage(const std::string& path, const c10::Device& device) {
  std::shared_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  try {
    // device_index: the package runs on this device of its type; -1 (CPU,
    // MPS) lets the loader choose.
    const c10::DeviceIndex index = device.is_cuda() ? device.index() : -1;
    loader = std::make_shared<torch::inductor::AOTIModelPackageLoader>(
        path, "model", /*run_single_threaded=*/false, /*num_runners=*/1, index);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot load AOTInductor package ", path,
                                                   ": ", ModelMessage(e.what())));
  }
  CompiledPackage package;
  for (const auto& [k, v] : loader->get_metadata()) package.metadata[k] = v;
  auto key = package.metadata.find("AOTI_DEVICE_KEY");
  package.device_type = key != package.metadata.end() ? key->second : "";
  if (!package.device_type.empty() && package.device_type != c10::DeviceTypeName(device.type(), true)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "AOTInductor package ", path, " was compiled for ", package.device_type,
        ", not for device ", device.str(), " (export one per device: models/export.py "
        "--format=pt2 --devices=...)"));
  }
  package.min_batch = MetadataInt(package.metadata, kPackageMinBatch, 1);
  package.max_batch = MetadataInt(package.metadata, kPackageMaxBatch, 0);
  torch::inductor::AOTIModelPackageLoader* raw = loader.get();
  package.forward = [raw](std::vector<c10::IValue> in) -> c10::IValue {
    std::vector<at::Tensor> tensors;
    tensors.reserve(in.size());
    for (c10::IValue& v : in) tensors.push_back(std::move(v).toTensor());
    // A null stream: the loader runs on the current stream, which the forward
    // path has set to the device thread's pooled one.
    std::vector<at::Tensor> out = raw->run(tensors);
    if (out.size() == 1) return c10::IValue(std::move(out[0]));
    std::vector<c10::IValue> items(out.begin(), out.end());
    return c10::ivalue::Tuple::create(std::move(items));
  };
  package.owner = std::move(loader);
  LOG(INFO) << "runtime: AOTInductor package " << path << " for " << package.device_type
            << ", batch " << package.min_batch << ".." << package.max_batch;
  return package;
}

}  // namespace metalserve::torch_internal
