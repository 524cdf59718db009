#include "tests/integration/torch_reference.h"

#include <stdexcept>

#include <torch/script.h>

namespace metalserve::testing {

std::vector<float> ReferenceForward(const std::string& model_path,
                                    const std::vector<float>& input,
                                    const std::vector<int64_t>& shape) {
  torch::jit::script::Module module = torch::jit::load(model_path, torch::kCPU);
  module.eval();
  c10::InferenceMode guard;
  torch::Tensor x =
      torch::from_blob(const_cast<float*>(input.data()), shape, torch::kFloat32).clone();
  torch::Tensor y = module.forward({x}).toTensor().contiguous().to(torch::kFloat32);
  return std::vector<float>(y.data_ptr<float>(), y.data_ptr<float>() + y.numel());
}

}  // namespace metalserve::testing
